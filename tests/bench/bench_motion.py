"""Cost of regions, zones, events and the live view on the worker (issue 24).

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_motion.py [--frames N] [--seconds S]``.

Part 1, in this process, per frame at 320 x 240 (CDnet highway from ../shared when present, else
the synthetic scene): the model's masks are made first (async refits, as the worker runs it);
then, on those masks, the motion stage as the worker runs it (its regions labelled by the
model's compiled kernel when it is loaded) with the defaults (regions and whole-frame events), with
two zones and an ignored area (the fill before the model included), the live view's ``offer``
with no viewer, and one preview frame drawn and encoded (what a viewer costs per JPEG). Each is
the best of 3 rounds (the machine is shared), beside OpenCV MOG2's ``apply`` on the same frames
in the same run.

Part 2, real processes: a worker fed at 30 fps by ``kdrsdl capture`` looping the same frames'
video (the motorway video, or the synthetic scene), for S seconds after a warm-up, three ways:
no zones; two zones and an ignored area; the same with one viewer reading the MJPEG stream at
5 fps. The worker's CPU is read from ``/proc/PID/stat`` over the measured window.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import threading
import time
import urllib.request

import cv2
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "streamer"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_stream import frames  # noqa: E402
from helpers import cpu_seconds, free_port, scrape, start_capture, start_worker, stop, wait_for  # noqa: E402

from core.streaming.background import KDRSDLBackgroundSubtractor  # noqa: E402
from streamer.config import MotionConfig, ZoneConfig  # noqa: E402
from streamer.motion.stage import MotionStage  # noqa: E402
from streamer.processes.view import LiveView  # noqa: E402

VIDEO = ROOT.parent / "shared" / "data" / "video" / "motorway_320x240.avi"
ZONES = [
    ZoneConfig(name="near_lane", polygon=[(0, 120), (319, 120), (319, 239), (0, 239)]),
    ZoneConfig(name="far_lane", polygon=[(100, 40), (220, 40), (260, 119), (60, 119)]),
]
IGNORE = [[(0, 0), (90, 0), (90, 20), (0, 20)]]
ZONES_TOML = """
[motion]
ignore = [[[0, 0], [90, 0], [90, 20], [0, 20]]]
[[motion.zones]]
name = "near_lane"
polygon = [[0, 120], [319, 120], [319, 239], [0, 239]]
[[motion.zones]]
name = "far_lane"
polygon = [[100, 40], [220, 40], [260, 119], [60, 119]]
"""


def best_ms(fn, items, rounds=3):
    """Best over ``rounds`` of the mean time of ``fn(item)``, milliseconds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        best = min(best, (time.perf_counter() - t0) / len(items))
    return 1000 * best


def in_process(n):
    name, X = frames(n)
    model = KDRSDLBackgroundSubtractor(async_refit=True)
    masks = [model.apply(f).copy() for f in X]
    model.close(wait=10)
    headers = [{"epoch": "e", "seq": i, "t_capture_ns": i} for i in range(len(X))]
    pairs = list(zip(X, masks, headers, strict=True))
    compiled = model.compiled  # the worker labels the regions with the model's kernels once they are loaded
    print(
        f"part 1: {name}, {len(X)} frames, mean foreground {np.mean([m.mean() / 255 for m in masks]):.3f}, "
        f"regions labelled by {'the compiled kernel' if compiled else 'OpenCV'}"
    )

    def stage_cost(cfg):
        stage = MotionStage(cfg)

        def one(p):
            frame, mask, h = p
            stage.prepare(frame)
            return stage.update(mask, frame.shape, h, compiled=compiled)

        return best_ms(one, pairs), stage

    default_ms, _ = stage_cost(MotionConfig())
    zones_ms, stage = stage_cost(MotionConfig(zones=ZONES, ignore=IGNORE))
    result = stage.update(masks[-1], X[-1].shape, headers[-1], compiled=compiled)
    view = LiveView("bench", IGNORE, {z.name: z.polygon for z in ZONES}, 5.0)
    offer_ms = best_ms(lambda p: view.offer(p[2]["seq"], p[0], result, 0.01), pairs)
    view.offer(0, X[-1], result, 0.01)
    shown = view._shown
    jpeg_ms = best_ms(lambda _: cv2.imencode(".jpg", view.render(shown), [cv2.IMWRITE_JPEG_QUALITY, 80]), range(50))
    mog2 = cv2.createBackgroundSubtractorMOG2(detectShadows=False)
    mog2_ms = best_ms(mog2.apply, X)
    print(f"  MOG2 apply (the peer, same frames):          {mog2_ms:.3f} ms a frame")
    print(f"  motion stage, defaults (regions, events):    {default_ms:.3f} ms ({default_ms / mog2_ms:.2f} x MOG2)")
    print(f"  motion stage, 2 zones + 1 ignored area:      {zones_ms:.3f} ms ({zones_ms / mog2_ms:.2f} x MOG2)")
    print(f"  live view offer, no viewer:                  {1000 * offer_ms:.1f} us")
    print(f"  one preview frame drawn and JPEG-encoded:    {jpeg_ms:.3f} ms (at most preview_fps a second)")


