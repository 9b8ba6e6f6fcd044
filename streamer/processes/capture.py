"""The capture process: source -> grayscale frames -> ZeroMQ PUSH.

A live source (camera, stream, synthetic scene) is sent without blocking: a refused send
(high-water mark reached, worker slow or absent) is a counted drop, so a slow worker never grows
memory or latency here. A file is not live: it plays at its own frame rate, each frame waits for
room at the high-water mark, its timestamps follow the video, and its end is sent to the worker.
A failing source is released and reopened with exponential back-off and jitter.

Frames larger than the model's processing resolution (``model.processing_side``) are sent
already reduced to it, uint8, with the size they were reduced from in the header's
``source_shape``: the worker then neither receives nor reduces the full frame, measures regions
and zones in the source's pixels, and enlarges the mask back to that size unless the masks are
asked at the processing resolution (the contract: :mod:`core.streaming.resolution`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import zmq

from core.streaming.resolution import processing_shape, reduce
from streamer.ops.metrics import CaptureMetrics
from streamer.processes.sources import (
    CorruptFrame,
    EndOfStream,
    OpenCVSource,
    SourceError,
    SyntheticSource,
    open_source,
    resize,
)
from streamer.wire import security
from streamer.wire.protocol import COPY_THRESHOLD, encode, encode_end, new_epoch

if TYPE_CHECKING:
    from streamer.config import Config

#: Milliseconds a file's frame waits for room at the high-water mark before the stop is checked again.
POLL_MS = 200
#: Frames a second assumed for a file that does not give its rate (its timestamps, and its pace).
FILE_FPS_UNKNOWN = 25.0
#: Milliseconds the capture waits at exit for its queued frames and its end of stream to reach the
#: worker (a worker 4 frames behind at 1280 x 720 needs well under a second; a gone worker costs this long).
END_LINGER_MS = 30_000
#: Seconds a live source's end of stream waits for room at the high-water mark.
END_WAIT_LIVE_S = 2.0
BACKOFF_INITIAL_S = 0.5
#: Cap of the reopen delay (seconds): a source that comes back is in use again
#: within about this long plus its open time (~0.3 s for RTSP); a failed attempt
#: on a dead host costs one refused connection, or one open timeout (3 s) on a hung one.
BACKOFF_MAX_S = 2.0


def backoff_delay(attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before reopen attempt ``attempt`` (0-based): exponential, capped, jittered (x0.5-1).

    ``rng`` draws the jitter (default: the ``random`` module's generator).
    """
    jitter = (rng or random).uniform(0.5, 1.0)
    return min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * 2**attempt) * jitter


class _Pacer:
    """Holds a loop to ``fps`` turns per second (0 = unthrottled); a late turn does not bunch the next ones."""

    def __init__(self, fps) -> None:
        self.period = 1.0 / fps if fps else 0.0
        self.next_t = time.monotonic()

    def wait(self, stop) -> None:
        if not self.period:
            return
        self.next_t += self.period
        delay = self.next_t - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        else:
            self.next_t = time.monotonic()


def _send(
    sock: zmq.Socket,
    parts: list,
    wait_s: float | None,
    stop: threading.Event,
    beat: Callable[[], None],
) -> bool:
    """Send one message; whether it went.

    At the high-water mark a message waits for room up to ``wait_s`` seconds (0: a live source's
    frame, refused at once, the caller counts the drop; None: a file's, which waits until it goes
    or ``stop`` is set: back-pressure, the worker takes frames as it processes them), calling
    ``beat`` (the watchdog) meanwhile.
    """
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while True:
        try:
            sock.send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return False
            beat()
            sock.poll(POLL_MS, zmq.POLLOUT)


class _Clock:
    """The frames' capture times: the wall clock for a live source; for a file, its video time.

    A file's frame ``n`` (counted from the capture's start, loops included) is stamped
    ``t0 + n / fps`` with ``t0`` the wall clock at its first frame and ``fps`` the file's own
    rate, whatever the pace it is sent at: event durations are then in the video's seconds.
    """

    def __init__(self, fps: float | None) -> None:
        self.period_ns = 1e9 / fps if fps else 0.0
        self.t0_ns: int | None = None

    def stamp(self, n: int) -> int:
        """Capture time of frame ``n``, ns since the Unix epoch."""
        now = time.time_ns()
        if not self.period_ns:
            return now
        if self.t0_ns is None:
            self.t0_ns = now - round(n * self.period_ns)
        return self.t0_ns + round(n * self.period_ns)


