"""``kdrsdl run``: capture + worker + subscriber in one command, for a first look.

Starts the capture and the worker as real child processes on ipc endpoints in a
temporary directory, subscribes in this process to the masks and the events, shows a progress
bar (masks, fps, latency, and live F-measure when the source has ground truth, i.e. the
synthetic scene) and what the capture is doing (opening, open at what size and rate,
reconnecting and why), and prints a summary: how many of the frames read became masks and
where the others went. It ends when the worker's ``end_of_stream`` event arrives (a file's end,
``max_frames``), which comes after the stream's last mask and last event; a source that gives
no frame within the open timeout ends it with the capture's reason and exit 69. With
``--output DIR``, each run writes its masks and a contact sheet (frame | background |
foreground score | mask) into its own folder ``DIR/<camera>-<UTC time>/``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import tomli_w
from tqdm import tqdm

from core.evaluation.metrics import Confusion, confusion
from streamer.motion.snapshots import snapshot_files
from streamer.processes.lifecycle import LOG_LINE
from streamer.processes.sources import SyntheticSource, describe
from streamer.processes.subscriber import run_subscriber
from streamer.wire.protocol import Message

if TYPE_CHECKING:
    from streamer.config import Config

#: Seconds a child gets to stop after SIGTERM before it is killed: the worker stops within 5 s at
#: any resolution (streamer/processes/worker.py), the capture at once.
CHILD_STOP_TIMEOUT_S = 10.0


def stop_children(
    children: dict[str, subprocess.Popen], timeout: float, log: logging.Logger
) -> tuple[dict[str, int | None], list[str]]:
    """SIGTERM every child still running, wait up to ``timeout`` s in all, SIGKILL the rest.

    Parameters
    ----------
    children : dict of str to subprocess.Popen
    timeout : float
        Seconds, shared by all the children.
    log : logging.Logger

    Returns
    -------
    codes : dict of str to int
        Each child's exit status (negative: the signal that ended it).
    killed : list of str
        The children that had to be killed.
    """
    for p in children.values():
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + timeout
    killed = []
    for name, p in children.items():
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("%s did not stop within %.0f s of SIGTERM: killed", name, timeout)
            p.kill()
            p.wait()
            killed.append(name)
    return {name: p.returncode for name, p in children.items()}, killed


class _Relay:
    """A child's stderr copied to its log file; the lines worth a look shown on the terminal.

    The capture's lines at info and above are shown (what it opens, at what size and rate, why it
    reconnects); the worker's from warning up (drops, failures). The last warning is kept: it is
    the reason given when no frame comes.
    """

    def __init__(self, name: str, proc: subprocess.Popen, log_path: str, show: Callable[[str], None]) -> None:
        self.name, self.show = name, show
        self.floor = logging.INFO if name == "capture" else logging.WARNING
        self.last_warning: str | None = None
        self.thread = threading.Thread(target=self._copy, args=(proc, log_path), daemon=True)
        self.thread.start()

    def _copy(self, proc: subprocess.Popen, log_path: str) -> None:
        assert proc.stderr is not None
        with open(log_path, "w") as f:
            for line in iter(proc.stderr.readline, ""):
                f.write(line)
                f.flush()
                m = LOG_LINE.match(line.rstrip("\n"))
                if m is None:
                    continue
                level = logging.getLevelName(m["level"])
                if isinstance(level, int) and level >= logging.WARNING:
                    self.last_warning = m["message"]
                if isinstance(level, int) and level >= self.floor:
                    self.show(f"{self.name}: {m['message']}")


def _child(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "streamer", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        errors="replace",  # a stray byte must not end the relay (the child would then block on a full pipe)
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def write_config(cfg: Config, path: str) -> None:
    """Write a :class:`streamer.config.Config` as TOML (unset values are left out: TOML has no null)."""

    def drop_none(d: dict[str, Any]) -> dict[str, Any]:
        return {k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}

    with open(path, "wb") as f:
        tomli_w.dump(drop_none(cfg.model_dump()), f)


#: sysexits.h: a service (here the source) is unavailable.
EX_UNAVAILABLE = 69
#: Seconds ``run`` waits, once the capture has exited, for the worker's ``end_of_stream`` event
#: before it stops anyway (a capture stopped by a signal sends no end).
END_WAIT_S = 10.0


def output_folder(root: str, camera: str) -> str:
    """Make and return this run's own folder ``root/<camera>-<UTC time>/`` (``-2``, ``-3``... if taken)."""
    base = os.path.join(root, f"{camera}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    path, n = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            n += 1
            path = f"{base}-{n}"


def run_all(cfg: Config, stop: threading.Event, log: logging.Logger, open_timeout_s: float = 15.0) -> int:
    """Run the three parts until the stream ends (a file's end, ``max_frames``) or a stop signal.

    Parameters
    ----------
    cfg : streamer.config.Config
    stop : threading.Event
        Set by SIGINT or SIGTERM (:class:`streamer.processes.lifecycle.StopEvent` says which).
    log : logging.Logger
    open_timeout_s : float
        Seconds the first mask may take from the capture's start; beyond, the run stops with the
        capture's last warning as the reason.

    Returns
    -------
    int
        0 when the stream ended and both children stopped cleanly; 69 (EX_UNAVAILABLE) when no
        frame came within ``open_timeout_s``; 128 + the signal's number when stopped by one
        (130 for Ctrl-C); 1 when a child failed or did not stop within ``CHILD_STOP_TIMEOUT_S``
        of SIGTERM and was killed (the summary lists it).
    """
    tmp = tempfile.mkdtemp(prefix="kdrsdl-run-")
    output = output_folder(cfg.subscribe.output, cfg.camera) if cfg.subscribe.output else None
    # the children get this very configuration, with the run's own endpoints, as one file
    child_cfg = cfg.model_copy(deep=True)
    child_cfg.capture.frames_endpoint = child_cfg.worker.frames_endpoint = f"ipc://{tmp}/frames"
    child_cfg.worker.masks_endpoint = f"ipc://{tmp}/masks"
    child_cfg.subscribe.output = output
    if output:
        child_cfg.worker.snapshot = os.path.join(output, "contact_sheet.png")
        if child_cfg.events.snapshot_dir is None:  # the events' pictures beside the masks
            child_cfg.events.snapshot_dir = os.path.join(output, "snapshots")
    config_file = os.path.join(tmp, "config.toml")
    write_config(child_cfg, config_file)
    children = {"worker": _child(["worker", "--config", config_file])}
    try:
        return _run(child_cfg, stop, log, tmp, output, config_file, children, open_timeout_s)
    finally:
        # whatever happened, no child outlives this command (the capture first: the worker drains)
        running: dict[str, subprocess.Popen] = {
            name: children[name] for name in ("capture", "worker") if name in children
        }
        stop_children(running, CHILD_STOP_TIMEOUT_S, log)


class _Progress:
    """The progress bar of ``kdrsdl run``: masks, fps, latency and the live F-measure (synthetic scene)."""

    def __init__(self, cfg: Config) -> None:
        c = cfg.capture
        kind = describe(c.source)
        self.scene = SyntheticSource(c.source, c.width or None, c.height or None).scene if kind == "synthetic" else None
        self.warmup = cfg.model.params().window  # frames before the F-measure counts
        self.total = Confusion(0, 0, 0, 0)
        self.latencies: list[float] = []
        self.last_index = -1
        self.events = 0
        self.end: dict | None = None  # the worker's end_of_stream event
        total = c.max_frames or None
        if kind == "file" and not c.loop:
            frames = _frame_count(c.source)
            total = min(total or frames, frames) if frames else total
        self.bar = tqdm(total=total, unit="mask", desc="kdrsdl run", file=sys.stderr)
        self.t_start = time.monotonic()

    def write(self, line: str) -> None:
        """A line on stderr, above the bar (tqdm writes to stdout unless told)."""
        self.bar.write(line, file=sys.stderr)

    def on_mask(self, msg: Message) -> None:
        h = msg.header
        self.latencies.append(h["latency_s"])
        self.last_index = max(self.last_index, h.get("frame_index") or 0)
        post = {
            "fps": f"{len(self.latencies) / max(time.monotonic() - self.t_start, 1e-9):.0f}",
            "latency_ms": f"{1000 * h['latency_s']:.0f}",
        }
        if self.scene is not None and h.get("frame_index") is not None and h["frame_index"] >= self.warmup:
            self.total = self.total + confusion(msg.image > 127, self.scene.fgmask(h["frame_index"]))
            post["F"] = f"{self.total.f_measure:.3f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def on_event(self, header: dict) -> None:
        if header["event"] == "end_of_stream":
            self.end = header
        elif header["event"] in ("start", "end"):
            self.events += 1

    def summary(self, received: int) -> dict[str, Any]:
        elapsed = time.monotonic() - self.t_start
        lat = np.array(self.latencies) if self.latencies else np.zeros(1)
        f = self.total.f_measure
        # frames the capture read: the end's count, else the last frame's index + 1 (a lower bound)
        frames = self.end["frames"] if self.end else self.last_index + 1
        return {
            "masks": received,
            "frames": frames,
            "dropped": max(frames - received, 0),
            "ended": self.end["reason"] if self.end else None,
            "events": self.events,
            "seconds": round(elapsed, 2),
            "fps": round(received / max(elapsed, 1e-9), 1),
            "latency_ms_p50": round(1000 * float(np.percentile(lat, 50)), 1),
            "latency_ms_p99": round(1000 * float(np.percentile(lat, 99)), 1),
            "f_measure": None if self.scene is None or np.isnan(f) else round(f, 4),
        }


def _frame_count(path: str) -> int:
    """Frames a video file says it holds (0 when it does not say)."""
    cap = cv2.VideoCapture(path)
    try:
        return max(int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0), 0)
    finally:
        cap.release()


