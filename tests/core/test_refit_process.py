"""Refits in a child process (``refit_process``): the threaded refits' results, in another process."""

import os
import signal
import socket
import sys
import time

import numpy as np
import pytest

from core.evaluation.scene import SyntheticScene
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.refit import REFIT_NICENESS
from core.streaming.refit_process import ProcessRefitter, recv_message, send_message

# A spawned child imports numpy and the solver (about 0.5 s alone, several seconds on a loaded
# 2-core machine); every wait below is bounded by this, far above what it needs.
WAIT_S = 60.0


def _run(sub, scene, frames):
    masks = []
    for t in frames:
        masks.append(sub.apply(scene.frame_uint8(t)))
        assert sub.wait_refit(WAIT_S), "a refit did not finish"
    return masks


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] != "Z"  # a zombie has ended


def test_a_message_carries_arrays_out_of_band_and_they_arrive_writable():
    a, b = socket.socketpair()
    big = np.arange(3 * 40 * 50, dtype=np.float32).reshape(3, 40, 50)
    obj = {"big": big, "view": big[:, ::2, 1:], "empty": big[:0], "fortran": np.asfortranarray(big[0]), "n": 7}
    send_message(a, obj)
    got = recv_message(b)
    assert got["n"] == 7
    for k in ("big", "view", "empty", "fortran"):
        np.testing.assert_array_equal(got[k], obj[k])
        assert got[k].dtype == obj[k].dtype and got[k].flags.writeable
    got["big"][0, 0, 0] = -1  # its own memory, not the sender's
    assert big[0, 0, 0] == 0
    a.close()
    with pytest.raises(EOFError):
        recv_message(b)
    b.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a process's niceness as Linux sets it")
def test_refits_in_a_child_process_give_the_threaded_refits_masks():
    # The same solve on the same window gives the same bits in another process (one BLAS thread in
    # both: the child's is set to one), so each frame's mask and the final background are the
    # threaded model's, with every refit awaited so that it lands at the same frame.
    scene = SyntheticScene(60, 80, seed=3)
    knobs = {"window": 8, "refit_interval": 10, "async_refit": True, "kernel": "numpy"}
    threaded = KDRSDLBackgroundSubtractor(**knobs)
    child = KDRSDLBackgroundSubtractor(**knobs, refit_process=True)
    refitter = child._refitter
    assert isinstance(refitter, ProcessRefitter)
    ours = _run(threaded, scene, range(60))
    theirs = _run(child, scene, range(60))
    pid = refitter.pid
    assert pid is not None and pid != os.getpid()
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + REFIT_NICENESS)
    assert child.n_resets == 0 and refitter.n_spawned == 1
    for t, (m1, m2) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_array_equal(m1, m2, err_msg=f"frame {t}")
    assert np.array_equal(threaded._state.M, child._state.M)
    assert child._state.E is None  # the report came back without E: the model keeps none
    assert child.close(wait=10) and threaded.close(wait=10)
    deadline = time.monotonic() + WAIT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "close() left the child running"


def test_a_killed_child_is_a_counted_reset_and_the_next_refit_spawns_another():
    scene = SyntheticScene(60, 80, seed=4)
    sub = KDRSDLBackgroundSubtractor(window=8, refit_interval=10, async_refit=True, kernel="numpy", refit_process=True)
    refitter = sub._refitter
    _run(sub, scene, range(20))
    assert sub.n_resets == 0 and sub._state is not None
    first = refitter.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)  # as the kernel's OOM killer would
    # the next refit finds the child gone: a reset (the model starts cold), and a new child
    _run(sub, scene, range(20, 80))
    assert sub.n_resets == 1
    assert refitter.n_spawned == 2 and refitter.pid not in (None, first)
    assert sub._state is not None  # the new child's cold refit, then warm ones, landed
    assert sub.close(wait=10)


def test_a_cancelled_refit_stops_in_the_child_and_a_closed_refitter_spawns_again():
    scene = SyntheticScene(240, 320, seed=5)
    knobs = {"window": 30, "async_refit": True, "kernel": "numpy", "refit_process": True}
    sub = KDRSDLBackgroundSubtractor(**knobs, refit_max_iter=10**4)
    refitter = sub._refitter
    frames = [scene.frame_uint8(t) for t in range(40)]
    for f in frames:
        sub.apply(f)
    assert refitter.busy
    # a cold refit of 3 x 10,000 iterations would take about 15 minutes; cancelled, it stops at
    # the solver's next iteration
    assert refitter.cancel(wait=WAIT_S), "the child did not stop the cancelled refit"
    assert not refitter.busy and refitter.collect() is None
    pid = refitter.pid
    assert pid is not None and sub.close(wait=10) and refitter.pid is None
    small = KDRSDLBackgroundSubtractor(window=8, async_refit=True, kernel="numpy", refit_process=True)
    _run(small, SyntheticScene(60, 80, seed=6), range(12))
    assert small._state is not None and small.n_resets == 0
    small.close(wait=10)
    _run(small, SyntheticScene(60, 80, seed=6), range(12, 30))
    assert small._refitter.n_spawned == 2 and small.n_resets == 0
    assert small.close(wait=10)


def test_a_child_that_cannot_start_or_ends_at_once_gives_counted_resets_not_a_stall(monkeypatch):
    # Whatever keeps the child from answering, each refit still ends, as a reset that says why,
    # and the refits go on once a child can run again.
    import core.streaming.refit_process as refit_process
    from core.streaming.params import BackgroundParams
    from core.streaming.refit import RefitSettings
    from core.streaming.window import WindowFrames

    rng = np.random.default_rng(0)
    window = WindowFrames(tuple(rng.random((20, 30), dtype=np.float32) for _ in range(4)), (None,) * 4)
    settings = RefitSettings.from_knobs(BackgroundParams(window=4), lam=0.05)
    python, command = sys.executable, refit_process.CHILD_COMMAND

    def refit(r):
        r.submit(window, None, 0, settings)
        assert r.wait(WAIT_S), "a refit never ended"
        return r.collect()

    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    r = ProcessRefitter()
    report = refit(r)  # no interpreter to start
    assert report.reset and "could not be started" in report.error and r.n_spawned == 0
    monkeypatch.setattr(sys, "executable", python)
    monkeypatch.setattr(refit_process, "CHILD_COMMAND", "import sys; sys.exit(3)")
    report = refit(r)  # a child that ends before it answers (its successor, started at once, too)
    assert report.reset and "exit code 3" in report.error
    monkeypatch.setattr(refit_process, "CHILD_COMMAND", command)
    assert refit(r).reset  # the successor started with the same command
    report = refit(r)  # and the one after it runs the refit
    assert not report.reset and report.result is not None and report.result.M.shape == (20, 30)
    assert r.n_spawned == 3
    assert r.close(wait=10)
