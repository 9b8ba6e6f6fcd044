"""The worker process: frames (PULL) -> KDRSDL background model -> masks (PUB).

A short loop over small parts (docs/design.md, "Processes"): the intake validates every message
(rejections are counted by reason and logged), counts sequence gaps as lost frames and keeps at
most ``backlog`` frames waiting, dropping the oldest beyond that (counted)
(:mod:`streamer.processes.intake`; a file's frames are never dropped: the worker then stops receiving
and the capture waits), logs drops at most every ``DROP_LOG_EVERY_S`` seconds with their count;
at a capture's end of stream it ends the open events, reason ``"end_of_stream"``, and publishes
an ``end_of_stream`` event with what became of the stream's frames; the model stage turns a
frame into a mask and solver facts
(:mod:`streamer.processes.model_stage`); the motion stage fills the ignored areas before the model and
lists the mask's regions, zone fractions and events after it (:mod:`streamer.motion.stage`);
each mask is published on ``mask/<camera>/``, each event on ``event/<camera>/`` and each event's
snapshots (its start's and its peak's, :mod:`streamer.motion.snapshots`) on ``snapshot/<camera>/``
and into ``[events] snapshot_dir``; the live
view, when its port is set, shows them (:mod:`streamer.processes.view`); with a state
directory, the checkpointer writes the model atomically every ``checkpoint_interval_s`` and at a
clean stop, and resumes from a valid checkpoint at start (:mod:`streamer.state.checkpointer`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import cv2
import numpy as np
import zmq

from streamer.config import ConfigError
from streamer.motion.events import FRAME
from streamer.motion.snapshots import Frame, Snapshot, SnapshotDir, SnapshotTaker
from streamer.motion.stage import MotionStage
from streamer.motion.zones import ZoneError
from streamer.ops.memory import hold_freed_heap, release_file_pages
from streamer.ops.metrics import WorkerMetrics, start_http
from streamer.ops.threads import limit_threads
from streamer.processes.intake import Intake
from streamer.processes.model_stage import ModelStage
from streamer.processes.view import LiveView
from streamer.state import checkpoint
from streamer.state.checkpointer import Checkpointer
from streamer.wire import security
from streamer.wire.messages import event_fields, mask_fields, snapshot_fields
from streamer.wire.mqtt import MqttPublisher
from streamer.wire.protocol import (
    COPY_THRESHOLD,
    Message,
    encode,
    encode_event,
    encode_snapshot,
    log_rejection,
    new_epoch,
)

if TYPE_CHECKING:
    from core.streaming.background import FrameResult
    from core.streaming.refit import RefitReport
    from streamer.config import Config, WorkerConfig
    from streamer.motion.events import Event

#: Seconds the worker waits at stop for an abandoned refit to end (the solver checks between
#: iterations and between the cold start's per-slice SVDs; the refit thread is a daemon and does
#: not hold up the exit beyond this). With the loop's 0.2 s wait for a frame, a stop takes at most ~2.5 s.
#: A refit still inside one iteration then (a long BLAS call) is left running and the process ends
#: with ``os._exit``: the interpreter's normal exit would tear down the libraries under that thread
#: and die of SIGSEGV.
STOP_REFIT_WAIT_S = 2.0
#: Seconds between two log lines about dropped or lost frames (each line gives the count since the last).
DROP_LOG_EVERY_S = 10.0
#: Milliseconds the loop waits for a frame (the frame socket's receive timeout) before it beats
#: the watchdog anyway.
POLL_MS = 200


def contact_sheet(
    frame: np.ndarray, background: np.ndarray | None, score: np.ndarray, fgmask: np.ndarray
) -> np.ndarray:
    """One PNG-able uint8 image: frame | background | foreground score | mask, side by side.

    The score and the mask are brought to the frame's size when they are at the processing size
    (``mask_resolution = "processing"``).
    """
    size = (frame.shape[1], frame.shape[0])
    score8 = cv2.resize(np.clip(score * 4 * 255, 0, 255).astype(np.uint8), size, interpolation=cv2.INTER_NEAREST)
    mask = cv2.resize(fgmask, size, interpolation=cv2.INTER_NEAREST)
    bg = background if background is not None else np.zeros_like(frame)
    return np.hstack([frame, bg, score8, mask])


class _Sockets:
    """The worker's PULL (frames) and PUB (masks) sockets, bound, with CURVE when configured."""

    def __init__(self, w: WorkerConfig, log: logging.Logger) -> None:
        ctx: zmq.Context = zmq.Context.instance()
        curve = w.curve_secret_key and w.curve_authorized_keys  # set together (config validation)
        self.auth = security.start_authenticator(ctx, w.curve_authorized_keys or "") if curve else None
        self.pull = ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, w.rcvhwm)
        self.pull.setsockopt(zmq.MAXMSGSIZE, w.max_side * w.max_side + 65536)
        self.pull.setsockopt(zmq.RCVTIMEO, POLL_MS)
        self.pub = ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, 64)
        self.pub.setsockopt(zmq.LINGER, 1000)
        self.pub.copy_threshold = COPY_THRESHOLD
        self.monitors: dict[str, zmq.Socket] = {}
        if self.auth:
            for sock in (self.pull, self.pub):
                security.make_server(sock, w.curve_secret_key or "")
            self.monitors = {
                name: security.handshake_monitor(s) for name, s in (("frames", self.pull), ("masks", self.pub))
            }
        for sock, endpoint in ((self.pull, w.frames_endpoint), (self.pub, w.masks_endpoint)):
            if endpoint.startswith("ipc://"):  # its directory (e.g. /run/kdrsdl) is made if missing
                directory = os.path.dirname(endpoint[len("ipc://") :]) or "."
                try:
                    os.makedirs(directory, exist_ok=True)
                except OSError as exc:
                    raise ConfigError(
                        f"{endpoint}: cannot create its directory {directory}: {exc.strerror} "
                        "(create it with write access for this user, or use a tcp:// endpoint)"
                    ) from None
            sock.bind(endpoint)
        curve = f" (CURVE, clients from {w.curve_authorized_keys})" if self.auth else ""
        log.info("listening on %s, publishing on %s%s", w.frames_endpoint, w.masks_endpoint, curve)

    def refused_peers(self) -> list[tuple[str, str]]:
        """(socket name, event) of every CURVE handshake refused since the last call."""
        return [(name, ev) for name, mon in self.monitors.items() for ev in security.failed_handshakes(mon)]

    def close(self) -> None:
        for sock, mon in zip((self.pull, self.pub), self.monitors.values(), strict=False):  # none without CURVE
            sock.disable_monitor()
            mon.close()
        self.pull.close()
        self.pub.close()
        if self.auth:
            self.auth.stop()


