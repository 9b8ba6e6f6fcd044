"""A worker's start with an empty and with a filled cache of compiled kernels (issue 46): real processes."""

import os
import threading
import time

from helpers import free_port, memory_mib, pusher, receive, start_worker, stop, subscriber, tcp, wait_for_line

from core.evaluation.scene import SyntheticScene
from streamer.ops.memory import COMPILER_LIBRARY, _mappings
from streamer.wire.protocol import encode


def compiler_resident_mib(pid):
    """The resident memory of a process's mappings of numba's compiler library, MiB."""
    with open(f"/proc/{pid}/smaps") as f:
        return sum(int(m.get("Rss", 0)) for m in _mappings(f.read()) if COMPILER_LIBRARY in str(m["path"])) / 1024


def start_and_first_mask(cache, then_line=None, seen=None):
    """Start a worker with ``NUMBA_CACHE_DIR=cache`` while frames flow at 30 fps from the start, as a
    capture started beside it sends them: (seconds to its "model ready" line, seconds from that line
    to the first mask). With ``then_line``, the frames flow on until the worker logs it (3 minutes
    at most), and 30 more frames; ``seen`` (a dict) then gets that line and the resident MiB of
    the worker's mappings of the compiler library and of all its files."""
    frames, masks = tcp(), tcp()
    push = pusher(frames)  # ZeroMQ queues until the worker binds
    scene = SyntheticScene(120, 160, seed=2)
    halt = threading.Event()

    def feed():
        t = 0
        while not halt.is_set():
            push.send_multipart(encode("frame", "cam1", "ep", t, time.time_ns(), scene.frame_uint8(t)))
            t += 1
            halt.wait(1 / 30)

    t0 = time.monotonic()
    worker = start_worker(frames, masks, free_port(), env={**os.environ, "NUMBA_CACHE_DIR": str(cache)})
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        sub = subscriber(masks, "cam1", timeout=60)
        wait_for_line(worker, "model ready in", 60)
        ready = time.monotonic()
        msg = None
        while msg is None and time.monotonic() < ready + 30:
            msg = receive(sub, 0.5)
        assert msg is not None, "no mask within 30 s of the model's readiness"
        first_mask = time.monotonic()
        sub.close()
        if then_line is not None:
            lines = wait_for_line(worker, then_line, 180)
            time.sleep(1)
            if seen is not None:
                seen.update(
                    line=lines[-1],
                    compiler_mib=compiler_resident_mib(worker.pid),
                    file_mib=memory_mib(worker.pid, "RssFile"),
                )
    finally:
        halt.set()
        feeder.join()
        push.close()
        rc, _, err = stop(worker)
    assert rc == 0, err[-2000:]
    return ready - t0, first_mask - ready


def test_the_first_mask_comes_at_once_on_an_empty_cache_and_the_kernels_load_from_it_next_time(tmp_path):
    cache = tmp_path / "numba"
    # the worker does not wait for the compiler (15-20 s): a child process fills the cache while
    # the model runs the numpy reference, and the compiled kernels take over mid-stream
    cold_ready, cold_mask = start_and_first_mask(cache, then_line="compiled kernels loaded")
    assert list(cache.rglob("*global_offset*.nbi")), "the compiled kernels were not cached in NUMBA_CACHE_DIR"
    # with the cache filled, a thread loads the kernels while the first frames run numpy, and the
    # compiled steps take over (the log line comes only once they run)
    seen: dict = {}
    warm_ready, warm_mask = start_and_first_mask(cache, then_line="compiled kernels loaded", seen=seen)
    print(
        f"\nstart to ready: empty cache {cold_ready:.1f} s, filled {warm_ready:.1f} s; "
        f"ready to first mask {cold_mask:.2f} / {warm_mask:.2f} s; {seen}"
    )
    # Loading the kernels read about 68 MiB of LLVM's code, and the start tens of MiB more of
    # the other libraries'; once the kernels run, the worker drops those pages from its resident
    # set, and a second after they took over (30 frames, a refit's first iterations) only what it
    # runs has come back (the imports' pages went before the kernels' loading). Measured: 94 MiB
    # released at the takeover, 2 MiB of LLVM left (the library's relocated data) and 18 MiB of
    # file pages in all in a long-used checkout; 153, 2 and 41 in a fresh clone, whose
    # just-installed libraries are resident in larger amounts (docs/results.md, "Speed").
    # Releasing LLVM's pages alone left 55 of 67. The bounds: at least 60 MiB released, at most
    # 8 of LLVM left, and less than half of what was released resident in all.
    released = float(seen["line"].split("(")[-1].split()[0])
    assert "MiB of the libraries' pages released" in seen["line"]
    assert released >= 60, seen
    assert seen["compiler_mib"] < 8, seen
    assert seen["file_mib"] < released / 2, seen
    # issue 46: the first mask at most 3 s after the first frame on an empty cache. The first frame
    # is sent as the worker process starts; its imports (numpy, OpenCV, ZeroMQ, numba: 1-2 s here)
    # come before any mask whatever the cache, so the bound is on the rest: from "model ready"
    # (measured 0.05-0.3 s either way; 3 s is the bound)
    assert cold_mask < 3.0 and warm_mask < 3.0
    # an empty cache no longer holds up the start: at most 2 s more than a filled one (both start
    # on numpy while a thread loads the kernels), where waiting for the compiler took 15-20 s more
    assert cold_ready < warm_ready + 2.0


def test_a_worker_that_cannot_cache_the_kernels_says_so_and_runs_with_numpy():
    # numba finds nowhere to cache (as on a read-only root without NUMBA_CACHE_DIR): its locators
    # are narrowed to one that never applies outside IPython
    env = {**os.environ, "NUMBA_CACHE_LOCATOR_CLASSES": "numba.core.caching.IPythonCacheLocator"}
    env.pop("NUMBA_CACHE_DIR", None)
    worker = start_worker(tcp(), tcp(), free_port(), env=env)
    rc = worker.wait(60)  # it exits by itself: a configuration error
    err = worker.stderr.read().decode()
    assert rc == 78, err[-2000:]
    assert "NUMBA_CACHE_DIR" in err and "kernel = 'numpy'" in err and "Traceback" not in err
    # the way out it names: the numpy reference needs no compiled code. It drops the pages its
    # imports read once they are done, and at its first frame those the rest of its start read.
    # Measured: 40 + 13 MiB released and 14 MiB of file pages resident a second later in a
    # long-used checkout, 72 + 33 and 30 in a fresh clone. The bounds: at least 15 MiB released,
    # and less resident than that.
    frames = tcp()
    worker = start_worker(frames, tcp(), free_port(), "--kernel", "numpy", env=env)
    push = pusher(frames)
    try:
        ready = wait_for_line(worker, "model ready in", 60)[-1]
        scene = SyntheticScene(120, 160, seed=2)
        for t in range(3):
            push.send_multipart(encode("frame", "cam1", "ep", t, time.time_ns(), scene.frame_uint8(t)))
        line = wait_for_line(worker, "MiB of the libraries' pages released at frame", 60)[-1]
        time.sleep(1)
        resident = memory_mib(worker.pid, "RssFile")
    finally:
        push.close()
        rc, _, err = stop(worker)
    assert rc == 0, err[-2000:]
    print(f"\n{ready.strip()}\n{line.strip()}; {resident:.0f} MiB of file pages resident a second later")
    released = float(ready.split("; ")[-1].split()[0]) + float(line.split("started: ")[1].split()[0])
    assert released >= 15 and resident < released, (ready, line, resident)