def watch(url, stop_event, got):
    """Read the MJPEG stream as a browser does, counting JPEG parts (retrying until the worker's
    view server listens: it starts after the worker's metrics)."""
    while not stop_event.is_set():
        try:
            r = urllib.request.urlopen(url, timeout=10)
            break
        except OSError:
            time.sleep(0.2)
    else:
        return
    with r:
        while not stop_event.is_set():
            line = r.readline()
            if line.startswith(b"Content-Length:"):
                r.readline()
                r.read(int(line.split()[1]))
                got[0] += 1


def pipeline(seconds, warmup, tmp, config, viewer):
    frames_ep, masks_ep, port, view = f"ipc://{tmp}/f", f"ipc://{tmp}/m", free_port(), free_port()
    extra = ["--config", config] if config else []
    if viewer:
        extra += ["--view-port", view, "--preview-fps", 5]
    worker = start_worker(frames_ep, masks_ep, port, *extra, camera="bench")
    wait_for(lambda: scrape(port), 30, "worker metrics")
    source = str(VIDEO) if VIDEO.exists() else "synthetic"
    cap = start_capture(frames_ep, source, "--loop", "--live", "--fps", 30, camera="bench")
    done, got = threading.Event(), [0]
    if viewer:
        threading.Thread(target=watch, args=(f"http://127.0.0.1:{view}/stream.mjpeg", done, got), daemon=True).start()
    time.sleep(warmup)
    c0, t0, g0 = cpu_seconds(worker.pid), time.monotonic(), got[0]
    time.sleep(seconds)
    c1, t1, g1 = cpu_seconds(worker.pid), time.monotonic(), got[0]
    done.set()
    stop(cap)
    stop(worker)
    return 100 * (c1 - c0) / (t1 - t0), (g1 - g0) / (t1 - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--warmup", type=float, default=15)
    args = ap.parse_args()
    in_process(args.frames)
    tmp = tempfile.mkdtemp(prefix="kdrsdl-bench-motion-")
    config = os.path.join(tmp, "zones.toml")
    with open(config, "w") as f:
        f.write(ZONES_TOML)
    print(f"part 2: worker at 30 fps, {VIDEO if VIDEO.exists() else 'synthetic'}, {args.seconds:.0f} s each")
    for label, cfg, viewer in (("no zones", None, False), ("2 zones + ignore", config, False),
                               ("2 zones + ignore, 1 viewer", config, True)):  # fmt: skip
        cpu, jpegs = pipeline(args.seconds, args.warmup, tmp, cfg, viewer)
        extra = f", {jpegs:.1f} JPEG/s to the viewer" if viewer else ""
        print(f"  {label:28s} worker CPU {cpu:.1f}% of a core{extra}")


if __name__ == "__main__":
    main()
