"""Camera resolutions (issue 14): the full pipeline at 320x240 to 1920x1080, 30 fps, for minutes.

Run: ``python tests/bench/bench_hd.py [--seconds 300] [--sizes 1280x720 ...]
[--json PATH] [--config FILE]`` (``--config`` goes to the capture and the worker).

Inputs are made from the real motorway video (``../shared/data/video/motorway_320x240.avi``, 750
frames) resized to each size and written as MJPG AVI files in a temporary directory. For each size,
capture, worker and subscriber run as three processes over ZeroMQ ipc, the capture reading the file
in a loop at 30 fps for ``--seconds`` (several window refits), the worker at its defaults
(processing at ``model.processing_side``, masks at the input resolution). Reported: masks received
and frames lost or dropped at either end (the capture's refusals at the high-water mark, the
worker's overload drops), end-to-end latency p50 / p99, the worker's CPU (a share of one core, from
``/proc``: the refit thread, or the refits' child process with ``refit_process``, included; the
refits' own from ``kdrsdl_refit_cpu_seconds_total``) and peak RSS, the
capture's CPU (from ``/proc``, decoding included), the worker's refits (count and mean seconds), the
mask's shape, and the time the worker takes to exit after SIGTERM. At the end of the run, before the
stop: the worker's peak as the kernel records it (``VmHWM``, the start included) and its resident
memory's anonymous and file-backed parts (``RssAnon``, ``RssFile``), and its child processes' resident
memory (the refits' child with ``refit_process``). Beside it: OpenCV MOG2 on the
same decoded frames, in this process, one thread, at the input resolution and at the worker's
processing resolution (the frames reduced as the model reduces them; its CPU at 30 fps is 30 / fps
of a core, its ``apply`` alone). The capture and the worker start with no thread variable in their
environment, as from a user's shell: the worker sets its own BLAS and OpenCV threads.
"""

import argparse
import json
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
    child_pids,
    cpu_seconds,
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
from core.streaming.params import PROCESSING_SIDE  # noqa: E402
from core.streaming.resolution import processing_shape, reduce  # noqa: E402

VIDEO = ROOT.parent / "shared" / "data" / "video" / "motorway_320x240.avi"
SIZES = ("320x240", "640x480", "1280x720", "1920x1080")


def make_input(size, tmp):
    """The motorway video resized to ``size`` as an MJPG AVI; its path and its frames (grayscale)."""
    w, h = (int(v) for v in size.split("x"))
    path = pathlib.Path(tmp) / f"motorway_{size}.avi"
    cap = cv2.VideoCapture(str(VIDEO))
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30, (w, h))
    while True:
        ok, f = cap.read()
        if not ok:
            break
        out.write(cv2.resize(f, (w, h), interpolation=cv2.INTER_LINEAR))
    out.release()
    frames, cap = [], cv2.VideoCapture(str(path))
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(f, cv2.COLOR_BGR2GRAY))
    return path, frames


def mog2_fps(frames):
    sub = cv2.createBackgroundSubtractorMOG2(detectShadows=False)
    t0 = time.perf_counter()
    for f in frames:
        sub.apply(f)
    return len(frames) / (time.perf_counter() - t0)


