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
    # the masks find the objects and little else. Over the last 40 frames, measured on 2026-11-27
    # with a CI run on the other core (three runs): recall 0.954 and 0.23% of the background
    # flagged (the model v3 flagged 4-20%: soft ghosts where its threaded refits were behind; the
    # warm-up learning and the ghost test of v4 leave none). Refits are threaded and the file is
    # read as fast as it decodes, so a busier machine lands fewer refits by the end: the bounds
    # leave recall 0.15 below the measure and 20 times the false foreground (an all-foreground
    # mask would flag 100%). The model's accuracy is tested with inline refits elsewhere
    # (tests/core/test_background.py).
    recall, false = [], []
    for t in range(n - 40, n):
        mask = cv2.imread(str(masks[t]), cv2.IMREAD_GRAYSCALE) > 127
        truth = scene.fgmask(t)
        recall.append(np.mean(mask[truth]))
        false.append(np.mean(mask[~truth]))
    assert np.mean(recall) > 0.8 and np.mean(false) < 0.05, (np.mean(recall), np.mean(false))
