"""The examples a user copies run as the README says."""

import subprocess
import sys

import cv2
import numpy as np
from conftest import ROOT

from core.evaluation.scene import SyntheticScene


def test_masks_from_video_writes_a_mask_per_frame_that_finds_the_objects(tmp_path):
    scene = SyntheticScene(120, 160, seed=3)
    video = tmp_path / "scene.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 30, (160, 120))
    n = 300
    for t in range(n):
        writer.write(cv2.cvtColor(scene.frame_uint8(t), cv2.COLOR_GRAY2BGR))
    writer.release()
    out = tmp_path / "masks"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "masks_from_video.py"), str(video), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # as a user runs it from anywhere, with the package installed
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"{n} masks in {out}"
    masks = sorted(out.glob("mask_*.png"))
    assert len(masks) == n
    # the masks find the objects and little else. Refits are threaded and the file is read as fast
    # as it decodes, so how many refits have landed by the end depends on the machine's load, and
    # the bounds are loose: over the last 40 frames, recall 0.99-1.0 and 4-6% of the background
    # flagged on a quiet machine, recall 0.78 and 7% in a CI run beside other jobs, recall 0.87 and
    # 19.7% in another (the scene's periodic objects leave soft ghosts where the model is behind;
    # an all-foreground mask would flag 100%). The model's accuracy is tested with inline refits
    # elsewhere (tests/core/test_background.py).
    recall, false = [], []
    for t in range(n - 40, n):
        mask = cv2.imread(str(masks[t]), cv2.IMREAD_GRAYSCALE) > 127
        truth = scene.fgmask(t)
        recall.append(np.mean(mask[truth]))
        false.append(np.mean(mask[~truth]))
    assert np.mean(recall) > 0.5 and np.mean(false) < 0.3, (np.mean(recall), np.mean(false))
