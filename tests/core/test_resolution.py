"""The processing resolution: frames reduced for the model, masks brought back to the input's size."""

import numpy as np

from core.evaluation.scene import SyntheticScene
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.params import PROCESSING_SIDE
from core.streaming.resolution import enlarge_mask, processing_shape, reduce


def test_processing_shape_keeps_the_aspect_and_never_enlarges():
    assert processing_shape((1080, 1920), 360) == (202, 360)
    assert processing_shape((720, 1280), 360) == (202, 360)
    assert processing_shape((480, 640), 360) == (270, 360)
    assert processing_shape((1920, 1080), 360) == (360, 202)  # portrait
    assert processing_shape((240, 320), 360) == (240, 320)  # small frames stay as they are
    assert processing_shape((1080, 1920), 0) == (1080, 1920)  # 0 = the input size
    assert processing_shape((3, 5000), 100) == (1, 100)  # a side never reaches 0


def test_reduce_averages_and_enlarge_mask_restores_a_blob():
    x = np.zeros((400, 600), np.float32)
    x[100:300, 200:400] = 1.0
    small = reduce(x, (200, 300))
    assert small.shape == (200, 300) and np.isclose(small.mean(), x.mean(), atol=1e-3)  # area averaging
    big = enlarge_mask(small > 0.5, (400, 600))
    assert big.shape == (400, 600) and big.dtype == bool
    assert np.mean(big != (x > 0.5)) < 0.005  # only the blob's edge may differ


def test_hd_frames_are_processed_small_and_masked_at_their_size():
    scene = SyntheticScene(720, 1280, seed=3)
    sub = KDRSDLBackgroundSubtractor()
    small = KDRSDLBackgroundSubtractor(mask_resolution="processing")
    for t in range(60):
        frame = scene.frame_uint8(t)
        res = sub.process(frame)
        res_small = small.process(frame)
    assert sub.processing_shape == (202, 360) == res.score_processing.shape and PROCESSING_SIDE == 360
    assert res.fgmask.shape == (720, 1280) and res.score.shape == (720, 1280)
    assert res_small.fgmask.shape == (202, 360)
    assert sub.getBackgroundImage().shape == (720, 1280)
    # the same decision at both sizes: the enlarged mask covers the scene's objects as the small one does
    truth = scene.fgmask(59)
    hit = (res.fgmask > 0)[truth].mean()
    assert hit > 0.5, hit
    # a checkpoint made at 720p restores (the window is at the processing size) and goes on
    ckpt = sub.checkpoint()
    assert ckpt["window_frames"].shape[1:] == (202, 360)
    again = KDRSDLBackgroundSubtractor()
    assert again.restore(ckpt) is True
    assert again.process(scene.frame_uint8(60)).fgmask.shape == (720, 1280)
