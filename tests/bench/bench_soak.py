"""Soak benchmark (issue 6): the whole pipeline on the real motorway video, looping at 30 fps.

Run: ``python tests/bench/bench_soak.py [MINUTES]`` (default 10). Capture, worker (checkpointing
every 60 s) and an in-process subscriber over ZeroMQ ipc. Every 10 s: RSS and open file
descriptors of both processes (from /proc). Per minute: masks received and latency (capture
timestamp to mask received) p50/p99. At the end: RSS growth after the 2-minute warm-up, the file
descriptor counts, and the frame accounting across both processes:
read = sent + refused (capture), sent = received + lost, received = processed + dropped (worker);
"unexplained" is what none of these counters covers (must be 0). Beside it, the same check for
OpenCV MOG2 in a process of its own on the same frames, as a peer for memory.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "streamer"))
sys.path.insert(0, str(ROOT))

from helpers import (  # noqa: E402
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
    wait_for,
)

from core.streaming import kernels  # noqa: E402

VIDEO = ROOT.parent / "shared" / "data" / "video" / "motorway_320x240.avi"
WARMUP_S = 120
SAMPLE_S = 10

#: A peer for memory: MOG2 on the same looping video at 30 fps, RSS printed every 10 s.
MOG2_PEER = """
import sys, time, cv2
cap, mog2 = cv2.VideoCapture(sys.argv[1]), cv2.createBackgroundSubtractorMOG2(detectShadows=False)
end, nxt, t = time.monotonic() + float(sys.argv[2]), time.monotonic(), 0
while time.monotonic() < end:
    ok, f = cap.read()
    if not ok:
        cap.release(); cap = cv2.VideoCapture(sys.argv[1]); continue
    mog2.apply(cv2.cvtColor(f, cv2.COLOR_BGR2GRAY))
    nxt += 1 / 30
    time.sleep(max(0, nxt - time.monotonic()))
"""


def proc_stats(pid):
    """(RSS in MiB, open file descriptors) of a live process, from /proc."""
    return memory_mib(pid), len(os.listdir(f"/proc/{pid}/fd"))


def growth(series, t):
    """Relative growth of the median of the last minute over the median of the minute after warm-up."""
    series, t = np.asarray(series), np.asarray(t)
    base = np.median(series[(t >= WARMUP_S) & (t < WARMUP_S + 60)])
    last = np.median(series[t >= t[-1] - 60])
    return (last - base) / base, base, last


def main():
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 10
    kernels.warm()  # compiled into numba's cache before anything is timed: workers load them
    seconds = 60 * minutes
    if not VIDEO.exists():
        sys.exit(f"needs the motorway video at {VIDEO}")
    tmp = tempfile.mkdtemp(prefix="kdrsdl-soak-")
    frames, masks, wport, cport = f"ipc://{tmp}/frames", f"ipc://{tmp}/masks", free_port(), free_port()
    worker = start_worker(frames, masks, wport, "--state-dir", tmp, "--checkpoint-interval", 60, camera="soak")
    wait_for(lambda: scrape(wport), 30, "worker metrics")
    sub = subscriber(masks, "soak")
    cap = start_capture(
        frames,
        VIDEO,
        "--loop",
        "--live",
        "--fps",
        30,
        "--metrics-port",
        cport,
        camera="soak",
    )
    peer = subprocess.Popen([sys.executable, "-c", MOG2_PEER, str(VIDEO), str(seconds)])
    samples = []  # (t, worker rss, worker fds, capture rss, capture fds, mog2 rss)
    lat = []  # (t, latency s)
    seqs = []
    t0 = time.monotonic()
    next_sample = t0
    print(f"soak: {VIDEO.name} looping at 30 fps for {minutes:g} min", flush=True)
    while time.monotonic() - t0 < seconds:
        msg = receive(sub, 0.5)
        now = time.monotonic() - t0
        if msg is not None:
            lat.append((now, (time.time_ns() - msg.header["t_capture_ns"]) / 1e9))
            seqs.append(msg.header["seq"])
        if time.monotonic() >= next_sample:
            next_sample += SAMPLE_S
            samples.append(
                (
                    now,
                    *proc_stats(worker.pid),
                    *proc_stats(cap.pid),
                    proc_stats(peer.pid)[0] if peer.poll() is None else np.nan,
                )
            )
            if len(samples) % 6 == 0:
                w = samples[-1]
                print(
                    f"  {now / 60:4.1f} min: worker {w[1]:.0f} MiB {w[2]} fds, capture {w[3]:.0f} MiB "
                    f"{w[4]} fds, MOG2 peer {w[5]:.0f} MiB, {len(lat)} masks",
                    flush=True,
                )
    rc_cap, _, err_cap = stop(cap)
    s = wait_for(lambda: scrape(wport), 30, "the worker's final metrics")
    time.sleep(2)  # the last frames in flight
    s = scrape(wport)
    rc_worker, _, err_worker = stop(worker)
    peer.wait()
    sub.close()
    shutil.rmtree(tmp, ignore_errors=True)
    read, sent = sent_from_log(err_cap)
    m = {k: metric(s, f"kdrsdl_worker_frames_{k}_total", camera="soak") for k in ("received", "processed", "lost")}
    dropped = {
        r: metric(s, "kdrsdl_worker_frames_dropped_total", camera="soak", reason=r)
        for r in ("overload", "shutdown", "error")
    }
    unexplained = (sent - m["received"] - m["lost"]) + (m["received"] - m["processed"] - sum(dropped.values()))

    lat_t, lat_v = np.array(lat).T
    print(f"\nexit codes: capture {rc_cap}, worker {rc_worker}")
    print("latency by minute (ms):  minute  masks  p50  p99  max")
    for k in range(int(np.ceil(minutes))):
        sel = lat_v[(lat_t >= 60 * k) & (lat_t < 60 * (k + 1))] * 1000
        if len(sel):
            print(
                f"                         {k + 1:6d} {len(sel):6d} {np.percentile(sel, 50):4.1f} "
                f"{np.percentile(sel, 99):4.1f} {sel.max():5.1f}"
            )
    t = [x[0] for x in samples]
    for name, col in (("worker", 1), ("capture", 3), ("MOG2 peer", 5)):
        g, base, last = growth([x[col] for x in samples], t)
        print(
            f"RSS {name}: {base:.0f} MiB after warm-up -> {last:.0f} MiB in the last minute ({100 * g:+.1f}%); "
            f"max {np.nanmax([x[col] for x in samples]):.0f} MiB"
        )
    for name, col in (("worker", 2), ("capture", 4)):
        fds = [x[col] for x in samples if x[0] >= WARMUP_S]
        print(f"open fds {name}: min {min(fds)} max {max(fds)} after warm-up")
    print(
        f"frames: read {read}, sent {sent} (refused {read - sent}), received {m['received']:.0f}, "
        f"lost {m['lost']:.0f}, processed {m['processed']:.0f}, dropped {dropped}; unexplained {unexplained:.0f}"
    )
    print(f"masks received by the subscriber: {len(seqs)}, sequence gaps {int(np.sum(np.diff(seqs) - 1))}")


if __name__ == "__main__":
    main()
