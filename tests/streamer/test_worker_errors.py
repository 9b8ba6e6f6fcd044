"""The worker's path for a frame the model fails on (issue 47's safety net).

The wire carries uint8 frames only, which the model always takes (1 x 1 to 3 x 700 frames go
through): no message a capture can send makes it raise. The path is reached here in-process with
the worker's own parts and a real model, by a frame the model refuses (float32 holding a NaN:
``KDRSDLBackgroundSubtractor`` raises ValueError on non-finite values), published on a real PUB
socket. No part is replaced.
"""

import logging

import numpy as np
import zmq
from helpers import subscriber, tcp

from streamer.config import load
from streamer.ops.metrics import WorkerMetrics
from streamer.processes.worker import _Worker
from streamer.wire.protocol import Message, decode


def _frame(seq, image):
    header = {"v": 1, "camera": "cam1", "epoch": "e1", "seq": seq, "t_capture_ns": 10**18 + seq, "frame_index": seq}
    return Message("frame", header, image)


def test_a_frame_the_model_fails_on_resets_it_and_is_counted_and_the_next_frame_gets_its_mask():
    cfg = load(overrides={"camera": "cam1"})
    m = WorkerMetrics("cam1")
    worker = _Worker(cfg, logging.getLogger("test"), m)
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    endpoint = tcp()
    pub.bind(endpoint)
    sub = subscriber(endpoint, "cam1")  # connected before the first mask

    def sample(name, **labels):
        return m.registry.get_sample_value(name, {"camera": "cam1", **labels})

    try:
        rng = np.random.default_rng(0)
        good = [rng.integers(90, 110, (48, 64), dtype=np.uint8) for _ in range(3)]
        worker.process(_frame(0, good[0]), pub)
        assert worker.seq == 1 and worker.stage.model.n_frames == 1
        bad = good[1].astype(np.float32)
        bad[5, 5] = np.nan
        worker.process(_frame(1, bad), pub)
        # the frame is dropped as an error and the model reset (as new); nothing is published for it
        assert sample("kdrsdl_worker_frames_dropped_total", reason="error") == 1
        assert sample("kdrsdl_solver_resets_total") == 1
        assert worker.seq == 1 and worker.stage.model.n_frames == 0
        worker.process(_frame(2, good[2]), pub)  # the camera goes on
        assert worker.seq == 2 and worker.stage.model.n_frames == 1
        frame_seqs = []
        while sub.poll(1000):
            parts = sub.recv_multipart()
            frame_seqs.append(decode(parts, "mask").header["frame_seq"])
        assert frame_seqs == [0, 2]
    finally:
        sub.close()
        pub.close()
        worker.stage.close(wait=5)
