"""Worker checkpoints (issue 6): kill -9 and resume warm; corrupt or mismatched checkpoints are ignored."""

import itertools
import os
import signal
import time

import numpy as np
from helpers import (
    free_port,
    metric,
    receive,
    scrape,
    start_capture,
    start_worker,
    stop,
    subscriber,
    tcp,
    wait_for,
    wait_for_metrics,
)

from streamer.state import checkpoint


def _worker(frames, masks, port, state_dir, *extra):
    proc = start_worker(frames, masks, port, "--state-dir", state_dir, "--checkpoint-interval", 1, *extra)
    wait_for_metrics(proc, port)
    return proc


def _capture(frames, fps=60):
    return start_capture(frames, "synthetic:160x120", "--fps", fps)


def test_kill_9_worker_resumes_warm_from_its_checkpoint(tmp_path):
    frames, masks, port = tcp(), tcp(), free_port()
    worker = _worker(frames, masks, port, tmp_path)
    sub = subscriber(masks, "cam1")
    cap = _capture(frames)
    try:
        # past the first full window (30 x stride 8 = 240 frames) and a warm refit, then a checkpoint of that
        wait_for(
            lambda: metric(scrape(port), "kdrsdl_solver_starts_total", camera="cam1", mode="warm") >= 1,
            60,
            "a warm refit",
        )
        warm_at = metric(scrape(port), "kdrsdl_worker_checkpoint_writes_total", camera="cam1", result="ok")
        wait_for(
            lambda: (
                metric(scrape(port), "kdrsdl_worker_checkpoint_writes_total", camera="cam1", result="ok") >= warm_at + 2
            ),
            20,
            "a checkpoint after the warm refit",
        )
        before = wait_for(lambda: receive(sub, 0.5), 10, "a mask before the kill")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        assert worker.returncode == -signal.SIGKILL
        assert checkpoint.load(checkpoint.path_for(tmp_path, "cam1"))["window_frames"].shape[0] == 30
        assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # no half-written file left behind
        while receive(sub, 0.2) is not None:  # masks already in flight from the killed worker
            pass

        t0 = time.monotonic()
        worker = start_worker(frames, masks, port, "--state-dir", tmp_path, "--checkpoint-interval", 1)
        after = wait_for(lambda: receive(sub, 0.2), 15, "a mask from the restarted worker")
        took = time.monotonic() - t0
        print(f"first mask {took:.2f} s after the restart")
        assert took < 5, f"first mask {took:.1f} s after the restart"
        assert cap.poll() is None  # the capture kept running
        assert after.header["epoch"] != before.header["epoch"]  # a new worker process ...
        assert after.header["solver"]["start"] == "restored"  # ... that did not start from scratch
        s = scrape(port)
        assert metric(s, "kdrsdl_worker_checkpoint_restores_total", camera="cam1", result="warm") == 1
        # its next refit is warm (a cold start would need 2, 4, 8, 16, 30 frames first)
        wait_for(
            lambda: metric(scrape(port), "kdrsdl_solver_starts_total", camera="cam1", mode="warm") >= 1,
            30,
            "a warm refit after the restore",
        )
        s = scrape(port)
        assert metric(s, "kdrsdl_solver_starts_total", camera="cam1", mode="cold") == 0
        # frames sent while it was down are counted lost (the sequence position was restored), not silently gone
        assert metric(s, "kdrsdl_worker_frames_lost_total", camera="cam1") > 0
        masks_after = [after] + list(itertools.islice(iter(lambda: receive(sub, 1.0), None), 60))
        fg = np.mean([m.header["fg_ratio"] for m in masks_after])
        assert 0.005 < fg < 0.2  # the synthetic scene's objects cover ~2-5%: a real background, not all-foreground
    finally:
        sub.close()
        stop(cap)
        rc, _, err = stop(worker)
    assert rc == 0, err[-3000:]
    assert "warm restore from" in err


def test_corrupt_or_mismatched_checkpoint_is_ignored_with_a_log_line(tmp_path):
    path = checkpoint.path_for(tmp_path, "cam1")
    frames, masks, port = tcp(), tcp(), free_port()
    with open(path, "wb") as f:
        f.write(b"PK\x03\x04 this is not a checkpoint")
    worker = _worker(frames, masks, port, tmp_path)
    cap = _capture(frames, fps=100)
    try:
        wait_for(
            lambda: metric(scrape(port), "kdrsdl_worker_checkpoint_writes_total", camera="cam1", result="ok") >= 1,
            30,
            "a checkpoint written over the corrupt one",
        )
        s = scrape(port)
        assert metric(s, "kdrsdl_worker_checkpoint_restores_total", camera="cam1", result="corrupt") == 1
        assert metric(s, "kdrsdl_worker_frames_processed_total", camera="cam1") > 0
    finally:
        rc, _, err = stop(worker)
    assert rc == 0 and "ignoring corrupt checkpoint" in err, err[-3000:]
    assert checkpoint.load(path)["window_frames"].ndim == 3  # replaced by a valid one

    # other model settings: the checkpoint does not fit and is ignored, not half-used
    worker = _worker(frames, masks, port, tmp_path, "--rank", 7)
    try:
        wait_for(
            lambda: metric(scrape(port), "kdrsdl_worker_frames_processed_total", camera="cam1") > 0,
            30,
            "frames processed after a mismatched checkpoint",
        )
        s = scrape(port)
        assert metric(s, "kdrsdl_worker_checkpoint_restores_total", camera="cam1", result="mismatch") == 1
        assert metric(s, "kdrsdl_worker_checkpoint_restores_total", camera="cam1", result="warm") == 0
    finally:
        stop(cap)
        rc, _, err = stop(worker)
    assert rc == 0 and "other model settings" in err, err[-3000:]
