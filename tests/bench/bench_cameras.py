"""Cameras per machine (issue 26): N captures and N workers at once, raising N until one fails.

Run: ``python tests/bench/bench_cameras.py [--sizes 1280x720 320x240] [--seconds 30] [--start 1]
[--max 12] [--config FILE]`` (``--config`` goes to every capture and worker, e.g. ``[model] mask_resolution =
"processing"``).

For each size, the motorway video (``../shared/data/video/motorway_320x240.avi``) resized to it
(``bench_hd.make_input``), and for N = 1, 2, ...: N pairs of ``kdrsdl capture`` (looping the file
at 30 fps) and ``kdrsdl worker`` (its defaults: the thread budget it sets itself), each camera on
its own ipc endpoints, with no thread variable in their environment, as a user's shell starts
them. This process subscribes to every camera's masks. After ``--warmup`` seconds it measures for
``--seconds``: masks received against frames the captures read (every mask delivered means none
refused at a capture, none dropped or lost at a worker, none missing at the subscriber) and the
latency p99 from capture to mask received, and the CPU of the workers, the captures (``/proc``)
and this subscriber. N passes when no worker lost or dropped a frame, the masks received are at
least 97% of 30 fps x N x the window (the window's edges and the captures' start), and p99 <= 100
ms; the largest N that passes (from ``--start`` on) is reported per size, with each N's figures and the machine's load.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

import numpy as np
import zmq

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "streamer"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))
sys.path.insert(0, str(ROOT))

from bench_hd import VIDEO, make_input  # noqa: E402
from helpers import cpu_seconds, free_port, kdrsdl, metric, scrape, stop, wait_for  # noqa: E402

from core.streaming import kernels  # noqa: E402
from streamer.wire.protocol import decode  # noqa: E402

P99_LIMIT_S = 0.100


def cameras(n, path, tmp, warmup, seconds, config=()):
    """Run ``n`` cameras: frames received, lost and dropped by the workers, masks received, p99 (s), load."""
    workers, captures, ports = [], [], []
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"mask/")
    sub.setsockopt(zmq.RCVHWM, 100000)
    for i in range(n):
        port = free_port()
        frames, masks = f"ipc://{tmp}/f{n}-{i}", f"ipc://{tmp}/m{n}-{i}"
        workers.append(
            kdrsdl("worker", "--camera", f"c{i}", "--frames-endpoint", frames, "--masks-endpoint", masks,
                   "--metrics-port", port, *config, bare=True)
        )  # fmt: skip
        ports.append(port)
        sub.connect(masks)
    for port in ports:
        wait_for(lambda p=port: scrape(p), 60, "a worker's metrics")
    time.sleep(0.5)
    for i in range(n):
        captures.append(
            kdrsdl("capture", "--camera", f"c{i}", "--source", path, "--loop", "--live", "--fps", 30,
                   "--frames-endpoint", f"ipc://{tmp}/f{n}-{i}", *config, bare=True)
        )  # fmt: skip
    end_warmup = time.monotonic() + warmup
    while time.monotonic() < end_warmup:  # the warm-up's masks are read and not counted
        if sub.poll(100):
            sub.recv_multipart()
    before = [scrape(p) for p in ports]
    procs = {"worker": workers, "capture": captures}
    cpu0 = {k: sum(cpu_seconds(p.pid) for p in v) for k, v in procs.items()} | {"this": time.process_time()}
    t0 = time.monotonic()
    lat, t_end = [], time.monotonic() + seconds
    while time.monotonic() < t_end:
        if sub.poll(100):
            msg = decode(sub.recv_multipart(copy=False), "mask")
            lat.append((time.time_ns() - msg.header["t_capture_ns"]) / 1e9)
    after = [scrape(p) for p in ports]
    span = time.monotonic() - t0
    cpu1 = {k: sum(cpu_seconds(p.pid) for p in v) for k, v in procs.items()} | {"this": time.process_time()}
    cpu = {k: (cpu1[k] - cpu0[k]) / span for k in cpu0}  # shares of one core, all cameras together
    load = os.getloadavg()[0]
    for c in captures:
        stop(c)
    for w in workers:
        stop(w)
    sub.close()

    def total(name, **labels):
        return sum(metric(a, name, camera=f"c{i}", **labels) - metric(b, name, camera=f"c{i}", **labels)
                   for i, (b, a) in enumerate(zip(before, after, strict=True)))  # fmt: skip

    received = total("kdrsdl_worker_frames_received_total")
    lost = total("kdrsdl_worker_frames_lost_total")
    dropped = sum(total("kdrsdl_worker_frames_dropped_total", reason=r) for r in ("overload", "error"))
    p99 = float(np.percentile(lat, 99)) if lat else float("inf")
    counts = {"received": received, "lost": lost, "dropped": dropped, "masks": len(lat)}
    return {**counts, "p99_s": p99, "load": load, "cpu": cpu}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["1280x720", "320x240"])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=20)
    ap.add_argument("--start", type=int, default=1, help="first N (default 1; a known-good N saves minutes)")
    ap.add_argument("--max", type=int, default=12)
    ap.add_argument("--config", help="TOML file for every capture and worker")
    args = ap.parse_args()
    kernels.warm()  # compiled into numba's cache before anything is timed: workers load them
    config = ("--config", args.config) if args.config else ()
    tmp = tempfile.mkdtemp(prefix="kdrsdl-cameras-")
    print(f"source: {VIDEO}; {os.cpu_count()} cores; {args.seconds:.0f} s measured after {args.warmup:.0f} s")
    for size in args.sizes:
        path, _ = make_input(size, tmp)
        best = 0
        for n in range(args.start, args.max + 1):
            r = cameras(n, path, tmp, args.warmup, args.seconds, config)
            expected = round(30 * args.seconds * n)
            ok = r["lost"] == 0 and r["dropped"] == 0 and r["p99_s"] <= P99_LIMIT_S and r["masks"] >= 0.97 * expected
            print(
                f"{size} N={n}: {r['masks']} masks received of ~{expected} at 30 fps, worker drops "
                f"{r['dropped']:.0f}, lost {r['lost']:.0f}, p99 {1000 * r['p99_s']:.0f} ms, load {r['load']:.1f}; "
                f"CPU per camera: worker {100 * r['cpu']['worker'] / n:.0f}%, capture "
                f"{100 * r['cpu']['capture'] / n:.0f}% of a core, "
                f"this subscriber {100 * r['cpu']['this']:.0f}% for all cameras: " + ("pass" if ok else "FAIL"),
                flush=True,
            )
            if not ok:
                break
            best = n
        print(f"{size}: largest N with every mask delivered and p99 <= 100 ms: {best}", flush=True)


if __name__ == "__main__":
    main()
