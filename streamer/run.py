"""``kdrsdl run``: capture + worker + subscriber in one command, for a first look.

Starts the capture and the worker as real child processes on ipc endpoints in a
temporary directory, subscribes in this process, shows a progress bar (frames,
fps, latency, and live F-measure when the source has ground truth, i.e. the
synthetic scene), and prints a summary. With ``--output``, writes the masks and a
contact sheet (frame | background | foreground score | mask).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import tomli_w
from tqdm import tqdm

from core.evaluation.metrics import Confusion, confusion
from streamer.protocol import Message
from streamer.sources import SyntheticSource, describe
from streamer.subscriber import run_subscriber

if TYPE_CHECKING:
    from streamer.config import Config

#: Seconds a child gets to stop after SIGTERM before it is killed: the worker stops within 5 s at
#: any resolution (streamer/worker.py), the capture at once.
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


def _child(args: list[str], log_path: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "streamer", *args], stdout=subprocess.DEVNULL, stderr=open(log_path, "wb")
    )


def write_config(cfg: Config, path: str) -> None:
    """Write a :class:`streamer.config.Config` as TOML (unset values are left out: TOML has no null)."""

    def drop_none(d: dict[str, Any]) -> dict[str, Any]:
        return {k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}

    with open(path, "wb") as f:
        tomli_w.dump(drop_none(cfg.model_dump()), f)


def run_all(cfg: Config, stop: threading.Event, log: logging.Logger) -> int:
    """Run the three parts until the source ends or ``max_frames`` masks arrived.

    Returns
    -------
    int
        0 when every frame sent got a mask or a counted drop; 1 when a child failed or did not
        stop within ``CHILD_STOP_TIMEOUT_S`` of SIGTERM and was killed (the summary lists it).
    """
    tmp = tempfile.mkdtemp(prefix="kdrsdl-run-")
    output = cfg.subscribe.output
    if output:
        os.makedirs(output, exist_ok=True)
    # the children get this very configuration, with the run's own endpoints, as one file
    child_cfg = cfg.model_copy(deep=True)
    child_cfg.capture.frames_endpoint = child_cfg.worker.frames_endpoint = f"ipc://{tmp}/frames"
    child_cfg.worker.masks_endpoint = f"ipc://{tmp}/masks"
    if output:
        child_cfg.worker.snapshot = os.path.join(output, "contact_sheet.png")
    config_file = os.path.join(tmp, "config.toml")
    write_config(child_cfg, config_file)
    worker_args = ["worker", "--config", config_file]
    children = {"worker": _child(worker_args, os.path.join(tmp, "worker.log"))}
    try:
        return _run(child_cfg, stop, log, tmp, output, config_file, children)
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
        synthetic = describe(c.source) == "synthetic"
        self.scene = SyntheticSource(c.source, c.width or None, c.height or None).scene if synthetic else None
        self.warmup = cfg.model.params().window  # frames before the F-measure counts
        self.total = Confusion(0, 0, 0, 0)
        self.latencies: list[float] = []
        self.bar = tqdm(total=c.max_frames or None, unit="mask", desc="kdrsdl run", file=sys.stderr)
        self.t_start = time.monotonic()

    def on_mask(self, msg: Message) -> None:
        h = msg.header
        self.latencies.append(h["latency_s"])
        post = {
            "fps": f"{len(self.latencies) / max(time.monotonic() - self.t_start, 1e-9):.0f}",
            "latency_ms": f"{1000 * h['latency_s']:.0f}",
        }
        if self.scene is not None and h.get("frame_index") is not None and h["frame_index"] >= self.warmup:
            self.total = self.total + confusion(msg.image > 127, self.scene.fgmask(h["frame_index"]))
            post["F"] = f"{self.total.f_measure:.3f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def summary(self, received: int) -> dict[str, Any]:
        elapsed = time.monotonic() - self.t_start
        lat = np.array(self.latencies) if self.latencies else np.zeros(1)
        f = self.total.f_measure
        return {
            "masks": received,
            "seconds": round(elapsed, 2),
            "fps": round(received / max(elapsed, 1e-9), 1),
            "latency_ms_p50": round(1000 * float(np.percentile(lat, 50)), 1),
            "latency_ms_p99": round(1000 * float(np.percentile(lat, 99)), 1),
            "f_measure": None if self.scene is None or np.isnan(f) else round(f, 4),
        }


def _run(
    cfg: Config,
    stop: threading.Event,
    log: logging.Logger,
    tmp: str,
    output: str | None,
    config_file: str,
    children: dict[str, subprocess.Popen],
) -> int:
    worker = children["worker"]
    # let the worker bind first (frames sent earlier would be counted drops): its ipc file appears
    deadline = time.monotonic() + 30
    while not os.path.exists(f"{tmp}/frames") and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    capture = children["capture"] = _child(["capture", "--config", config_file], os.path.join(tmp, "capture.log"))
    progress = _Progress(cfg)
    cfg.subscribe.masks_endpoint = cfg.worker.masks_endpoint
    cfg.subscribe.count = cfg.capture.max_frames
    cfg.subscribe.events = False  # run shows the masks
    if cfg.view.port:
        print(f"kdrsdl run: live view on http://{cfg.view.address}:{cfg.view.port}/", file=sys.stderr)
    sub_stop = threading.Event()

    def watch() -> None:
        while not stop.is_set() and not sub_stop.is_set():
            if capture.poll() is not None:
                # source ended: give the worker a moment to publish the last masks
                time.sleep(1.0)
                sub_stop.set()
            time.sleep(0.1)
        sub_stop.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        summary = run_subscriber(cfg, sub_stop, log, on_mask=progress.on_mask)
    finally:
        progress.bar.close()
    codes, killed = stop_children({"capture": capture, "worker": worker}, CHILD_STOP_TIMEOUT_S, log)
    result = {**progress.summary(summary["received"]), "exit_codes": codes, "killed": killed, "logs": tmp}
    if output:
        result["output"] = output
    print(json.dumps(result))
    if output:
        n, keep = summary["received"], cfg.subscribe.keep
        masks = f"the newest {keep} of {n} masks" if keep and n > keep else f"{n} masks"
        where = f"{masks} in {output}/ (mask_*.png), contact sheet {output}/contact_sheet.png"
    else:
        where = "no masks written (add --output DIR to keep them)"
    print(f"kdrsdl run: {where}; logs of the capture and the worker in {tmp}/", file=sys.stderr)
    return 0 if all(code == 0 for code in codes.values()) and not killed else 1
