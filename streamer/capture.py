"""The capture process: source -> grayscale frames -> ZeroMQ PUSH.

Sends without blocking: a refused send (high-water mark reached, worker slow or
absent) is a counted drop, so a slow worker never grows memory or latency here.
A failing source is released and reopened with exponential back-off and jitter.

Frames larger than the model's processing resolution (``model.processing_side``) are sent
already reduced to it, uint8, with the size they were reduced from in the header's
``source_shape``: the worker then neither receives nor reduces the full frame, measures regions
and zones in the source's pixels, and enlarges the mask back to that size unless the masks are
asked at the processing resolution (docs/design.md, "Wire format").
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cv2
import zmq

from core.streaming.resolution import reduce_to_side
from streamer import metrics, security
from streamer.protocol import COPY_THRESHOLD, encode, new_epoch
from streamer.sources import EndOfStream, SourceError, open_source, resize

if TYPE_CHECKING:
    from streamer.config import Config

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


def _open(c, attempt, stop, log, m_connected, m_reconnects):
    """Open the source; on failure wait the back-off (counted). Returns (source or None, next attempt)."""
    try:
        source = open_source(c.source, loop=c.loop, width=c.width or None, height=c.height or None)
    except SourceError as exc:
        m_connected.set(0)
        delay = backoff_delay(attempt)
        log.warning("%s; retrying in %.1f s", exc, delay)
        m_reconnects.inc()
        stop.wait(delay)
        return None, attempt + 1
    m_connected.set(1)
    if attempt:
        log.info("source reopened after %d attempt(s)", attempt)
    return source, 0


def run_capture(
    cfg: Config, stop: threading.Event, log: logging.Logger, notify: Callable[[str], None] | None = None
) -> int:
    """Run the capture loop until ``stop`` is set, the file ends, or max_frames.

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
    camera, c = cfg.camera, cfg.capture
    # One OpenCV thread: a capture's conversions are small, and on a shared machine OpenCV's pool
    # would spin against the workers (FFmpeg decodes on one thread too, streamer.sources).
    cv2.setNumThreads(1)
    metrics.serve(c.metrics_port, "capture", camera, c.metrics_address)
    m_frames = metrics.capture_frames.labels(camera)
    m_hwm = metrics.capture_dropped.labels(camera, "hwm")
    m_reconnects = metrics.capture_reconnects.labels(camera)
    m_connected = metrics.capture_connected.labels(camera)
    m_last = metrics.capture_last_frame.labels(camera)

    ctx: zmq.Context = zmq.Context.instance()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, c.sndhwm)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.copy_threshold = COPY_THRESHOLD
    if c.curve_secret_key and c.curve_server_key:  # set together or not at all (config validation)
        security.make_client(sock, c.curve_secret_key, c.curve_server_key)
    sock.connect(c.frames_endpoint)
    epoch, seq, index = new_epoch(), 0, 0
    log.info("epoch %s: %s -> %s", epoch, c.source, c.frames_endpoint)
    if notify:
        notify("READY=1")
    pace = _Pacer(c.fps)
    model = cfg.model.params()
    side = model.processing_side
    if side:
        log.info("frames with a side over %d sent reduced to the processing resolution", side)
    source, attempt = None, 0
    try:
        while not stop.is_set():
            metrics.beat()
            if notify:
                notify("WATCHDOG=1")
            if c.max_frames and index >= c.max_frames:
                break
            if source is None:
                source, attempt = _open(c, attempt, stop, log, m_connected, m_reconnects)
                if source is None:
                    continue
            try:
                frame = source.read()
            except EndOfStream as exc:
                log.info("%s", exc)
                break
            except SourceError as exc:
                log.warning("%s; reopening", exc)
                source.release()
                source = None
                m_connected.set(0)
                continue
            frame = resize(frame, c.width, c.height)
            extra: dict[str, Any] = {}
            if side and max(frame.shape) > side:
                extra["source_shape"] = list(frame.shape)
                frame = reduce_to_side(frame, side)
            t_ns = time.time_ns()
            m_frames.inc()
            m_last.set(t_ns / 1e9)
            parts = encode("frame", camera, epoch, seq, t_ns, frame, frame_index=index, **extra)
            index += 1
            try:
                sock.send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
                seq += 1
            except zmq.Again:
                m_hwm.inc()
            pace.wait(stop)
    finally:
        if source is not None:
            source.release()
        m_connected.set(0)
        sock.close()
        log.info("stopped after %d frames (%d sent, %d refused at the high-water mark)", index, seq, index - seq)
    return 0