class _Capture:
    """One capture's state across its loop: the socket, the source, the counters, the clock.

    Parameters
    ----------
    cfg : streamer.config.Config
    stop : threading.Event
    log : logging.Logger
    notify : callable, optional
        sd_notify (``WATCHDOG=1`` at each :meth:`beat`).
    """

    def __init__(
        self,
        cfg: Config,
        stop: threading.Event,
        log: logging.Logger,
        notify: Callable[[str], None] | None,
        m: CaptureMetrics,
    ) -> None:
        self.camera, self.c, self.stop, self.log, self.notify, self.m = cfg.camera, cfg.capture, stop, log, notify, m
        self.side = cfg.model.params().processing_side
        c = self.c
        ctx: zmq.Context = zmq.Context.instance()
        self.sock = ctx.socket(zmq.PUSH)
        self.sock.setsockopt(zmq.SNDHWM, c.sndhwm)
        self.sock.setsockopt(zmq.LINGER, 2000)
        self.sock.copy_threshold = COPY_THRESHOLD
        if c.curve_secret_key and c.curve_server_key:  # set together or not at all (config validation)
            security.make_client(self.sock, c.curve_secret_key, c.curve_server_key)
        self.sock.connect(c.frames_endpoint)
        self.epoch, self.seq, self.index = new_epoch(), 0, 0  # frames sent, frames read
        self.corrupt = 0  # frames read that did not decode (skipped)
        self.source: SyntheticSource | OpenCVSource | None = None
        self.attempt = 0  # failed opens in a row
        self.live = True
        self.pace: _Pacer | None = None  # set at the first open, from the source's own rate
        self.clock = _Clock(None)

    def beat(self) -> None:
        """The loop made progress: /healthz's heartbeat and the systemd watchdog."""
        self.m.beat()
        if self.notify:
            self.notify("WATCHDOG=1")

    def open(self) -> bool:
        """Open the source; on failure wait the back-off (counted). Whether it is open."""
        c = self.c
        if self.attempt == 0:
            self.log.info("opening %s", c.source)
        try:
            self.source = open_source(
                c.source, loop=c.loop, width=c.width or None, height=c.height or None, side=self.side
            )
        except SourceError as exc:
            self.m.connected.set(0)
            delay = backoff_delay(self.attempt)
            self.log.warning("%s; retrying in %.1f s", exc, delay)
            self.m.reconnects.inc()
            self.stop.wait(delay)
            self.attempt += 1
            return False
        self.m.connected.set(1)
        if self.attempt:
            self.log.info("source reopened after %d attempt(s)", self.attempt)
        self.attempt = 0
        self.live = self.source.live if c.live is None else c.live
        if self.pace is None:  # the first open says the source's own rate
            self.pace, self.clock = _start_clock(c.fps, self.source, self.live, self.log)
        return True

    def release(self) -> None:
        """Release the source (after a failed read, or at the end)."""
        if self.source is not None:
            self.source.release()
            self.source = None
        self.m.connected.set(0)

    def send(self, frame: np.ndarray, scale: int = 1) -> None:
        """Reduce, stamp and send one frame read from the source (a refused send is a counted drop).

        ``scale``: each side of ``frame`` is the source's divided by it (a JPEG frame decoded
        reduced, :class:`streamer.processes.sources.OpenCVSource`); 1 when the capture resizes.
        """
        frame = resize(frame, self.c.width, self.c.height)
        extra: dict[str, Any] = {}
        shape = (frame.shape[0] * scale, frame.shape[1] * scale)
        if self.side and max(shape) > self.side:
            extra["source_shape"] = list(shape)
            frame = reduce(frame, processing_shape(shape, self.side))
        t_ns = self.clock.stamp(self.index)
        if not self.live:
            extra.update(live=False, t_read_ns=time.time_ns())
        self.m.frames.inc()
        self.m.last_frame.set(time.time())
        parts = encode("frame", self.camera, self.epoch, self.seq, t_ns, frame, frame_index=self.index, **extra)
        self.index += 1
        if _send(self.sock, parts, 0.0 if self.live else None, self.stop, self.beat):
            self.seq += 1
        else:
            self.m.dropped["hwm"].inc()

    def skip_corrupt(self) -> None:
        """Count a frame read from the source that did not decode (a drop of reason "corrupt"),
        keeping the frames' indices and a file's timestamps in step with the source."""
        self.m.frames.inc()
        self.m.dropped["corrupt"].inc()
        self.index += 1
        self.corrupt += 1

    def end(self, reason: str) -> None:
        """Send the end of the stream after its last frame, and let the socket deliver it.

        A file's end waits for room as its frames did, and the socket then waits up to
        :data:`END_LINGER_MS` at close for the worker to take them. A live source's end waits at
        most :data:`END_WAIT_LIVE_S` (a worker that is gone must not hold the capture's exit).
        """
        parts = encode_end(self.camera, self.epoch, self.seq, self.clock.stamp(self.index), reason, self.index)
        if not _send(self.sock, parts, END_WAIT_LIVE_S if self.live else None, self.stop, self.beat):
            self.log.warning("the end of the stream (%s) could not be queued: no worker takes frames", reason)
            return
        if not self.stop.is_set() and not self.live:
            # the queued frames and the end reach a busy worker before the socket goes
            self.sock.setsockopt(zmq.LINGER, END_LINGER_MS)

    def close(self) -> None:
        self.release()
        self.sock.close()
        self.log.info(
            "stopped after %d frames (%d sent, %d refused at the high-water mark)%s",
            self.index,
            self.seq,
            self.index - self.seq - self.corrupt,
            f"; {self.corrupt} corrupt frames skipped" if self.corrupt else "",
        )


