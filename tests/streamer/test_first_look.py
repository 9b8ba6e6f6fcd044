"""Issue 45: a first look that tells the truth, through real processes and real sockets.

A file plays as the video it is (its own frame rate, every frame a mask, timestamps in the
video's time, its end ending the events); a live source still drops, and says so; a source that
never opens ends ``kdrsdl run`` with the reason and exit 69; Ctrl-C exits 130.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import zmq
from helpers import free_port, start_capture, start_worker, stop, wait_for, write_video

from streamer.wire.protocol import decode, decode_event, kind_of

FPS = 10.0
N_FRAMES = 600
#: A box crosses in frames 100-249 (an event of 14.9 s of video) and from 520 to the file's end
#: (its event is open when the file ends: the end of stream must end it).
CROSSINGS = [(100, 249), (520, N_FRAMES - 1)]
#: One frame of the video, seconds: the tolerance of an event's duration (issue 45).
FRAME_S = 1 / FPS


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    path = tmp_path_factory.mktemp("video") / "walk10.avi"
    write_video(path, N_FRAMES, FPS, CROSSINGS)
    return path


def _run(*args, cwd, log):
    """``kdrsdl run ARGS`` as a real process, stderr to the file ``log`` (a long run writes much)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "streamer", "run", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),
        cwd=cwd,
        env=env,
    )


def _summary(proc, timeout):
    out, _ = proc.communicate(timeout=timeout)
    return json.loads(out.decode().strip().splitlines()[-1])


class _Services:
    """``kdrsdl worker`` and ``kdrsdl capture`` on a file, and a subscriber to its masks and events."""

    def __init__(self, tmp_path, name, video, *capture_flags):
        self.frames, self.masks_ep = f"ipc://{tmp_path}/{name}-f", f"ipc://{tmp_path}/{name}-m"
        self.worker = start_worker(self.frames, self.masks_ep, free_port(), camera=name)
        self.sub = zmq.Context.instance().socket(zmq.SUB)
        for kind in ("mask", "event"):
            self.sub.setsockopt(zmq.SUBSCRIBE, f"{kind}/{name}/".encode())
        self.sub.connect(self.masks_ep)
        wait_for(lambda: os.path.exists(f"{tmp_path}/{name}-m"), 30, "the worker's sockets")
        time.sleep(0.5)  # the subscription reaches the worker
        self.capture = start_capture(self.frames, video, *capture_flags, camera=name)
        self.masks, self.events, self.ended = [], [], False

    def take(self):
        """Receive what is waiting; whether the ``end_of_stream`` event has come."""
        while self.sub.poll(0):
            parts = self.sub.recv_multipart()
            if kind_of(parts) == "event":
                self.events.append(decode_event(parts))
                self.ended |= self.events[-1]["event"] == "end_of_stream"
            else:
                self.masks.append(decode(parts, "mask").header)
        return self.ended

    def close(self):
        codes = {"capture": self.capture.wait(timeout=60)}
        codes["worker"], _, err = stop(self.worker)  # the worker waits for more frames: SIGTERM
        self.sub.close()
        return codes, err


def test_a_file_plays_as_the_video_it_is_every_frame_a_mask_events_in_video_time(tmp_path, video):
    """Through ``run`` and through ``capture`` + ``worker``, at the file's own rate and with
    ``--fps 0``: 600 masks each time, none dropped; durations within one frame of the truth."""
    runs = {
        "own": _run("--source", video, cwd=tmp_path, log=tmp_path / "own.err"),
        "fps0": _run("--source", video, "--fps", 0, cwd=tmp_path, log=tmp_path / "fps0.err"),
    }
    services = {"own": _Services(tmp_path, "own", video), "fps0": _Services(tmp_path, "fps0", video, "--fps", 0)}
    # at 10 fps the file lasts 60 s; 120 s of margin for a busy 2-core machine
    wait_for(lambda: all([s.take() for s in services.values()]), 180, "the end of both streams")
    summaries = {name: _summary(proc, 120) for name, proc in runs.items()}
    for name, summary in summaries.items():
        err = (tmp_path / f"{name}.err").read_text()
        assert runs[name].returncode == 0, err[-3000:]
        assert (summary["masks"], summary["frames"], summary["dropped"]) == (N_FRAMES, N_FRAMES, 0), summary
        assert summary["ended"] == "end_of_file" and summary["events"] == 2 * len(CROSSINGS), summary
        assert f"{N_FRAMES} of {N_FRAMES} frames became masks" in err
        assert "open: file" in err and "at 10 fps, 600 frames" in err  # what the capture opened, on the terminal
    # played at its own rate it takes the video's 60 s (a sleep's lower bound holds on any machine);
    # --fps 0 goes as fast as the worker takes the frames
    assert summaries["own"]["seconds"] >= 0.95 * N_FRAMES / FPS
    assert summaries["fps0"]["seconds"] < 0.75 * summaries["own"]["seconds"]
    for name, s in services.items():
        codes, err = s.close()
        assert codes == {"capture": 0, "worker": 0}, err[-3000:]
        assert [m["frame_index"] for m in s.masks] == list(range(N_FRAMES)), name  # every frame, in order
        # the latency counts from the read, not from the video's time (which runs ahead at --fps 0)
        assert all(0 < m["latency_s"] < 10 for m in s.masks), name
        ends = [e for e in s.events if e["event"] == "end"]
        assert [e["reason"] for e in ends] == ["quiet", "end_of_stream"], s.events
        for e, (first, last) in zip(ends, CROSSINGS, strict=True):
            assert abs(e["duration_s"] - (last - first) / FPS) <= FRAME_S + 1e-6, (name, e)
        eos = s.events[-1]
        assert eos["event"] == "end_of_stream" and eos["reason"] == "end_of_file", eos
        assert (eos["frames"], eos["sent"], eos["masks"], eos["dropped"], eos["lost"]) == (
            N_FRAMES,
            N_FRAMES,
            N_FRAMES,
            0,
            0,
        )
        assert "end of stream (end_of_file)" in err and "600 masks published, 0 dropped" in err


