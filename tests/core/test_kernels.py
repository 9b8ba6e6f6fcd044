"""The compiled per-pixel steps (core.streaming.kernels) against their numpy reference: the same bits.

Each kernel does its step's float32 arithmetic in the reference's order, so every comparison here
is exact (``array_equal``), not within a tolerance: a difference in one bit of a blink count
changes later masks.
"""

import os
import subprocess
import sys

import cv2
import numpy as np
import pytest
from conftest import CDNET, ROOT, need

from core.evaluation.scene import SyntheticScene
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.decision import DecisionParams, PixelDecision
from core.streaming.samples import SampleParams, SampleSet

SHAPE = (48, 64)


def pair(seed, gain=0.1, with_samples=True, ready=True, shadow=True):
    """The same random decision state twice, numpy and compiled: (decision, samples) each."""
    rng = np.random.default_rng(seed)
    out = []
    v = (rng.random(SHAPE, dtype=np.float32) * 5).astype(np.float32)  # dynamic above 2: about 60%
    table = rng.random((SHAPE[0] * SHAPE[1], 20), dtype=np.float32)
    state = {"v": v, "prev_raw": rng.random(SHAPE) < 0.2, "prev_obj": rng.random(SHAPE) < 0.1}
    for compiled in (False, True):
        d = PixelDecision(SHAPE, DecisionParams(blink_gain=gain, shadow=shadow, compiled=compiled))
        d.load(state)
        s = None
        if with_samples:
            s = SampleSet(SHAPE, SampleParams(compiled=compiled))
            if ready:
                s.seed(table)
        out.append((d, s))
    return out


@pytest.mark.parametrize(
    "knobs",
    [{}, {"gain": 0.0}, {"with_samples": False}, {"ready": False}, {"shadow": False}],
    ids=["default", "no-feedback", "no-samples", "unseeded", "no-shadow"],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decide_equals_the_numpy_decision_to_the_bit(seed, knobs):
    (dn, sn), (dc, sc) = pair(seed, **knobs)
    rng = np.random.default_rng(100 + seed)
    bg = rng.random(SHAPE, dtype=np.float32)
    # a frame near its background (in and out of the band, in the samples' reach), a dark patch
    # that scales the background (a shadow candidate), and pixels far from everything
    x = (bg + rng.normal(0, 0.08, SHAPE)).astype(np.float32)
    x[10:30, 10:40] = 0.8 * bg[10:30, 10:40]
    sigma = (rng.random(SHAPE, dtype=np.float32) * 0.04).astype(np.float32)
    want, got = dn.raw(x, bg, sigma, sn), dc.raw(x, bg, sigma, sc)
    assert got.dtype == bool and got.shape == SHAPE
    assert 0.02 < want.mean() < 0.98  # the case is not trivial: both outcomes occur
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", [0, 1])
def test_blink_counts_equal_the_numpy_feedback_to_the_bit(seed):
    (dn, _), (dc, _) = pair(seed)
    rng = np.random.default_rng(200 + seed)
    for _ in range(80):  # the counts rise, fall and reach both clips
        raw = rng.random(SHAPE) < 0.5
        mask = np.zeros(SHAPE, bool)
        mask[:, :16] = True  # an object: no blink counted under it, the counts fall to 0 there
        dn.feedback(raw, mask)
        dc.feedback(raw, mask)
        np.testing.assert_array_equal(dc.v, dn.v)
        np.testing.assert_array_equal(dc.dynamic, dn.dynamic)
    assert dn.v.max() == np.float32(DecisionParams().blink_max) and dn.v.min() == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_samples_update_equals_the_numpy_update_to_the_bit(seed):
    (_, sn), (_, sc) = pair(seed)
    rng = np.random.default_rng(300 + seed)
    for t in range(40):  # more than a period of 16 frames: every phase of the schedule
        x = rng.random(SHAPE, dtype=np.float32)
        learn = rng.random(SHAPE) < 0.9
        dynamic = rng.random(SHAPE) < 0.3
        sn.update(x, learn, dynamic, t)
        sc.update(x, learn, dynamic, t)
        np.testing.assert_array_equal(sc.samples, sn.samples)
    # the update wrote: far from the seeded table
    assert np.count_nonzero(sn.samples != pair(seed)[0][1].samples) > 0.05 * sn.samples.size


def masks_of(frames, kernel, **knobs):
    model = KDRSDLBackgroundSubtractor(kernel=kernel, **knobs)
    out = [model.apply(f) for f in frames]
    return out, model


def assert_same_run(frames, **knobs):
    """The model's masks with compiled kernels equal the numpy reference's at every frame, and so do
    its learnt blink counts and samples at the end."""
    want, ref = masks_of(frames, "numpy", **knobs)
    got, model = masks_of(frames, "numba", **knobs)
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        assert np.array_equal(a, b), f"frame {i}: {np.count_nonzero(a != b)} pixels differ"
    np.testing.assert_array_equal(model._decider.v, ref._decider.v)
    np.testing.assert_array_equal(model._samples.samples, ref._samples.samples)
    return want


def test_the_model_gives_the_same_masks_on_a_generated_scene():
    scene = SyntheticScene(96, 128, n_objects=3, seed=4)
    frames = [scene.frame_uint8(t) for t in range(400)]
    masks = assert_same_run(frames)
    assert np.mean([m.mean() > 0 for m in masks[200:]]) > 0.9  # the objects are found: the masks are not empty


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["dynamicBackground/fall", "baseline/pedestrians"])
def test_the_model_gives_the_same_masks_on_real_video(name):
    # fall: leaves and water, many dynamic pixels (neighbours' samples, spread writes);
    # pedestrians: cast shadows (the shadow test on the kernel's candidates)
    seq = need(CDNET / name)
    files = sorted((seq / "input").glob("*.jpg"))[:450]
    frames = [cv2.resize(cv2.imread(str(f), cv2.IMREAD_GRAYSCALE), None, fx=0.5, fy=0.5) for f in files]
    assert_same_run(frames)


def test_a_read_only_package_compiles_into_numba_cache_dir(tmp_path):
    # The systemd units and the pods have read-only roots: numba may not write beside
    # kernels.py, and NUMBA_CACHE_DIR (which they set) must then take the compiled code.
    pkg = tmp_path / "ro"
    pkg.mkdir()
    subprocess.run(["cp", "-r", str(ROOT / "core"), str(pkg)], check=True)
    for p in pkg.rglob("__pycache__"):
        subprocess.run(["rm", "-rf", str(p)], check=True)
    subprocess.run(["chmod", "-R", "a-w", str(pkg)], check=True)
    cache = tmp_path / "cache"
    code = "from core.streaming import kernels; kernels.warm(); print('ok')"
    env = {**os.environ, "PYTHONPATH": str(pkg), "NUMBA_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
        assert list(cache.rglob("*.nbi")), "nothing cached in NUMBA_CACHE_DIR"
        assert not list(pkg.rglob("*.nbi"))
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(pkg)], check=True)
