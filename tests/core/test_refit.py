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

    return RefitSettings.from_knobs(BackgroundParams(window=4, **knobs), lam=0.05, compiled=False)


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
