"""The processing resolution: frames reduced for the model, masks brought back to the input's size."""

import cv2
import numpy as np

from core.evaluation.scene import SyntheticScene
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.params import PROCESSING_SIDE
from core.streaming.resolution import enlarge_mask, processing_shape, reduce


def test_processing_shape_keeps_the_aspect_and_never_enlarges():
    # an exact integer factor where one brings the longest side within an eighth below 360
    assert processing_shape((720, 1280), 360) == (180, 320)  # 4
    assert processing_shape((1080, 1920), 360) == (180, 320)  # 6
    assert processing_shape((2160, 3840), 360) == (180, 320)  # 12: 11 does not divide 3840
    assert processing_shape((1520, 2688), 360) == (190, 336)  # 8 (a 4 MP camera)
    assert processing_shape((480, 640), 360) == (240, 320)  # 2
    assert processing_shape((480, 720), 360) == (240, 360)  # 2: badminton, as before
    assert processing_shape((1920, 1080), 360) == (320, 180)  # portrait
    # none: scaled to 360 exactly (800 / 3 = 267 and 1024 / 4 = 256 are too small; 3 divides no 1024)
    assert processing_shape((600, 800), 360) == (270, 360)
    assert processing_shape((768, 1024), 360) == (270, 360)
    assert processing_shape((721, 1280), 360) == (203, 360)
    assert processing_shape((240, 320), 360) == (240, 320)  # small frames stay as they are
    assert processing_shape((1080, 1920), 0) == (1080, 1920)  # 0 = the input size
    assert processing_shape((3, 5000), 100) == (1, 100)  # a side never reaches 0


def test_reduce_averages_and_enlarge_mask_restores_a_blob():
    x = np.zeros((400, 600), np.float32)
    x[100:300, 200:400] = 1.0
    small = reduce(x, (200, 300))
    assert small.shape == (200, 300) and np.isclose(small.mean(), x.mean(), atol=1e-3)  # area averaging
    big = enlarge_mask((small > 0.5).view(np.uint8) * np.uint8(255), (400, 600))
    assert big.shape == (400, 600) and big.dtype == np.uint8 and set(np.unique(big)) == {0, 255}
    assert np.mean((big > 0) != (x > 0.5)) < 0.005  # only the blob's edge may differ


def test_hd_frames_are_processed_small_and_masked_at_their_size():
    scene = SyntheticScene(720, 1280, seed=3)
    sub = KDRSDLBackgroundSubtractor()
    small = KDRSDLBackgroundSubtractor(mask_resolution="processing")
    for t in range(60):
        frame = scene.frame_uint8(t)
        res = sub.process(frame)
        res_small = small.process(frame)
    assert sub.processing_shape == (180, 320) == res.score_processing.shape and PROCESSING_SIDE == 360
    assert res.fgmask.shape == (720, 1280) and res.score.shape == (720, 1280)
    assert res.fgmask_processing.shape == (180, 320)
    np.testing.assert_array_equal(res.fgmask_processing, res_small.fgmask)  # the mask before its enlargement
    assert res_small.fgmask.shape == (180, 320)
    assert sub.getBackgroundImage().shape == (720, 1280)
    # the same decision at both sizes: the enlarged mask covers the scene's objects as the small one does
    truth = scene.fgmask(59)
    hit = (res.fgmask > 0)[truth].mean()
    assert hit > 0.5, hit
    # a checkpoint made at 720p restores (the window is at the processing size) and goes on
    ckpt = sub.checkpoint()
    assert ckpt["window_frames"].shape[1:] == (180, 320)
    again = KDRSDLBackgroundSubtractor()
    assert again.restore(ckpt) is True
    assert again.process(scene.frame_uint8(60)).fgmask.shape == (720, 1280)


def test_reduce_halves_first_then_averages_to_the_target():
    x = SyntheticScene(720, 1280, seed=2).frame_uint8(10).astype(np.float32) / 255
    one_step = cv2.resize(x, (360, 202), interpolation=cv2.INTER_AREA)
    small = reduce(x, (202, 360))
    assert small.shape == (202, 360) and small.dtype == np.float32
    # the halving then the area step average nearly the same pixels as one area step: measured
    # 0.26 gray levels on average and 1.1 at the 99th percentile; only the scene's sharp edges
    # differ more (12 at most), where the two footprints straddle the edge differently. The model
    # sees every frame reduced the same way, so its background has the same edges as its frames.
    diff = np.abs(small - one_step) * 255
    assert diff.mean() < 0.5 and np.percentile(diff, 99) < 2, (diff.mean(), np.percentile(diff, 99))
    assert np.isclose(small.mean(), x.mean(), atol=1e-3)
    # a factor of exactly 2 is the one halving (badminton, 720 x 480, is processed so)
    y = np.random.default_rng(1).random((480, 720)).astype(np.float32)
    np.testing.assert_array_equal(reduce(y, (240, 360)), cv2.resize(y, (360, 240), interpolation=cv2.INTER_AREA))
    np.testing.assert_array_equal(reduce(y, (240, 360)), y.reshape(240, 2, 360, 2).mean(axis=(1, 3)))
    # and 4 (1280 x 720, processing_shape's exact factor) the two: the mean of each 4 x 4 block
    z = np.random.default_rng(2).random((720, 1280)).astype(np.float32)
    np.testing.assert_allclose(reduce(z, (180, 320)), z.reshape(180, 4, 320, 4).mean(axis=(1, 3)), atol=1e-6)
    u = SyntheticScene(720, 1280, seed=2).frame_uint8(10)  # the capture's uint8: rounded at each halving
    blocks = u.reshape(180, 4, 320, 4).mean(axis=(1, 3))
    assert np.abs(reduce(u, (180, 320)).astype(np.float32) - blocks).max() <= 1.0
