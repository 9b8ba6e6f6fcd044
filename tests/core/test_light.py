"""Changes of light (core.streaming.light): the fit, the rule that takes it, the mapped memory."""

import cv2
import numpy as np
import pytest
from conftest import HIGHWAY, need

from core.evaluation.scene import SyntheticScene
from core.solver.state import KDRSDLState
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.light import MIN_EXPLAINED, LightChange, detect_light_change, map_state


@pytest.fixture(scope="module")
def scene():
    return SyntheticScene(60, 80, n_objects=2, drift=0.0, seed=4)


def background_and_frame(scene, t, gain=1.0, offset=0.0):
    """The scene's background, its frame ``t`` (sensor noise 0.01) in another light, and where it is background."""
    bg = scene.background.astype(np.float32)
    x = gain * scene.frame(t) + offset
    return bg, x.astype(np.float32), ~scene.fgmask(t)


@pytest.mark.parametrize("gain, offset", [(0.6, 0.0), (1 / 0.6, 0.0), (0.8, 0.05)])
def test_a_global_change_of_gain_is_found_and_explains_the_frame(scene, gain, offset):
    bg, x, background = background_and_frame(scene, 10, gain, offset)
    change = detect_light_change(x, bg, 0.04, background)  # a band of 4 noise sigmas
    assert change is not None
    # noise 0.01 over ~250 sampled pixels: the fitted gain's standard error is about 0.01 / (0.1 *
    # sqrt(250)) = 0.006 (the background's spread is about 0.1); 0.02 is three of those
    assert change.gain == pytest.approx(gain, abs=0.02)
    assert change.offset == pytest.approx(offset, abs=0.02)
    # under the mapping only the noise leaves the band (gain 1.67 widens it to 0.017: 2% of
    # pixels beyond 0.04); under the median offset alone many more do
    assert change.outside_after < 0.05 and change.outside_before > 2 * change.outside_after + 0.05


def test_the_fit_ignores_objects_the_previous_mask_missed(scene):
    bg, x, _ = background_and_frame(scene, 10, 0.6)
    everything = np.ones(bg.shape, bool)  # the objects are in the fit: the robust pass drops them
    change = detect_light_change(x, bg, 0.04, everything)
    assert change is not None and change.gain == pytest.approx(0.6, abs=0.02)


def test_no_change_of_light_is_reported_without_one(scene):
    bg, x, background = background_and_frame(scene, 10)
    assert detect_light_change(x, bg, 0.03, background) is None
    # a pure offset is left to the frame's median offset (global_offset)
    bg, x, background = background_and_frame(scene, 10, 1.0, 0.1)
    assert detect_light_change(x, bg, 0.03, background) is None
    # a gain change below min_gain_change
    bg, x, background = background_and_frame(scene, 10, 0.97)
    assert detect_light_change(x, bg, 0.03, background) is None
    # too few background pixels to fit on
    assert detect_light_change(x, bg, 0.03, np.zeros(bg.shape, bool)) is None


def test_a_fit_that_brings_back_only_a_few_pixels_is_not_a_change_of_light():
    # x = 0.92 bg: under bg plus the median offset a pixel is off by 0.08 |bg - median(bg)|, at
    # most 0.028 for a background spread over [0.2, 0.9]. With a band of 0.027 only the extremes,
    # about 4% of the pixels, leave it, and the fit brings them all back: it halves the share, but
    # explains fewer than MIN_EXPLAINED (5%) of the pixels, as an exposure easing over a few frames
    # does (highway's frame 306, docs/results.md, "Ablation"). With a band of 0.02, 28% leave it.
    bg = np.random.default_rng(0).uniform(0.2, 0.9, (100, 100)).astype(np.float32)
    x = np.float32(0.92) * bg
    everything = np.ones(bg.shape, bool)
    assert MIN_EXPLAINED == 0.05
    assert detect_light_change(x, bg, 0.027, everything) is None
    change = detect_light_change(x, bg, 0.02, everything)
    assert change is not None and change.gain == pytest.approx(0.92, abs=1e-3)
    assert change.outside_before - change.outside_after >= MIN_EXPLAINED


def test_camera_jitter_is_not_taken_for_a_change_of_light():
    # a textured background (edges everywhere) shifted by 3 pixels: the least-squares slope falls
    # well below 1, but the fit explains nothing, so the rule does not take it
    rng = np.random.default_rng(1)
    bg = cv2.GaussianBlur(rng.random((120, 160), dtype=np.float32), (0, 0), 2.0)
    bg = (bg - bg.min()) / (bg.max() - bg.min())
    x = np.roll(bg, (3, 3), axis=(0, 1))
    assert detect_light_change(x, bg, 0.03, np.ones(bg.shape, bool)) is None