def test_a_live_source_the_worker_cannot_follow_drops_and_says_so(tmp_path):
    """The synthetic scene unthrottled is made faster than the worker takes it: drops, in the log
    and in the summary; the run still ends (max_frames) with exit 0."""
    log = tmp_path / "run.err"
    proc = _run("--source", "synthetic", "--fps", 0, "--max-frames", 300, cwd=tmp_path, log=log)
    summary = _summary(proc, 120)
    err = log.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert summary["ended"] == "max_frames" and summary["frames"] == 300, summary
    assert summary["dropped"] > 0 and summary["masks"] + summary["dropped"] == 300, summary
    assert f"{summary['masks']} of 300 frames became masks:" in err, err[-2000:]
    # each side that dropped says so with its count: the worker's own line (rate-limited),
    # relayed to the terminal, and the capture's refusals in its last line
    worker_drops = sum(int(n) for n in re.findall(r"worker: (\d+) frames dropped as overload", err))
    refused = int(re.search(r"\((\d+) sent, (\d+) refused at the high-water mark\)", err).group(2))
    assert worker_drops + refused == summary["dropped"], err[-2000:]


def test_a_source_that_never_opens_stops_the_run_with_exit_69_and_the_reason(tmp_path):
    timeout = 4.0
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "streamer", "--version"], capture_output=True, check=True)
    start_cost = time.monotonic() - t0  # an interpreter's start on this machine now
    url = f"rtsp://127.0.0.1:{free_port()}/none"  # a closed port
    t0 = time.monotonic()
    proc = _run("--source", url, "--open-timeout", timeout, cwd=tmp_path, log=tmp_path / "run.err")
    summary = _summary(proc, 60)
    elapsed = time.monotonic() - t0
    err = (tmp_path / "run.err").read_text()
    assert proc.returncode == 69, err[-3000:]
    assert elapsed < timeout + 5 + 2 * start_cost, elapsed  # issue 45: within the timeout + 5 s
    assert f"no frame from {url} within 4 s: cannot open stream source" in err, err[-2000:]
    assert summary["masks"] == 0


@pytest.mark.parametrize("source", ["synthetic", "dead"])
def test_ctrl_c_exits_130_and_the_summary_names_only_files_that_exist(tmp_path, source):
    spec = "synthetic" if source == "synthetic" else f"rtsp://127.0.0.1:{free_port()}/none"
    out = tmp_path / "out"
    proc = _run("--source", spec, "--max-frames", 0, "--open-timeout", 120, "--output", out, cwd=tmp_path,
                log=tmp_path / "run.err")  # fmt: skip
    if source == "synthetic":
        wait_for(lambda: len(list(out.glob("*/mask_*.png"))) >= 20, 60, "masks written")
    else:
        wait_for(lambda: "cannot open stream source" in (tmp_path / "run.err").read_text(), 60, "a failed open")
    proc.send_signal(signal.SIGINT)
    summary = _summary(proc, 60)
    err = (tmp_path / "run.err").read_text()
    assert proc.returncode == 130, err[-3000:]
    folder = summary["output"]
    assert os.path.dirname(folder) == str(out) and os.path.basename(folder).startswith("default-")
    sheet = os.path.join(folder, "contact_sheet.png")
    assert (sheet in err) == os.path.exists(sheet) == (source == "synthetic"), err[-2000:]
    assert f"{summary['masks']} masks in {folder}/" in err and os.path.isdir(folder)


def test_run_parses_the_log_lines_its_children_write():
    """``kdrsdl run`` shows its children's lines by parsing them (LOG_LINE): the format and the
    parser live side by side in streamer/processes/lifecycle.py, and this checks they agree."""
    from streamer.processes.lifecycle import LOG_LINE

    code = (
        "from streamer.processes.lifecycle import setup_logging; "
        "setup_logging('capture', 'cam-1.a').warning('open: [x] y')"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    m = LOG_LINE.match(err.strip())
    assert m and (m["level"], m["role"], m["message"]) == ("WARNING", "capture", "open: [x] y"), err
