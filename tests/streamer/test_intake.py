"""The worker's intake, in-process: validation, sequence tracking and the backlog's bound."""

import time

import numpy as np

from streamer.intake import Intake
from streamer.protocol import encode


def frame(seq, camera="cam1", epoch="e1", shape=(24, 32)):
    return [bytes(p) for p in encode("frame", camera, epoch, seq, time.time_ns(), np.zeros(shape, np.uint8))]


def test_accepts_counts_gaps_and_keeps_the_newest_frames():
    intake = Intake("cam1", max_side=64, capacity=2)
    assert intake.offer(frame(0)).accepted
    o = intake.offer(frame(3))  # 1 and 2 never arrived
    assert o.accepted and o.lost == 2 and o.dropped == 0
    o = intake.offer(frame(4))  # a third frame waiting: the oldest goes
    assert o.accepted and o.dropped == 1
    assert [intake.next().header["seq"] for _ in range(len(intake))] == [3, 4]
    assert intake.next() is None


def test_refusals_say_why_and_a_new_epoch_is_a_restart():
    intake = Intake("cam1", max_side=64, capacity=4)
    intake.offer(frame(5))
    o = intake.offer(frame(5))
    assert not o.accepted and o.rejected == "seq"
    o = intake.offer(frame(6, camera="cam2"))
    assert o.rejected == "camera" and "cam2" in o.error
    o = intake.offer(frame(7, shape=(100, 32)))  # larger than max_side
    assert o.rejected == "shape"
    assert intake.offer([b"frame/cam1/", b"{}"]).rejected == "parts"
    o = intake.offer(frame(0, epoch="e2"))  # the capture restarted: not 6 lost frames
    assert o.accepted and o.restarted and o.lost == 0
    assert len(intake) == 2
