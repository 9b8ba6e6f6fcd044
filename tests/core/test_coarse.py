"""Refits at a coarser resolution (issue 26): the lift back to the processing resolution."""

import dataclasses

import cv2
import numpy as np
import pytest
from test_decision import still_object_recall  # tests/core/test_decision.py, the conditional update

from core.evaluation.metrics import Confusion, confusion
from core.evaluation.scene import SyntheticScene
from core.solver.kdrsdl import kdrsdl
from core.solver.state import slide_state
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.coarse import SUPPORT_DILATION, coarse_init, lift, reduce_window
from core.streaming.params import BackgroundParams
from core.streaming.refit import RefitSettings, solve_window
from core.streaming.resolution import refit_shape
from core.streaming.snapshot import settings

N, H, W = 12, 40, 60


def textured_background(h=H, w=W):
    """A background with detail no 2 x 2 reduction keeps: a one-pixel checkerboard on a ramp."""
    yy, xx = np.mgrid[0:h, 0:w]
    return (0.3 + 0.3 * xx / w + 0.1 * ((yy + xx) % 2)).astype(np.float32)


def window_with_object(seed=0, noise=0.005):
    """N frames of the textured background with noise, and a bright 8 x 8 square moving right."""
    rng = np.random.default_rng(seed)
    bg = textured_background()
    X = np.repeat(bg[None], N, axis=0) + rng.normal(0, noise, (N, H, W)).astype(np.float32)
    truth = np.zeros((N, H, W), bool)
    for i in range(N):
        truth[i, 16:24, 4 + 4 * i : 12 + 4 * i] = True
    X[truth] = 0.95
    return X, truth, bg


def coarse_solution(Xc, **kw):
    return kdrsdl(Xc, 6, lam=0.005, mean=True, max_iter=60, warn=False, **kw)


def test_refit_shape_divides_each_side_and_keeps_at_least_one_pixel():
    assert refit_shape((202, 360), 2) == (101, 180)
    assert refit_shape((240, 320), 1) == (240, 320)
    assert refit_shape((3, 5), 4) == (1, 1)


def test_without_foreground_the_lifted_background_is_the_window_mean():
    """With E = 0 and M_c the mean of the reduced frames, step 2 gives M = up(mean X_c) + mean(X -
    up(X_c)) = mean X exactly, since the interpolation is linear: the lift loses no detail."""
    X, _, _ = window_with_object()
    Xc = reduce_window(X, refit_shape((H, W), 2))
    res = coarse_solution(Xc)
    res = dataclasses.replace(res, E=np.zeros_like(res.E), M=Xc.mean(axis=0))
    M, E = lift(X, Xc, res, 0.005, 0.05)
    assert M.shape == (H, W) and M.dtype == np.float32 and E.shape == X.shape
    np.testing.assert_allclose(M, X.mean(axis=0), atol=1e-5)  # float32 rounding of a few sums


def test_the_lift_restores_the_detail_and_flags_the_object():
    X, truth, bg = window_with_object()
    Xc = reduce_window(X, refit_shape((H, W), 2))
    res = coarse_solution(Xc)
    M, E = lift(X, Xc, res, 0.005, 0.05)
    upsampled = cv2.resize(res.M, (W, H), interpolation=cv2.INTER_LINEAR)
    # The checkerboard's 0.1 swing is gone from the coarse M, and back in the lifted one, object
    # or not: within 3 gray levels of the true background on average (noise 0.005 over 12 frames).
    assert np.mean(np.abs(upsampled - bg)) > 0.04
    assert np.mean(np.abs(M - bg)) < 3 / 255
    flagged = np.abs(E) > 0.05
    assert flagged[truth].mean() > 0.99  # the square, in every frame
    # nothing flagged beyond the dilated support of the square's 2 x 2 blocks
    near = np.stack([cv2.dilate(t.view(np.uint8), np.ones((2 + SUPPORT_DILATION,) * 2, np.uint8)) for t in truth])
    assert not flagged[near == 0].any()


def test_the_lift_refuses_a_solution_of_another_window():
    X, _, _ = window_with_object()
    Xc = reduce_window(X, refit_shape((H, W), 2))
    res = coarse_solution(Xc[:-1])
    with pytest.raises(ValueError, match="does not fit"):
        lift(X, Xc, res, 0.005, 0.05)


