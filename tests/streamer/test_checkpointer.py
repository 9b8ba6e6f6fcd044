"""The checkpoints' schedule: a fleet started together does not checkpoint in step."""

import logging
import time

import numpy as np

from core.streaming.background import KDRSDLBackgroundSubtractor
from streamer.ops.metrics import WorkerMetrics
from streamer.state.checkpointer import FIRST_AFTER, Checkpointer
from streamer.wire.protocol import SequenceTracker


def test_first_checkpoints_of_workers_started_together_are_spread_over_the_interval(tmp_path):
    # 40 cameras' checkpointers made at the same moment, as a machine's boot starts its workers
    interval, n = 60.0, 40
    t0 = time.monotonic()
    ckpts = [
        Checkpointer(str(tmp_path / f"c{i}.npz"), interval, f"c{i}", WorkerMetrics(f"c{i}"), logging.getLogger("t"))
        for i in range(n)
    ]
    after = np.array([c.due_at - t0 for c in ckpts])
    # each first checkpoint within the interval's second half (the test ran in well under a second)
    assert after.min() >= FIRST_AFTER * interval
    assert after.max() <= interval + 1.0
    # spread, not in step: with 40 uniform draws over 30 s the range is under 20 s with
    # probability about 40 * (2/3)^39, 6e-6; in step (the schedule before) it was 0
    assert np.ptp(after) > 20, after


def test_a_due_checkpoint_is_written_and_the_next_is_an_interval_later(tmp_path):
    model = KDRSDLBackgroundSubtractor()
    rng = np.random.default_rng(0)
    for _ in range(3):  # a checkpoint needs a frame seen
        model.process(rng.integers(0, 255, (24, 32), dtype=np.uint8))
    m = WorkerMetrics("cam1")
    ckpt = Checkpointer(str(tmp_path / "cam1.npz"), 0.2, "cam1", m, logging.getLogger("t"))
    tracker = SequenceTracker()
    assert 0.1 <= ckpt.due_at - time.monotonic() <= 0.2
    ckpt.tick(model, tracker)  # not due yet: nothing written
    assert not (tmp_path / "cam1.npz").exists()
    time.sleep(0.25)
    ckpt.tick(model, tracker)
    t_tick = time.monotonic()
    ckpt.close(model, tracker)  # waits for the periodic write, then writes the final one
    assert (tmp_path / "cam1.npz").exists()
    written = m.registry.get_sample_value("kdrsdl_worker_checkpoint_writes_total", {"camera": "cam1", "result": "ok"})
    assert written == 2
    assert abs(ckpt.due_at - (t_tick + 0.2)) < 0.05
