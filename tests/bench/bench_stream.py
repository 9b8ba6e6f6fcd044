"""Speed of the streaming model's per-frame path against OpenCV's and BGSLibrary's subtractors.

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_stream.py [--frames N]``.

Frames: CDnet highway (320 x 240) from ../shared when present, else the synthetic scene, decoded
beforehand. Every method runs in this process, one OpenCV thread, one BLAS thread, on the same
frames in the same run, in interleaved rounds (default 3) of which each method's best counts (the
machine is shared: the best round is the repeatable figure). kdrsdl-stream runs as the worker runs it, with window refits on their
own thread (``async_refit``), fed at most 30 frames per second of wall time so the refit
thread keeps up as it does live; its per-frame figure is the time of ``process()`` on the
calling thread alone, and the refits' CPU (their own thread's CPU time) is reported apart,
as a share of one core for a camera at 30 fps. Accuracy is ``kdrsdl evaluate``'s job.
"""

import argparse
import pathlib
import sys
import time

import cv2

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.background import KDRSDLBackgroundSubtractor  # noqa: E402
from core.scene import SyntheticScene  # noqa: E402
from streamer import peers  # noqa: E402

HIGHWAY = ROOT.parent / "shared" / "data" / "cdnet2014" / "baseline" / "highway"
PEERS = ("mog2", "knn", "gsoc", "subsense")


def frames(n):
    if HIGHWAY.exists():
        return "CDnet highway 320x240", [cv2.imread(str(HIGHWAY / "input" / f"in{i:06d}.jpg"), cv2.IMREAD_GRAYSCALE)
                                         for i in range(1, n + 1)]
    scene = SyntheticScene(240, 320)
    return "synthetic scene 320x240", [scene.frame_uint8(t) for t in range(n)]


def time_ours(X, fps=30.0):
    sub = KDRSDLBackgroundSubtractor(async_refit=True)
    busy, cpu, refits = 0.0, 0.0, 0
    start = time.perf_counter()
    for i, frame in enumerate(X):
        t0 = time.perf_counter()
        res = sub.process(frame)
        busy += time.perf_counter() - t0
        if res.refit is not None:
            cpu += res.refit.cpu_seconds
            refits += 1
        wait = start + (i + 1) / fps - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
    return len(X) / busy, cpu, refits, len(X) / fps


def time_peer(name, X):
    sub = peers.create(name)
    t0 = time.perf_counter()
    for frame in X:
        sub.apply(frame)
    return len(X) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=900, help="frames to time (default 900: 30 s of video)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each method's best is reported")
    args = ap.parse_args()
    cv2.setNumThreads(1)
    what, X = frames(args.frames)
    print(f"{what}, {len(X)} frames, one thread per method")
    best, cpu_share = {}, []
    for _ in range(args.rounds):
        ours, cpu, refits, video_s = time_ours(X)
        cpu_share.append(cpu / video_s)
        best["kdrsdl-stream (per-frame path)"] = max(best.get("kdrsdl-stream (per-frame path)", 0), ours)
        for name in PEERS:
            try:
                best[name] = max(best.get(name, 0), time_peer(name, X))
            except peers.Unavailable as exc:
                print(f"  {name}: unavailable ({exc})")
    rows = best
    ours = rows["kdrsdl-stream (per-frame path)"]
    for name, fps in rows.items():
        print(f"  {name:32s} {fps:8.0f} fps   {1000 / fps:6.2f} ms/frame   ours / this = {ours / fps:5.2f}")
    print(f"  refits: {refits} per {video_s:.0f} s of video; their thread's CPU, per round: "
          + ", ".join(f"{100 * c:.0f}%" for c in cpu_share) + " of a core per camera at 30 fps")


if __name__ == "__main__":
    main()