def test_a_coarse_refit_keeps_the_solver_coarse_and_gives_the_model_full_size_arrays():
    X, _, _ = window_with_object()
    s = RefitSettings.from_knobs(BackgroundParams(rank=6, samples=8, refit_scale=2), lam=0.005)
    assert s.scale == 2 and s.alpha == 0.01
    cold = solve_window(X, None, 0, s)
    assert cold is not None and not cold.reset
    st = cold.result.state
    assert st.A.shape == (H // 2, 6) and st.B.shape == (W // 2, 6) and st.E.shape == (N, H // 2, W // 2)
    assert st.M.shape == (H, W) and cold.result.M is st.M
    assert cold.sigma.shape == (H, W) and cold.samples.shape == (H * W, 8)
    # a warm refit of the window slid by two frames starts from the lifted M, reduced again
    init = slide_state(st, 2)
    assert coarse_init(init, (H // 2, W // 2)).M.shape == (H // 2, W // 2)
    warm = solve_window(np.concatenate([X[2:], X[:2]]), init, 2, s)
    assert warm is not None and not warm.reset and warm.warm and warm.result.M.shape == (H, W)
    assert np.mean(np.abs(warm.result.M - cold.result.M)) < 2 / 255


def test_frame_models_that_read_the_dictionary_refit_at_the_processing_resolution():
    assert BackgroundParams().solve_scale == 1  # the default: refits at the processing resolution
    assert BackgroundParams(refit_scale=2).solve_scale == 2  # "moving" falls back to M on a coarse dictionary
    assert BackgroundParams(frame_model="mean", refit_scale=2).solve_scale == 2
    assert BackgroundParams(frame_model="fit", refit_scale=2).solve_scale == 1
    assert BackgroundParams(frame_model="last", refit_scale=4).solve_scale == 1
    with pytest.raises(ValueError, match="refit_scale"):
        BackgroundParams(refit_scale=0).validate()


def test_a_model_with_coarse_refits_survives_its_checkpoint():
    X, _, _ = window_with_object()
    sub = KDRSDLBackgroundSubtractor(window=6, rank=6, refit_scale=2)
    frames = (np.clip(np.concatenate([X, X, X]), 0, 1) * 255).astype(np.uint8)
    for f in frames:
        sub.apply(f)
    ckpt = sub.checkpoint()
    assert ckpt["state_A"].shape == (H // 2, 6) and ckpt["state_M"].shape == (H, W)
    other = KDRSDLBackgroundSubtractor(window=6, rank=6, refit_scale=2)
    assert other.restore(ckpt)
    assert np.array_equal(other.apply(frames[-1]), sub.apply(frames[-1]))


def test_coarse_refits_follow_a_strong_light_drift_over_a_long_stream():
    # 1200 frames with a 15% gain drift and a refit every 10 frames; measured F 0.989 (0.998 with
    # full-size refits) and no reset. With alpha unchanged in the coarse solve, the dictionary
    # collapsed to 0 here (max|A| 0 at frame 1200; F 0.986). Pinned without the ghost test: with
    # it, two absorbed ghosts (1,408 pixels written into the window) tip this coarse solve into the
    # same collapse (max|A| 0, F 0.9965; 0.075 without them): the coarse margin is narrow
    # (docs/algorithm.md, "Coarse refits").
    scene = SyntheticScene(120, 160, seed=7, drift=0.15, drift_period=300)
    sub = KDRSDLBackgroundSubtractor(refit_interval=10, window_stride=2, refit_scale=2, ghost_frames=0)
    total = Confusion(0, 0, 0, 0)
    for t in range(1200):
        mask = sub.apply(scene.frame_uint8(t))
        if t >= 200:
            total = total + confusion(mask, scene.fgmask(t))
    assert sub.n_resets == 0 and np.abs(sub.state.A).max() > 1e-3
    assert total.f_measure > 0.97


def test_with_coarse_refits_a_still_object_still_fades_in_the_end():
    # Measured at rank 20 and 15 iterations, the defaults when coarse refits were built: whole at
    # frame 400 (the conditional update), gone by frame 800, as with full-size refits. With alpha
    # unchanged in the coarse solve it was still whole at frame 900: its samples stayed in E, the
    # spread narrow, and the update kept it out of the window for good. The margin is narrow, which
    # is why coarse refits are off by default: at those knobs the object stayed for good on one
    # scene of five (still_object_fade, seed 4), and at today's rank 12 and 13 iterations on two
    # (seeds 1 and 5; docs/results.md, "Cameras per core").
    # Pinned without the warm-up's learning (warmup_entries 0, the behaviour it was measured with):
    # with the default 16 entries this scene's coarse solve keeps the object for good (recall 1.0
    # at frame 850), the fixed point that docs/algorithm.md, "Coarse refits", describes.
    knobs = dict(refit_scale=2, rank=20, refit_max_iter=15, warmup_entries=0)
    assert still_object_recall(0.7, frames=400, **knobs) > 0.9
    assert still_object_recall(0.7, frames=850, **knobs) < 0.1


def test_coarse_refits_on_the_synthetic_scene():
    # Measured F 0.731 at refit_scale 2 against 0.825 at 1 (precision 0.58 against 0.72, recall
    # 0.99 against 0.97). The coarse solve flags this scene's periodic objects in E where the
    # full-size warm refits take part of them into the low-rank part: the spread is narrower
    # (0.013 against 0.022) and the soft ghosts the conditional update leaves in M fire. On
    # CDnet, refit_scale 2 costs 0.002 of mean F (docs/results.md, "Cameras per core").
    scene = SyntheticScene(120, 160, seed=6)
    sub = KDRSDLBackgroundSubtractor(refit_scale=2)
    total = Confusion(0, 0, 0, 0)
    for t in range(300):
        mask = sub.apply(scene.frame_uint8(t))
        if t >= 150:
            total = total + confusion(mask, scene.fgmask(t))
    assert 0.7 < total.f_measure


def test_checkpoints_tell_coarse_refits_apart_and_older_ones_still_load():
    # a checkpoint of the release before refit_scale holds settings without it: made at 1
    assert "refit_scale" not in settings(BackgroundParams())
    assert settings(BackgroundParams(refit_scale=2)) != settings(BackgroundParams())