def test_map_state_maps_the_decomposition_to_the_new_light():
    rng = np.random.default_rng(0)
    N, m, n, r = 5, 6, 7, 3
    A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
    R = rng.standard_normal((N, r, r))
    E = rng.standard_normal((N, m, n)) * 0.01
    M = rng.random((m, n))
    z = np.zeros((N, m, n))
    state = KDRSDLState(A=A, B=B, K=R.copy(), R=R, E=E, Lam=z, Y=np.zeros_like(R), M=M, mu=1.0, muK=1.0, muK0=1.0)
    frames = M + np.einsum("ir,nrs,js->nij", A, R, B) + E
    change = LightChange(0.6, 0.05, 0.9, 0.01)
    mapped = map_state(state, change)
    again = mapped.M + np.einsum("ir,nrs,js->nij", mapped.A, mapped.R, mapped.B) + mapped.E
    np.testing.assert_allclose(again, 0.6 * frames + 0.05, atol=1e-5)
    assert mapped.A is state.A and mapped.Lam is state.Lam  # dictionary and duals kept
    np.testing.assert_array_equal(state.M, M)  # the input is not modified
    # two changes in a row are one change
    both = change.then(LightChange(1.5, -0.02, 0.8, 0.02))
    assert both.gain == pytest.approx(0.9) and both.offset == pytest.approx(1.5 * 0.05 - 0.02)


def dim_run(light_change, frames=240, at=200, gain=0.6):
    """The synthetic scene through the model, dimmed to ``gain`` from frame ``at``: false fg per frame."""
    scene = SyntheticScene(60, 80, n_objects=2, drift=0.0, seed=4)
    sub = KDRSDLBackgroundSubtractor(light_change=light_change)
    false_fg, lights = [], []
    for t in range(frames):
        x = scene.frame(t) * (gain if t >= at else 1.0)
        res = sub.process(x)
        false_fg.append(np.mean((res.fgmask > 0) & ~scene.fgmask(t)))
        lights.append(res.light)
    return np.array(false_fg), lights


def test_a_sudden_dim_is_absorbed_at_once_and_reported():
    at = 200
    false_fg, lights = dim_run(True, at=at)
    # the small synthetic scene's periodic objects leave 3-6% false foreground at their edges and
    # in their soft ghosts before any change: the change must add no more than 1% to that
    before = false_fg[at - 40 : at].max()
    assert before < 0.08
    # issue 23: settled within 5 frames of a sudden change
    assert false_fg[at + 5 :].max() < before + 0.01, false_fg[at:].round(3)
    reported = [t for t, c in enumerate(lights) if c is not None]
    assert reported and reported[0] in (at, at + 1) and all(t >= at for t in reported)
    assert lights[reported[0]].gain == pytest.approx(0.6, abs=0.03)
    # without the rule the same change floods the mask at once and leaves more false foreground
    # for the next 40 frames (measured 0.086 at the change against 0.000 just before it, with the
    # ghost test absorbing the objects' soft ghosts; 0.118 against 0.014 without that test)
    flooded, lights = dim_run(False, at=at)
    assert flooded[at] > flooded[at - 40 : at].max() + 0.05 and all(c is None for c in lights)
    assert flooded[at + 5 : at + 40].mean() > 2 * false_fg[at + 5 : at + 40].mean()


@pytest.mark.shared_data
def test_real_highway_dimmed_to_60_percent_gives_the_gain():
    need(HIGHWAY)
    read = lambda i: cv2.imread(str(HIGHWAY / "input" / f"in{i:06d}.jpg"), cv2.IMREAD_GRAYSCALE)  # noqa: E731
    bg = np.median(np.stack([read(i) for i in range(1, 400, 8)]), axis=0).astype(np.float32) / 255
    x = read(700).astype(np.float32) / 255
    gt = cv2.imread(str(HIGHWAY / "groundtruth" / "gt000700.png"), cv2.IMREAD_GRAYSCALE)
    background = gt == 0
    assert detect_light_change(x, bg, 0.04, background) is None  # the scene itself: no change
    change = detect_light_change(0.6 * x, bg, 0.04, background)
    # a median background of real video: the fit is within a few hundredths of the true gain
    assert change is not None and change.gain == pytest.approx(0.6, abs=0.04)
