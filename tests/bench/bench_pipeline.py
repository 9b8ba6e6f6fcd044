"""Pipeline benchmark (issue 3): capture + worker + subscriber on the real motorway video.

Run: ``python tests/bench/bench_pipeline.py [SECONDS]``. Three processes on this machine, over
ZeroMQ ipc. Phase 1: source at 30 fps (looping) for SECONDS: end-to-end latency (capture
timestamp to mask received) p50/p95/p99, worker CPU and RSS sampled every 5 s, and the worker's
peak RSS. Phase 2: source unthrottled for SECONDS: sustained masks per second and the drops.
Beside it: OpenCV MOG2's fps on the same frames in this process.
"""

import pathlib
import sys
import tempfile
import time

import cv2
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
    start_capture,
    start_worker,
    stop,
    subscriber,
    wait_for,
)

VIDEO = ROOT.parent / "shared" / "data" / "video" / "motorway_320x240.avi"


def phase(fps, seconds, tmp):
    frames, masks, wport = f"ipc://{tmp}/f{fps}", f"ipc://{tmp}/m{fps}", free_port()
    source = str(VIDEO) if VIDEO.exists() else "synthetic"
    worker = start_worker(frames, masks, wport, camera="bench")
    wait_for(lambda: scrape(wport), 30, "worker metrics")
    sub = subscriber(masks, "bench")
    cap = start_capture(frames, source, "--loop", "--live", "--fps", fps, camera="bench")
    lat, samples = [], []
    t0 = time.monotonic()
    next_sample = t0
    while time.monotonic() - t0 < seconds:
        msg = receive(sub, 0.5)
        if msg is not None:
            lat.append((time.time_ns() - msg.header["t_capture_ns"]) / 1e9)
        if time.monotonic() >= next_sample:
            s = scrape(wport)  # None when the endpoint was too busy to answer in 2 s: skip the sample
            if s is not None:
                samples.append(
                    (
                        time.monotonic() - t0,
                        s.get(("process_cpu_seconds_total", frozenset()), 0),
                        s.get(("process_resident_memory_bytes", frozenset()), 0) / 2**20,
                    )
                )
            next_sample += 5
    elapsed = time.monotonic() - t0
    s = wait_for(lambda: scrape(wport), 30, "the worker's final metrics")
    peak = memory_mib(worker.pid, "VmHWM")
    stop(cap)
    stop(worker)
    sub.close()
    dropped = metric(s, "kdrsdl_worker_frames_dropped_total", camera="bench", reason="overload")
    return np.array(lat), elapsed, samples, s, dropped, peak


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    tmp = tempfile.mkdtemp(prefix="kdrsdl-bench-")
    print(f"source: {VIDEO if VIDEO.exists() else 'synthetic (no ../shared)'}, 320 x 240")
    lat, elapsed, samples, s, dropped, peak = phase(30, seconds, tmp)
    p50, p95, p99 = (1000 * np.percentile(lat, q) for q in (50, 95, 99))
    print(
        f"30 fps input, {elapsed:.0f} s: {len(lat)} masks ({len(lat) / elapsed:.1f}/s), latency ms "
        f"p50 {p50:.1f}  p95 {p95:.1f}  p99 {p99:.1f}  max {1000 * lat.max():.1f}; worker drops {dropped:.0f}"
    )
    cpu = np.diff([c for _, c, _ in samples]) / np.diff([t for t, _, _ in samples])
    rss = [r for _, _, r in samples]
    print(
        f"  worker CPU {100 * np.median(cpu):.0f}% of a core (median); RSS MiB over time: "
        + " ".join(f"{r:.0f}" for r in rss)
        + f"; peak (VmHWM) {peak:.0f}"
    )
    lat, elapsed, _, s, dropped, _ = phase(0, seconds, tmp)
    processed = metric(s, "kdrsdl_worker_frames_processed_total", camera="bench")
    print(
        f"unthrottled, {elapsed:.0f} s: {len(lat) / elapsed:.1f} masks/s received "
        f"({processed:.0f} processed, {dropped:.0f} dropped by the worker as overload)"
    )
    cap = cv2.VideoCapture(str(VIDEO)) if VIDEO.exists() else None
    frames = []
    while cap is not None:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(f, cv2.COLOR_BGR2GRAY))
    if frames:
        mog2 = cv2.createBackgroundSubtractorMOG2(detectShadows=False)
        t0 = time.perf_counter()
        for f in frames:
            mog2.apply(f)
        print(
            f"OpenCV MOG2 on the same {len(frames)} frames, in-process: "
            f"{len(frames) / (time.perf_counter() - t0):.0f} fps"
        )


if __name__ == "__main__":
    main()
