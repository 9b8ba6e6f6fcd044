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
