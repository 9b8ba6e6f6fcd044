"""Streaming-model benchmark (issue 3): F-measure and frames per second against OpenCV MOG2.

Run: ``python tests/bench/bench_stream.py``. OpenCV's MOG2 and KNN run with their defaults, and
again with kdrsdl-stream's mask post-processing (opening 3, closing 7, hole filling), so the gain
of the model and the gain of the post-processing can be told apart. On ../shared's CDnet highway (320 x 240,
CDnet scoring on frames 470-1700) when present, and on the project's synthetic scene
(exact ground truth, frames 100-600). Model time only (no I/O), one process, one BLAS thread.
"""

import pathlib
import sys
import time

import cv2
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.background import KDRSDLBackgroundSubtractor, postprocess  # noqa: E402
from core.metrics import Confusion, cdnet_labels, confusion  # noqa: E402
from core.scene import SyntheticScene  # noqa: E402

HIGHWAY = ROOT.parent / "shared" / "data" / "cdnet2014" / "baseline" / "highway"


class WithPostprocess:
    """An OpenCV subtractor whose masks get kdrsdl-stream's default post-processing (for a like-for-like row)."""

    def __init__(self, sub):
        self.sub = sub

    def apply(self, frame):
        return postprocess(self.sub.apply(frame) > 127).astype(np.uint8) * 255


def score(frames, truth, start):
    out = {}
    for name, sub in (("MOG2", cv2.createBackgroundSubtractorMOG2(detectShadows=False)),
                      ("KNN", cv2.createBackgroundSubtractorKNN(detectShadows=False)),
                      ("MOG2 + our post", WithPostprocess(cv2.createBackgroundSubtractorMOG2(detectShadows=False))),
                      ("KNN + our post", WithPostprocess(cv2.createBackgroundSubtractorKNN(detectShadows=False))),
                      ("kdrsdl-stream", KDRSDLBackgroundSubtractor())):
        total, seconds = Confusion(0, 0, 0, 0), 0.0
        for i, frame in enumerate(frames):
            t0 = time.perf_counter()
            mask = sub.apply(frame)
            seconds += time.perf_counter() - t0
            if i >= start:
                valid, positive = truth(i)
                total = total + confusion(mask > 127, positive, valid)
        out[name] = (total, len(frames) / seconds)
    return out


def main():
    if HIGHWAY.exists():
        first, last = (int(v) for v in (HIGHWAY / "temporalROI.txt").read_text().split())
        frames = [cv2.imread(str(HIGHWAY / "input" / f"in{i:06d}.jpg"), cv2.IMREAD_GRAYSCALE) for i in range(1, last + 1)]

        def truth(i):
            return cdnet_labels(cv2.imread(str(HIGHWAY / "groundtruth" / f"gt{i + 1:06d}.png"), cv2.IMREAD_GRAYSCALE))

        print(f"CDnet highway, 320 x 240, frames 1-{last} fed, {first}-{last} scored (CDnet labels)")
        for name, (c, fps) in score(frames, truth, first - 1).items():
            print(f"  {name:16s} F={c.f_measure:.4f} precision={c.precision:.3f} recall={c.recall:.3f} "
                  f"PWC={c.pwc:.2f} fps={fps:7.0f}")
    scene = SyntheticScene(240, 320)
    frames = [scene.frame_uint8(t) for t in range(600)]
    print("Synthetic scene, 320 x 240, frames 0-599 fed, 100-599 scored (exact ground truth)")
    for name, (c, fps) in score(frames, lambda i: (None, scene.fgmask(i)), 100).items():
        print(f"  {name:16s} F={c.f_measure:.4f} precision={c.precision:.3f} recall={c.recall:.3f} "
              f"PWC={c.pwc:.2f} fps={fps:7.0f}")


if __name__ == "__main__":
    main()