def pipeline(path, seconds, tmp, tag, config=()):
    frames_ep, masks_ep, port = f"ipc://{tmp}/f{tag}", f"ipc://{tmp}/m{tag}", free_port()
    worker = start_worker(frames_ep, masks_ep, port, *config, camera="hd", bare=True)
    wait_for(lambda: scrape(port), 60, "worker metrics")
    sub = subscriber(masks_ep, "hd")
    cap = start_capture(frames_ep, path, "--loop", "--live", "--fps", 30, *config, camera="hd", bare=True)
    lat, samples, shapes, first = [], [], set(), None
    t0 = time.monotonic()
    next_sample = t0
    while time.monotonic() - t0 < seconds:
        msg = receive(sub, 0.5)
        if msg is not None:
            lat.append((time.time_ns() - msg.header["t_capture_ns"]) / 1e9)
            shapes.add(
                (
                    tuple(msg.image.shape),
                    msg.header.get("mask_resolution"),
                    tuple(msg.header.get("processing_shape") or ()),
                )
            )
        if time.monotonic() >= next_sample:
            s = scrape(port)
            if s is not None:
                samples.append(
                    (
                        time.monotonic(),
                        cpu_seconds(worker.pid),  # its refits' child too (refit_process)
                        s.get(("process_resident_memory_bytes", frozenset()), 0.0) / 2**20,
                        cpu_seconds(cap.pid),
                        metric(s, "kdrsdl_refit_cpu_seconds_total", camera="hd"),
                    )
                )
                if first is None and metric(s, "kdrsdl_solver_starts_total", camera="hd", mode="warm") >= 1:
                    first = samples[-1]  # CPU is averaged from the first warm refit on (after the warm-up)
            next_sample += 5
    _, _, cap_err = stop(cap)
    time.sleep(1.0)  # the last frames in flight
    while receive(sub, 0.2) is not None:
        lat.append(np.nan)  # counted, latency not comparable after the capture stopped
    s = wait_for(lambda: scrape(port), 30, "the worker's final metrics")
    memory = {f: memory_mib(worker.pid, f) for f in ("VmHWM", "RssAnon", "RssFile")}
    children_mib = sum(memory_mib(c, "VmRSS") for c in child_pids(worker.pid))
    t_stop = time.monotonic()
    code, _, err = stop(worker, timeout=60)
    stop_s = time.monotonic() - t_stop
    sub.close()
    read, sent = sent_from_log(cap_err)
    start = first or samples[0]
    span = max(samples[-1][0] - start[0], 1e-9)
    cpu, capture_cpu = (samples[-1][1] - start[1]) / span, (samples[-1][3] - start[3]) / span
    refit_cpu = (samples[-1][4] - start[4]) / span  # the refits landed in the span: their thread's CPU
    lat = np.array(lat)
    ok = lat[np.isfinite(lat)]
    n_refits = sum(metric(s, "kdrsdl_solver_starts_total", camera="hd", mode=m) for m in ("cold", "warm"))
    refit_s = metric(s, "kdrsdl_refit_duration_seconds_sum", camera="hd") / max(
        metric(s, "kdrsdl_refit_duration_seconds_count", camera="hd"), 1
    )
    return {
        "seconds": seconds,
        "frames_read": read,
        "frames_sent": sent,
        "refused_at_capture": read - sent,
        "masks": int(len(lat)),
        "worker_lost": metric(s, "kdrsdl_worker_frames_lost_total", camera="hd"),
        "worker_dropped": sum(
            metric(s, "kdrsdl_worker_frames_dropped_total", camera="hd", reason=r)
            for r in ("overload", "error", "shutdown")
        ),
        "latency_ms_p50": 1000 * float(np.percentile(ok, 50)),
        "latency_ms_p99": 1000 * float(np.percentile(ok, 99)),
        "worker_cpu_core": cpu,
        "worker_refit_cpu_core": refit_cpu,
        "worker_rss_mib_peak": max(sample[2] for sample in samples),
        "worker_vmhwm_mib": memory["VmHWM"],
        "worker_anon_mib": memory["RssAnon"],
        "worker_file_mib": memory["RssFile"],
        "worker_children_rss_mib": children_mib,
        "capture_cpu_core": capture_cpu,
        "refits": int(n_refits),
        "refit_seconds_mean": refit_s,
        "mask": sorted(shapes),
        "stop_seconds": stop_s,
        "worker_exit": code,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300, help="seconds per size (default 300)")
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), help="WxH inputs (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--config", help="TOML file for the capture and the worker")
    args = ap.parse_args()
    kernels.warm()  # compiled into numba's cache before anything is timed: workers load them
    config = ("--config", args.config) if args.config else ()
    if not VIDEO.exists():
        raise SystemExit(f"{VIDEO} is missing")
    cv2.setNumThreads(1)
    tmp = tempfile.mkdtemp(prefix="kdrsdl-hd-")
    out = {}
    for i, size in enumerate(args.sizes):
        path, frames = make_input(size, tmp)
        r = pipeline(path, args.seconds, tmp, i, config)
        r["mog2_fps"] = mog2_fps(frames)
        proc = processing_shape(frames[0].shape, PROCESSING_SIDE)
        r["mog2_processing_fps"] = mog2_fps([reduce(f, proc) for f in frames])
        out[size] = r
        print(
            f"{size:>9}: {r['masks']} masks for {r['frames_sent']} sent ({r['refused_at_capture']} refused at the "
            f"capture, {r['worker_dropped']:.0f} dropped and {r['worker_lost']:.0f} lost at the worker); latency "
            f"p50 {r['latency_ms_p50']:.1f} p99 {r['latency_ms_p99']:.1f} ms; worker {100 * r['worker_cpu_core']:.0f}% "
            f"of a core (refits {100 * r['worker_refit_cpu_core']:.0f}%), RSS peak {r['worker_rss_mib_peak']:.0f} MiB "
            f"(at the end: VmHWM {r['worker_vmhwm_mib']:.0f}, anonymous {r['worker_anon_mib']:.0f}, files "
            f"{r['worker_file_mib']:.0f}; its child processes {r['worker_children_rss_mib']:.0f}); "
            f"capture {100 * r['capture_cpu_core']:.0f}% of "
            f"a core; {r['refits']} refits, {r['refit_seconds_mean']:.2f} s each; mask {r['mask']}; "
            f"stop {r['stop_seconds']:.1f} s "
            f"(exit {r['worker_exit']}); MOG2 {r['mog2_fps']:.0f} fps at full size, "
            f"{r['mog2_processing_fps']:.0f} fps at {proc[1]}x{proc[0]} = "
            f"{3000 / r['mog2_processing_fps']:.1f}% of a core at 30 fps",
            flush=True,
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
