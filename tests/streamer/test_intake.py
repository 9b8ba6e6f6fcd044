"""The worker's intake, in-process: validation, sequence tracking and the backlog's bound."""

import time

import numpy as np

from streamer.processes.intake import Intake
from streamer.wire.protocol import encode


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


def file_frame(seq, epoch="f1"):
    """A frame of a file (``live`` false): never to be dropped."""
    img = np.zeros((24, 32), np.uint8)
    return [bytes(p) for p in encode("frame", "cam1", epoch, seq, time.time_ns(), img, live=False, t_read_ns=1)]


def test_a_files_frames_are_never_dropped_the_intake_holds_back_instead():
    """Issue 45: a file is not live; when its frames fill the backlog, the worker stops receiving."""
    intake = Intake("cam1", max_side=64, capacity=2)
    assert not intake.holds_back
    for seq in range(3):  # one more than the capacity: still none dropped
        assert intake.offer(file_frame(seq)).dropped == 0
    assert intake.holds_back and len(intake) == 3
    intake.next()
    intake.next()
    assert not intake.holds_back  # room again: receive
    intake.offer(frame(0, epoch="live"))  # a live source again (a new epoch): the oldest may go
    intake.offer(frame(1, epoch="live"))
    assert intake.offer(frame(2, epoch="live")).dropped == 1 and not intake.holds_back


def test_an_end_of_stream_joins_the_backlog_after_its_frames_and_counts_the_frames_lost_before_it():
    from streamer.wire.protocol import encode_end

    intake = Intake("cam1", max_side=64, capacity=2)
    intake.offer(frame(0))
    intake.offer(frame(1))
    o = intake.offer(encode_end("cam1", "e1", 4, time.time_ns(), "end_of_file", 5))  # frames 2 and 3 lost
    assert o.accepted and o.end and o.lost == 2
    o = intake.offer(frame(0, epoch="e2"))  # a new stream right after: a live frame is dropped, never the end
    assert o.dropped == 1
    assert [(m.kind, m.header["seq"]) for m in intake.backlog] == [("frame", 1), ("end", 4), ("frame", 0)]
    assert intake.next().kind == "frame" and intake.next().image.shape == (0, 0)
    assert intake.offer(encode_end("cam1", "e2", 0, 1, "max_frames", 1)).rejected == "seq"  # seq 0 already seen
    assert intake.offer(encode_end("cam9", "e3", 0, 1, "max_frames", 1)).rejected == "camera"