@dataclass
class _Stream:
    """What became of one capture epoch's frames so far (the facts of its ``end_of_stream`` event)."""

    epoch: str | None = None
    masks: int = 0
    dropped: int = 0
    lost: int = 0


class _DropLog:
    """Dropped and lost frames logged with their count, at most every :data:`DROP_LOG_EVERY_S` seconds."""

    def __init__(self, log: logging.Logger) -> None:
        self.log, self.dropped, self.lost, self.total = log, 0, 0, 0
        self.t_last = time.monotonic() - DROP_LOG_EVERY_S

    def add(self, dropped: int, lost: int) -> None:
        self.dropped, self.lost = self.dropped + dropped, self.lost + lost
        self.total += dropped + lost
        if time.monotonic() - self.t_last >= DROP_LOG_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Log what is counted and not yet logged (called at the end of a stream and at stop too)."""
        if self.dropped or self.lost:
            self.log.warning(
                "%d frames dropped as overload (the worker is behind a live source) and %d lost in transit "
                "in the last %.0f s; %d in all",
                self.dropped,
                self.lost,
                time.monotonic() - self.t_last,
                self.total,
            )
        self.dropped = self.lost = 0
        self.t_last = time.monotonic()


class _Worker:
    """The worker's state across the loop: its parts, and what it has published."""

    def __init__(self, cfg: Config, log: logging.Logger, m: WorkerMetrics) -> None:
        self.cfg, self.log, self.camera, self.m = cfg, log, cfg.camera, m
        w = cfg.worker
        self.motion = MotionStage(cfg.motion)
        self.mask_encoding = cfg.worker.mask_encoding
        self.intake = Intake(cfg.camera, w.max_side, w.backlog)
        try:
            self.stage = ModelStage(cfg.model.params())
        except ValueError as exc:  # the knobs were checked when loaded: what is left is the environment's
            raise ConfigError(f"model: {exc}") from None
        self.view: LiveView | None = None
        if cfg.view.port:
            self.view = LiveView(
                cfg.camera, self.motion.ignore, self.motion.named, cfg.view.preview_fps, self.m.viewers
            )
        self.mqtt: MqttPublisher | None = None
        if cfg.mqtt.host is not None:
            self.mqtt = MqttPublisher(cfg.mqtt, cfg.camera, [z.name for z in cfg.motion.zones], self.m, log)
        self.epoch, self.seq, self.rejected, self.event_seq, self.snapshot_seq = new_epoch(), 0, 0, 0, 0
        # whether the start is over (_end_start: at the first frame that finds the kernels loaded
        # or failed, or the first frame on numpy)
        self._started = False
        ev = cfg.events
        self.snapshots = SnapshotTaker(ev.snapshot_quality) if ev.snapshots or ev.snapshot_dir else None
        self.snapshot_dir: SnapshotDir | None = None
        if ev.snapshot_dir:
            try:
                self.snapshot_dir = SnapshotDir(ev.snapshot_dir, cfg.camera, ev.snapshot_keep)
            except OSError as exc:
                raise ConfigError(f"events.snapshot_dir: cannot create {ev.snapshot_dir}: {exc.strerror}") from None
        self.last: tuple[np.ndarray, FrameResult] | None = None  # the last frame and its result
        self.stream = _Stream()
        self.drops = _DropLog(log)
        self.ckpt: Checkpointer | None = None
        if w.state_dir:
            path = checkpoint.path_for(w.state_dir, cfg.camera)
            self.ckpt = Checkpointer(path, w.checkpoint_interval_s, cfg.camera, self.m, log, self.motion.events)
            self.ckpt.restore(self.stage, self.intake.tracker)

    def receive(self, pull: zmq.Socket, wait: bool) -> bool:
        """Take every message waiting on ``pull`` into the intake, counting what happened.

        With ``wait``, the first message is waited for up to the socket's receive timeout
        (:data:`POLL_MS`). The rest are taken while the socket says one waits: a blocking receive
        and that check cost 60 us of CPU less per frame than a poll and a receive that ends on
        ``zmq.Again`` (docs/results.md, "Cameras per core"). Returns whether any message came.
        """
        flags, came = (0 if wait else zmq.NOBLOCK), False
        while (not came or int(pull.get(zmq.EVENTS)) & zmq.POLLIN) and not self.intake.holds_back:
            try:
                parts = pull.recv_multipart(flags, copy=False)
            except zmq.Again:
                break
            flags, came = zmq.NOBLOCK, True
            o = self.intake.offer(parts)
            if o.restarted:
                self.m.restarts_seen.inc()
                self.log.info("capture restarted: new epoch %s", self.intake.tracker.epoch)
            if o.rejected:
                self.m.rejected[o.rejected].inc()
                if o.rejected != "seq":
                    self.rejected += 1
                    log_rejection(self.log, self.rejected, "message", o.error)
                continue
            if self.intake.tracker.epoch != self.stream.epoch:  # a new capture epoch: a new stream
                self.stream = _Stream(self.intake.tracker.epoch)
            self.stream.lost += o.lost
            self.stream.dropped += o.dropped
            self.m.lost.inc(o.lost)
            if o.dropped or o.lost:
                self.drops.add(o.dropped, o.lost)
            if o.end:
                continue
            self.m.received.inc()
            self.m.dropped["overload"].inc(o.dropped)
        self.m.backlog.set(len(self.intake))
        return came

    def _end_start(self, seq: int) -> None:
        """End the start, once: at the first frame that runs the per-pixel steps the worker keeps.

        Those are the compiled kernels once a thread has loaded them, or the numpy reference (by
        configuration, or because the kernels could not load: logged with the reason; the same
        masks, more CPU). The pages the start read from the libraries, the compiler's among them,
        then leave the resident set (:func:`streamer.ops.memory.release_file_pages`)."""
        model = self.stage.model
        params = model.params
        if params.kernel == "numba" and params.decision == "pixel" and not model.compiled:
            from core.streaming import kernels

            if (why := kernels.failure()) is None:
                return  # still loading: numpy meanwhile
            self.log.warning("the per-pixel steps stay on numpy (the same masks, more CPU): %s", why)
        released = release_file_pages() / 2**20
        if model.compiled:
            self.log.info(
                "compiled kernels loaded: the per-pixel steps run compiled from frame %d "
                "(%.0f MiB of the libraries' pages released, the compiler's among them)",
                seq,
                released,
            )
        else:
            self.log.info("started: %.0f MiB of the libraries' pages released at frame %d", released, seq)
        self._started = True

    def process(self, msg: Message, pub: zmq.Socket) -> None:
        """One frame: the model, its facts into metrics, the mask and its events published.

        Raises
        ------
        streamer.config.ConfigError
            If a zone or ignored area does not fit the frame (:meth:`MotionStage.prepare`).
        """
        h = msg.header
        if msg.kind == "end":
            self.end_stream(h, pub)
            return
        # the frame's size in input pixels: the source's when the capture reduced it (source_shape)
        source = h.get("source_shape") or msg.image.shape
        input_shape = (int(source[0]), int(source[1]))
        try:
            prepared = self.motion.prepare(msg.image, input_shape)
        except ZoneError as exc:  # the configuration's polygons do not fit this camera's frames
            raise ConfigError(str(exc)) from None
        report = self.stage.process(prepared, input_shape)
        if report.previous_shape is not None:
            self.m.resets.inc()
            self.log.info("frame shape changed %s -> %s: model reset", report.previous_shape, msg.image.shape)
        if report.exception is not None:
            self.log.error("model failed on frame %d; reset to a cold start", h["seq"], exc_info=report.exception)
            self.m.resets.inc()
            self.m.dropped["error"].inc()
            return
        self.m.solve_duration.observe(report.seconds)
        if not self._started:
            self._end_start(h["seq"])
        self._refit_landed(report.refit)
        res = report.result
        assert res is not None  # a report without an exception carries the result
        motion = self.motion.update(res.fgmask, input_shape, h, res.fgmask_processing, self.stage.model.compiled)
        events = motion.events
        frame = None
        if self.snapshots is not None:  # the frame of each zone's new peak, kept for its event's snapshot
            frame = Frame(msg.image, input_shape, h["epoch"], h["seq"], h["t_capture_ns"])
            self.snapshots.observe(frame, self.motion.events.peaked)
        if report.light is not None:
            self.m.light_changes.inc()
            self.log.info("change of light absorbed: gain %.3f, offset %+.3f", report.light.gain, report.light.offset)
            light = report.light
            events.append(self.motion.events.light_change(h["seq"], h["t_capture_ns"], light.gain, light.offset))
        # from the read: a file's t_capture_ns is its video time (t_read_ns, the wall clock of the read)
        latency = (time.time_ns() - h.get("t_read_ns", h["t_capture_ns"])) / 1e9
        parts = encode(
            "mask",
            self.camera,
            self.epoch,
            self.seq,
            h["t_capture_ns"],
            motion.fgmask,
            self.mask_encoding,
            **mask_fields(
                h,
                input_shape,
                latency,
                res.threshold,
                motion,
                self.stage.facts,
                self.stage.model.params.mask_resolution,
                self.stage.model.processing_shape or (),
                report.light,
            ),
        )
        # the gauges and the view first: whoever has received the mask finds them up to date
        self.m.fg_ratio.set(motion.fg_ratio)
        for zone, fraction in motion.zones.items():
            self.m.zone_fg_ratio[zone].set(fraction)
        if self.view is not None:
            self.view.offer(self.seq, msg.image, motion, latency, input_shape)
        pub.send_multipart(parts, copy=False)
        self.publish_events(events, pub, frame)
        self.seq += 1
        self.m.end_to_end.observe(latency)
        self.m.processed.inc()
        self.m.masks_published.inc()
        if h["epoch"] == self.stream.epoch:
            self.stream.masks += 1
        self.last = (msg.image, res)

    def end_stream(self, h: dict, pub: zmq.Socket) -> None:
        """A capture's end of stream: its open events ended (reason ``end_of_stream``), then the
        ``end_of_stream`` event with what became of its frames. The worker goes on waiting for
        frames (a camera may come back)."""
        self.drops.flush()
        s = self.stream if self.stream.epoch == h["epoch"] else _Stream(h["epoch"])
        fields = {
            "frame_epoch": h["epoch"],
            "reason": h["reason"],
            "frames": h["frames"],
            "sent": h["seq"],
            "masks": s.masks,
            "dropped": s.dropped,
            "lost": s.lost,
        }
        events = self.motion.events.end_all("end_of_stream")
        events.append(self.motion.events.end_of_stream(h["t_capture_ns"], fields))
        self.publish_events(events, pub)
        self.log.info(
            "end of stream (%s) of capture epoch %s: %d frames read, %d sent, %d masks published, "
            "%d dropped as overload, %d lost",
            h["reason"],
            h["epoch"],
            h["frames"],
            h["seq"],
            s.masks,
            s.dropped,
            s.lost,
        )

    def publish_events(self, events: list[Event], pub: zmq.Socket, frame: Frame | None = None) -> None:
        """Publish ``events`` on ``event/<camera>/`` (and MQTT, if configured), counted by zone and
        kind, then their snapshots (``frame``: the frame that raised them, if one did)."""
        headers, seqs = [], []
        for e in events:
            fields = event_fields(e)
            parts = encode_event(self.camera, self.epoch, self.event_seq, e.t_capture_ns, e.event, **fields)
            pub.send_multipart(parts)
            headers.append(parts[1])
            seqs.append(self.event_seq)
            self.event_seq += 1
            self.m.events[e.zone, e.event].inc()
            if self.view is not None:
                self.view.note({"event": e.event, "t_capture_ns": e.t_capture_ns, **fields})
            self.log.debug("event %s in %s: %s", e.event, e.zone, e.fields)
        if self.mqtt is not None and events:
            self.mqtt.events(events, headers)
        if self.snapshots is not None and events:
            for i, snapshot in self.snapshots.take(events, frame):
                self.publish_snapshot(snapshot, seqs[i], pub)

    def publish_snapshot(self, snapshot: Snapshot, event_seq: int, pub: zmq.Socket) -> None:
        """One event's snapshot on ``snapshot/<camera>/`` and MQTT (``[events] snapshots``) and into
        ``[events] snapshot_dir``; a file that cannot be written is counted and logged, nothing stops."""
        self.m.snapshots[snapshot.trigger].inc()
        if self.cfg.events.snapshots:
            fields = snapshot_fields(snapshot, event_seq)
            f, seq = snapshot.frame, self.snapshot_seq
            parts = encode_snapshot(
                self.camera, self.epoch, seq, f.t_capture_ns, snapshot.jpeg, f.input_shape, **fields
            )
            pub.send_multipart(parts)
            self.snapshot_seq += 1
            if self.mqtt is not None:
                self.mqtt.snapshot(snapshot.jpeg)
        if self.snapshot_dir is not None:
            try:
                self.snapshot_dir.write(snapshot)
            except OSError as exc:
                self.m.snapshot_write_errors.inc()
                self.log.warning("snapshot not written to %s: %s", self.snapshot_dir.path, exc)

    def idle(self) -> None:
        """No frame came within POLL_MS: install a refit that finished meanwhile, so that its metrics and
        the next checkpoint show it while the camera is silent."""
        self._refit_landed(self.stage.collect_refit())

    def _refit_landed(self, r: RefitReport | None) -> None:
        """Count a refit the model installed (None: none did)."""
        if r is None:
            return
        self.m.refit_cpu.inc(max(r.cpu_seconds, 0.0))  # a refit that failed spent its CPU too
        if r.reset:
            self.m.resets.inc()
            self.log.warning("solver reset to a cold start: %s", r.error)
            return
        self.m.starts["warm" if r.warm else "cold"].inc()
        self.m.iterations.observe(r.n_iter)
        if r.residual is not None:
            self.m.residual.set(r.residual)
        self.m.rank.set(r.rank)
        self.m.refit_duration.observe(r.seconds)
        if not r.converged:
            self.m.not_converged.inc()

    def shutdown(self, pub: zmq.Socket) -> bool:
        """Count the frames left waiting, abandon a running refit, write the last checkpoint and snapshot.

        Open motion events go into the checkpoint (ended at the next start, reason "restart");
        without a state directory they are ended now, reason "stop".

        Returns
        -------
        bool
            True when the refit's thread has ended (or none ran); False when it is still inside
            an iteration after ``STOP_REFIT_WAIT_S``.
        """
        self.m.dropped["shutdown"].inc(len(self.intake))
        self.drops.flush()
        if self.view is not None:
            self.view.close()
        if not self.ckpt:
            self.publish_events(self.motion.events.end_all("stop"), pub)
        stage = self.stage
        # A refit still running is abandoned (it stops at its next iteration); the checkpoint
        # below holds the last installed solution, the last consistent state.
        if stage.refit_running:
            self.log.info("abandoning the %s window refit in progress", stage.refit_running)
        refit_ended = stage.close(wait=STOP_REFIT_WAIT_S)
        if not refit_ended:
            self.log.warning("a window refit did not stop within %.0f s; exiting without it", STOP_REFIT_WAIT_S)
        if self.ckpt:
            self.ckpt.close(stage, self.intake.tracker)
        if self.mqtt is not None:
            self.mqtt.stop()
        if self.cfg.worker.snapshot and self.last is not None:
            image, res = self.last
            sheet = contact_sheet(image, stage.background_image(), res.score_processing, res.fgmask_processing)
            cv2.imwrite(self.cfg.worker.snapshot, sheet)
        return refit_ended