def run_capture(
    cfg: Config, stop: threading.Event, log: logging.Logger, notify: Callable[[str], None] | None = None
) -> int:
    """Run the capture loop until ``stop`` is set, the file ends, or max_frames.

    A file plays at its own frame rate (``fps`` unset; ``fps`` 0 as fast as the worker takes its
    frames), every frame, stamped with its video time; at its end, or after ``max_frames``, the
    capture sends the end of its stream (:func:`streamer.wire.protocol.encode_end`). A camera, stream or
    the synthetic scene is live: a frame refused at the high-water mark is a counted drop.

    Parameters
    ----------
    cfg : streamer.config.Config
    stop : threading.Event
    log : logging.Logger
    notify : callable, optional
        sd_notify: ``READY=1`` once the socket is set up, ``WATCHDOG=1`` every loop turn.

    Returns
    -------
    int
        Exit status: 0.
    """
    c = cfg.capture
    # One OpenCV thread: a capture's conversions are small, and on a shared machine OpenCV's pool
    # would spin against the workers (FFmpeg decodes on one thread too, streamer.processes.sources).
    cv2.setNumThreads(1)
    m = CaptureMetrics(cfg.camera)
    m.serve(c.metrics_port, c.metrics_address)
    cap = _Capture(cfg, stop, log, notify, m)
    log.info("epoch %s: %s -> %s", cap.epoch, c.source, c.frames_endpoint)
    if notify:
        notify("READY=1")
    if cap.side:
        log.info("frames with a side over %d sent reduced to the processing resolution", cap.side)
    end = None
    try:
        while not stop.is_set():
            cap.beat()
            if c.max_frames and cap.index >= c.max_frames:
                end = "max_frames"
                break
            if cap.source is None and not cap.open():
                continue
            assert cap.source is not None and cap.pace is not None
            try:
                frame = cap.source.read()
            except EndOfStream as exc:
                log.info("%s", exc)
                end = "end_of_file"
                break
            except CorruptFrame as exc:
                log.warning("%s; skipped", exc)
                cap.skip_corrupt()
                cap.pace.wait(stop)
                continue
            except SourceError as exc:
                log.warning("%s; reopening", exc)
                cap.release()
                continue
            cap.send(frame, cap.source.scale)
            cap.pace.wait(stop)
        if end is not None:
            cap.end(end)
    finally:
        cap.close()
    return 0


def _start_clock(
    fps: float | None, source: SyntheticSource | OpenCVSource, live: bool, log: logging.Logger
) -> tuple[_Pacer, _Clock]:
    """The pace (frames a second sent) and the frames' clock, from ``capture.fps`` and the open source.

    A file played as live (``capture.live``, a camera's stand-in in the benchmarks) keeps its own
    rate unless ``fps`` says otherwise, and the wall clock.
    """
    log.info("open: %s", source.describe())
    if live:
        pace = (source.fps or 0.0) if fps is None else fps
        log.info(
            "live source: %s; a frame the worker cannot take is dropped (counted)",
            f"at most {pace:g} fps" if pace else "at its own pace",
        )
        return _Pacer(pace), _Clock(None)
    own = source.fps
    if own is None:
        own = FILE_FPS_UNKNOWN
        log.warning("the file gives no frame rate: %g fps assumed for its timestamps", own)
    pace = own if fps is None else fps
    log.info(
        "file played at %s, every frame (the capture waits for the worker); timestamps at %g fps",
        f"{pace:g} fps" if pace else "the worker's pace",
        own,
    )
    return _Pacer(pace), _Clock(own)
