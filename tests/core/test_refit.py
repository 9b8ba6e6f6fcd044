"""The refit thread: background work below the frames' priority (issue 26)."""

import os
import sys
import threading

import pytest

from core.evaluation.scene import SyntheticScene
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.refit import REFIT_NICENESS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority is Linux's")
def test_the_refit_thread_runs_at_a_lower_priority_than_the_frames():
    main = os.getpriority(os.PRIO_PROCESS, 0)
    scene = SyntheticScene(60, 80, seed=1)
    sub = KDRSDLBackgroundSubtractor(async_refit=True, window=8)
    for t in range(12):  # the first cold fit starts at frame 2, on the refit thread
        sub.process(scene.frame_uint8(t))
    sub.close(wait=5)
    # this subtractor's refit thread, and any other test's still alive in this process
    refits = [t.native_id for t in threading.enumerate() if t.name == "kdrsdl-refit"]
    assert refits and None not in refits
    assert {os.getpriority(os.PRIO_PROCESS, tid) for tid in refits} == {min(19, main + REFIT_NICENESS)}
    assert os.getpriority(os.PRIO_PROCESS, 0) == main  # the frames' thread (and the process) unchanged


def _settings(**knobs):
    from core.streaming.params import BackgroundParams
    from core.streaming.refit import RefitSettings

    return RefitSettings.from_knobs(BackgroundParams(**{"window": 4, **knobs}), lam=0.05, compiled=False)


def test_a_threaded_refit_stacks_the_window_on_its_thread_and_survives_a_window_it_cannot_stack():
    # The frames' thread hands the refit the window's frames by reference (no 9 MB copy on the
    # frames' path); the refit stacks them. A window it cannot stack (frames of two sizes) is a
    # counted reset, and the same thread serves the next refit.
    import numpy as np

    from core.streaming.refit import Refitter, solve_window
    from core.streaming.window import WindowFrames

    scene = SyntheticScene(24, 32, seed=2)
    frames = tuple(scene.frame(t).astype(np.float32) for t in range(4))
    refitter = Refitter(threaded=True)
    assert (
        refitter.submit(WindowFrames(frames[:3] + (np.zeros((5, 5), np.float32),), (None,) * 4), None, 0, _settings())
        is None
    )
    assert refitter.wait(30)
    bad = refitter.collect()
    assert bad is not None and bad.reset and bad.error is not None and "ValueError" in bad.error
    window = WindowFrames(frames, (None, None, np.ones((24, 32), bool), None))
    assert refitter.submit(window, None, 7, _settings()) is None
    assert refitter.wait(60)
    good = refitter.collect()
    assert good is not None and not good.reset and good.start == 7
    # the same solution as the window stacked beforehand, inline, with its masks as fg
    want = solve_window(np.stack(frames), None, 7, _settings(), fg=window.stack_masks())
    assert want is not None and want.result is not None and good.result is not None
    np.testing.assert_array_equal(good.result.M, want.result.M)
    np.testing.assert_array_equal(good.sigma, want.sigma)
    with pytest.raises(TypeError, match="its own masks"):  # two sources of masks: a caller's mistake
        solve_window(window, None, 7, _settings(), fg=window.stack_masks())


def test_a_still_pixels_samples_beyond_the_floor_leave_its_spread_whatever_the_low_rank_part_took():
    # docs/algorithm.md, "The spread at still pixels": a block that passes the same place in 6 of
    # the window's 30 entries is low-rank, so KDRSDL's E flags none of it and it widens the
    # spread there; with the pixels marked still, its samples (0.12 from M, beyond pixel_floor
    # 0.06) are left out. Pixels not marked still, and the rule off, keep E's verdict alone.
    import numpy as np

    from core.streaming.refit import Refitter, solve_window
    from core.streaming.window import WindowFrames

    rng = np.random.default_rng(0)
    N, m, n = 30, 24, 32
    X = (0.4 + 0.005 * rng.standard_normal((N, m, n))).astype(np.float32)
    on = np.zeros(N, bool)
    on[::5] = True
    lane = (slice(8, 16), slice(4, 28))
    X[(on,) + lane] += np.float32(0.15)
    s = _settings(window=N)
    assert s.still_cut == 0.06  # pixel_floor
    still = np.zeros((m, n), bool)
    still[:, :16] = True  # the left half: half of the lane, and background around it
    plain = solve_window(X, None, 0, s)
    cut = solve_window(X, None, 0, s, still=still)
    off = solve_window(X, None, 0, _settings(window=N, still_cut=False), still=still)
    assert plain is not None and cut is not None and off is not None
    assert plain.result is not None and plain.result.E is not None
    assert not (np.abs(plain.result.E[(on,) + lane]) > 0.05).any()  # E took none of the block
    # without the cut the block's samples widen the lane's spread to about 0.06 (a noise sigma of
    # 0.005 elsewhere); left out, what remains is the background's own deviation from M, which the
    # block pulled to 0.43 (sqrt(pi / 2) * 0.03 = 0.038): 0.63 of the spread without the cut on
    # average (0.5-0.75 allows for the noise of 30 samples), every pixel's below every pixel's
    assert plain.sigma[lane].mean() > 0.05
    ratio = cut.sigma[8:16, 4:16].mean() / plain.sigma[8:16, 4:16].mean()
    assert 0.5 < ratio < 0.75
    assert cut.sigma[8:16, 4:16].max() < plain.sigma[8:16, 4:16].min()
    np.testing.assert_array_equal(cut.sigma[8:16, 16:28], plain.sigma[8:16, 16:28])  # not still: E alone
    outside = np.ones((m, n), bool)
    outside[lane] = False  # still pixels whose samples all lie within the floor: nothing left out
    np.testing.assert_array_equal(cut.sigma[outside], plain.sigma[outside])
    np.testing.assert_array_equal(off.sigma, plain.sigma)  # the rule off: as without a still map
    # the refit thread gets the still map as the inline refit does
    refitter = Refitter(threaded=True)
    assert refitter.submit(WindowFrames(tuple(X), (None,) * N), None, 0, s, still) is None
    assert refitter.wait(60)
    threaded = refitter.collect()
    assert threaded is not None and threaded.sigma is not None
    np.testing.assert_array_equal(threaded.sigma, cut.sigma)