def run_worker(
    cfg: Config, stop: threading.Event, log: logging.Logger, notify: Callable[[str], None] | None = None
) -> int:
    """Run the worker loop until ``stop`` is set.

    Parameters
    ----------
    cfg : streamer.config.Config
    stop : threading.Event
    log : logging.Logger
    notify : callable, optional
        sd_notify: called with ``"READY=1"`` once both sockets are bound and with
        ``"WATCHDOG=1"`` each time the main loop makes progress.

    Returns
    -------
    int
        Exit status: 0. When a refit was still running at the stop (``STOP_REFIT_WAIT_S``), the
        process ends here with ``os._exit(0)`` once the checkpoint, the sockets and the logs are
        flushed: the interpreter's own exit would unload the libraries under the refit's thread.
    """
    if not hold_freed_heap():  # before any thread of ours allocates (streamer.ops.memory)
        log.info("no glibc mallopt, or it refused a setting: a refit's freed heap is left to the allocator")
    log.info(limit_threads(cfg.worker.blas_threads, cfg.worker.opencv_threads))
    m = WorkerMetrics(cfg.camera, [z.name for z in cfg.motion.zones] or [FRAME], mqtt=cfg.mqtt.host is not None)
    m.serve(cfg.worker.metrics_port, cfg.worker.metrics_address)
    sockets = _Sockets(cfg.worker, log)
    # the pages the imports read and nothing runs again, out of the resident set before the
    # kernels' loading reads the compiler's (streamer.ops.memory; the rest at _Worker._end_start)
    imports_released = release_file_pages() / 2**20
    t0 = time.perf_counter()
    worker = _Worker(cfg, log, m)  # the model's compiled kernels start loading, or compiling on an empty cache
    model = worker.stage.model
    kernel = model.params.kernel
    if kernel == "numba" and not model.compiled:
        from core.streaming import kernels

        how = "compiling in a child process" if kernels.compiling() else "loading from numba's cache"
        kernel += f", {how} (numpy, the same masks, until then)"
    log.info(
        "model ready in %.1f s (per-pixel steps: %s; %.0f MiB of the imports' pages released)",
        time.perf_counter() - t0,
        kernel,
        imports_released,
    )
    view_server = None
    if worker.view is not None:
        view_server = start_http(worker.view.app, cfg.view.address, cfg.view.port, "view")
        log.info("live view on http://%s:%d/", cfg.view.address, cfg.view.port)
    if worker.mqtt is not None:
        worker.mqtt.start()  # connects in the background: a broker that is down does not hold the start
    if notify:
        notify("READY=1")
    try:
        while not stop.is_set():
            for name, event in sockets.refused_peers():
                worker.m.handshakes_failed[name].inc()
                log.warning("%s socket: refused a peer (%s)", name, event)
            if worker.ckpt:
                worker.ckpt.tick(worker.stage, worker.intake.tracker)
            came = worker.receive(sockets.pull, wait=not len(worker.intake))
            msg = worker.intake.next()
            if msg is not None:
                worker.process(msg, sockets.pub)
            elif not came:
                worker.idle()
            worker.m.progress()
            if notify:
                notify("WATCHDOG=1")
    finally:
        refit_ended = worker.shutdown(sockets.pub)
        if view_server is not None:
            view_server.shutdown()
        sockets.close()
        log.info("stopped: %d masks published, %d messages rejected", worker.seq, worker.rejected)
    if not refit_ended:
        logging.shutdown()  # flush every handler and the standard streams: os._exit skips both
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