def _drops_text(summary: dict[str, Any], end: dict | None) -> str:
    """Where the frames that became no mask went, in words."""
    frames, masks = summary["frames"], summary["masks"]
    text = f"{masks} of {frames} frames became masks"
    if frames <= masks:
        return text
    if end is not None:
        parts = [
            f"{end['frames'] - end['sent']} refused at the capture's high-water mark or skipped there as corrupt",
            f"{end['dropped']} dropped by the worker as overload",
            f"{end['lost']} lost in transit",
            f"{max(end['masks'] - masks, 0)} missed by this subscriber",
        ]
        text += ": " + ", ".join(p for p in parts if not p.startswith("0 "))
    return text + " (a live source the worker could not keep up with drops frames; a file never does)"


def _run(
    cfg: Config,
    stop: threading.Event,
    log: logging.Logger,
    tmp: str,
    output: str | None,
    config_file: str,
    children: dict[str, subprocess.Popen],
    open_timeout_s: float,
) -> int:
    worker = children["worker"]
    progress = _Progress(cfg)
    relays = {"worker": _Relay("worker", worker, os.path.join(tmp, "worker.log"), progress.write)}
    # let the worker bind first (frames sent earlier would be counted drops): its ipc file appears
    deadline = time.monotonic() + 30
    while not os.path.exists(f"{tmp}/frames") and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    capture = children["capture"] = _child(["capture", "--config", config_file])
    relays["capture"] = _Relay("capture", capture, os.path.join(tmp, "capture.log"), progress.write)
    cfg.subscribe.masks_endpoint = cfg.worker.masks_endpoint
    cfg.subscribe.count = 0  # the end of the stream ends the run
    cfg.subscribe.events = False  # run shows the masks
    if cfg.view.port:
        progress.write(f"kdrsdl run: live view on http://{cfg.view.address}:{cfg.view.port}/")
    sub_stop = threading.Event()
    timed_out = threading.Event()
    t_start = time.monotonic()

    def on_event(header: dict) -> None:
        progress.on_event(header)
        if header["event"] == "end_of_stream":
            sub_stop.set()  # its stream's last mask and events came before it

    def watch() -> None:
        t_exit = None
        while not stop.is_set() and not sub_stop.is_set():
            if not progress.latencies and time.monotonic() - t_start > open_timeout_s:
                timed_out.set()
                break
            if worker.poll() is not None:
                break
            if capture.poll() is not None:
                t_exit = t_exit or time.monotonic()
                if time.monotonic() - t_exit > END_WAIT_S:  # it ended without an end of stream
                    break
            time.sleep(0.1)
        sub_stop.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        summary = run_subscriber(cfg, sub_stop, log, on_mask=progress.on_mask, on_event=on_event)
        if progress.end is not None:  # the capture sent its end and is exiting on its own: let it
            with contextlib.suppress(subprocess.TimeoutExpired):
                capture.wait(timeout=END_WAIT_S)
        codes, killed = stop_children({"capture": capture, "worker": worker}, CHILD_STOP_TIMEOUT_S, log)
        for relay in relays.values():  # the children's last lines, above the bar
            relay.thread.join(timeout=2.0)
    finally:
        progress.bar.close()
    result = {**progress.summary(summary["received"]), "exit_codes": codes, "killed": killed, "logs": tmp}
    if output:
        result["output"] = output
    print(json.dumps(result))
    say = functools.partial(print, file=sys.stderr)
    if timed_out.is_set():
        reason = relays["capture"].last_warning or "the capture gave no reason (see its log)"
        reason = re.sub(r"; retrying in [0-9.]+ s$", "", reason)
        say(f"kdrsdl run: no frame from {cfg.capture.source} within {open_timeout_s:g} s: {reason}")
        say(f"kdrsdl run: logs of the capture and the worker in {tmp}/")
        return EX_UNAVAILABLE
    say(f"kdrsdl run: {_drops_text(result, progress.end)}")
    if output:
        n, keep = summary["received"], cfg.subscribe.keep
        masks = f"the newest {keep} of {n} masks" if keep and n > keep else f"{n} masks"
        sheet = os.path.join(output, "contact_sheet.png")
        where = f"{masks} in {output}/ (mask_*.png)"
        if os.path.exists(sheet):
            where += f", contact sheet {sheet}"
        pictures = cfg.events.snapshot_dir  # run_all's default beside the masks, or the user's
        if pictures and os.path.isdir(pictures):
            where += f", {len(snapshot_files(pictures, cfg.camera))} event snapshots in {pictures}/"
    else:
        where = "no masks written (add --output DIR to keep them)"
    say(f"kdrsdl run: {where}; logs of the capture and the worker in {tmp}/")
    if killed or any(code not in (0, None) for code in codes.values()):
        return 1
    signum = getattr(stop, "signum", None)
    return 128 + signum if stop.is_set() and signum else 0
