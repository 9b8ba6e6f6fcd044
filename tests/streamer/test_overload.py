"""Overload (issue 6): a source at least 2x faster than the worker for 60 s.

Memory and latency stay bounded, and every frame is accounted for.
"""

import threading
import time

import pytest
from conftest import MOTORWAY, need
from helpers import (
    free_port,
    memory_mib,
    metric,
    receive,
    scrape,
    sent_from_log,
    start_capture,
    start_worker,
    stop,
    subscriber,
    tcp,
    wait_for,
    wait_for_metrics,
)

DURATION_S = 60
# The capture reads about 900 frames/s of this video here. The default per-frame path (~600 masks/s
# in the worker) is now too fast for a 2x premise that holds on a loaded machine, so the worker runs
# the per-frame core fit (frame_model = "fit", ~240 frames/s in-process): the source is about 4x
# faster, and both slow down alike when the machine is busy. >= 2x is asserted below.
FPS = 1000
#: The worker's flags that make it the slower side (the overload handling is what is tested).
SLOW_WORKER = ("--frame-model", "fit")
#: Bounds on the anonymous resident memory (``RssAnon``, MiB): what the process allocated (heap,
#: arrays, numba's compiled code), the part an overload could grow. The whole RSS also counts the
#: shared libraries' file pages, and how many of those a process maps depends on the page cache's
#: state, not on the process: the same code and packages gave the worker an RSS of 427 MiB and the
#: capture 152 in a fresh clone (455 once, over the old RSS bound of 450) against 347 and 100 in an
#: older one, while their anonymous memory was 224 and 48 against 226 and 48 (2026-11-28); importing
#: cv2 and numpy took 70 MiB of RSS in the fresh clone and 45 after dropping the page cache. So RSS
#: is printed, not bounded. The worker's anonymous memory: the 30-frame window and the solver's
#: (30, 240, 320) float32 arrays (~9 MiB each, about ten during a refit), the heap the held-heap
#: setting keeps for the next refit (up to 128 MiB, streamer/ops/memory.py), numba's and LLVM's own;
#: the bounds leave about 100 MiB and 30 MiB over those peaks, where a queue of frames growing at
#: this overload (75 KB a frame, 700 a second) would pass them within seconds.
ANON_BOUND_MIB = {"worker": 330, "capture": 80}


@pytest.mark.timeout(300)
@pytest.mark.shared_data
def test_source_2x_faster_than_the_worker_for_60_s():
    video = need(MOTORWAY)
    frames, masks, wport, cport = tcp(), tcp(), free_port(), free_port()
    worker = start_worker(frames, masks, wport, *SLOW_WORKER)
    wait_for_metrics(worker, wport)
    sub = subscriber(masks, "cam1")
    # --live: the file stands for a camera (a file alone is never dropped: the capture would wait)
    cap = start_capture(frames, video, "--loop", "--live", "--fps", FPS, "--metrics-port", cport)
    rss = {"worker": [], "capture": []}
    anon = {"worker": [], "capture": []}
    latencies = []
    done = threading.Event()

    def sample():
        while not done.wait(1.0):
            for name, proc in (("worker", worker), ("capture", cap)):
                if proc.poll() is None:
                    try:
                        rss[name].append(memory_mib(proc.pid))
                        anon[name].append(memory_mib(proc.pid, "RssAnon"))
                    except (FileNotFoundError, ProcessLookupError):  # it ended between poll and read
                        pass

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    try:
        while cap.poll() is None and time.monotonic() - t0 < DURATION_S:
            msg = receive(sub, 0.5)
            if msg is not None:
                latencies.append((time.monotonic() - t0, msg.header["latency_s"]))
        rc, _, err = stop(cap)  # SIGTERM: a clean stop that logs what it read and sent
        elapsed = time.monotonic() - t0
        assert rc == 0, err[-3000:]
        read, sent = sent_from_log(err)

        def settled():
            s = scrape(wport)
            done_ = sum(
                metric(s, "kdrsdl_worker_frames_dropped_total", camera="cam1", reason=r)
                for r in ("overload", "shutdown", "error")
            )
            received = metric(s, "kdrsdl_worker_frames_received_total", camera="cam1")
            return s if received == metric(s, "kdrsdl_worker_frames_processed_total", camera="cam1") + done_ else None

        s = wait_for(settled, 30, "the worker to settle")
    finally:
        done.set()
        sub.close()
        stop(cap)
        rc_w, _, err_w = stop(worker)
    assert rc_w == 0, err_w[-3000:]

    processed = metric(s, "kdrsdl_worker_frames_processed_total", camera="cam1")
    received = metric(s, "kdrsdl_worker_frames_received_total", camera="cam1")
    lost = metric(s, "kdrsdl_worker_frames_lost_total", camera="cam1")
    overload = metric(s, "kdrsdl_worker_frames_dropped_total", camera="cam1", reason="overload")
    print(
        f"\n{elapsed:.0f} s: read {read} ({read / elapsed:.0f}/s), sent {sent}, received {received:.0f}, "
        f"processed {processed:.0f} ({processed / elapsed:.0f}/s), overload drops {overload:.0f}, lost {lost:.0f}; "
        f"RSS max worker {max(rss['worker']):.0f} MiB, capture {max(rss['capture']):.0f} MiB "
        f"(anonymous {max(anon['worker']):.0f} and {max(anon['capture']):.0f}); "
        f"latency max {max(lat for _, lat in latencies) * 1000:.0f} ms"
    )
    assert elapsed >= DURATION_S
    # the premise: the source really was >= 2x faster than the worker (about 4x: most frames are dropped)
    assert read >= 2 * processed
    # every frame is accounted for, exactly: the capture's read = sent + refused at its high-water mark
    # (its log), and every frame sent was received or counted lost, then processed or counted dropped
    assert received + lost == sent
    assert (
        processed + overload + metric(s, "kdrsdl_worker_frames_dropped_total", camera="cam1", reason="shutdown")
        == received
    )
    assert overload > 0
    # memory stays bounded (growth over a long run is the soak benchmark's, tests/bench/bench_soak.py)
    for name, bound in ANON_BOUND_MIB.items():
        assert max(anon[name]) < bound, (name, max(anon[name]))
    # latency stays bounded: the backlog holds 2 frames, so a mask is never more than a few frames old
    # (measured: at most 0.1-0.2 s alone, 0.66 s with another process busy on one of the two cores).
    # Unbounded queueing at this overload would add about 0.7 s of delay per second of the run, tens of
    # seconds by the end: 2 s is wide for a busy machine and still fails on a queue that grows.
    assert max(lat for t, lat in latencies if t > 10) < 2.0
