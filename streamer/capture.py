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
from streamer.protocol import COPY_THRESHOLD, encode, encode_end, new_epoch
from streamer.sources import EndOfStream, SourceError, open_source, resize

if TYPE_CHECKING:
    from streamer.config import Config

#: Milliseconds a file's frame waits for room at the high-water mark before the stop is checked again.
POLL_MS = 200
#: Frames a second assumed for a file that does not give its rate (its timestamps, and its pace).
FILE_FPS_UNKNOWN = 25.0
#: Milliseconds the capture waits at exit for its queued frames and its end of stream to reach the
#: worker (a worker 4 frames behind at 1280 x 720 needs well under a second; a gone worker costs this long).
END_LINGER_MS = 30_000
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


def _send(sock: zmq.Socket, parts: list, live: bool, stop: threading.Event, beat: Callable[[], None]) -> bool:
    """Send one message; whether it went.

    A live source's message is refused at once when the high-water mark is reached (the caller
    counts the drop); a file's waits for room (back-pressure: the worker takes frames as it
    processes them) until it goes or ``stop`` is set, calling ``beat`` (the watchdog) meanwhile.
    """
    while True:
        try:
            sock.send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            if live or stop.is_set():
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


def run_capture(
    cfg: Config, stop: threading.Event, log: logging.Logger, notify: Callable[[str], None] | None = None
) -> int:
    """Run the capture loop until ``stop`` is set, the file ends, or max_frames.

    A file plays at its own frame rate (``fps`` unset; ``fps`` 0 as fast as the worker takes its
    frames), every frame, stamped with its video time; at its end, or after ``max_frames``, the
    capture sends the end of its stream (:func:`streamer.protocol.encode_end`). A camera, stream or
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

    def beat() -> None:
        metrics.beat()
        if notify:
            notify("WATCHDOG=1")

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
    model = cfg.model.params()
    side = model.processing_side
    if side:
        log.info("frames with a side over %d sent reduced to the processing resolution", side)
    source, attempt, end = None, 0, None
    pace: _Pacer | None = None
    clock = _Clock(None)
    live = True
    try:
        while not stop.is_set():
            beat()
            if c.max_frames and index >= c.max_frames:
                end = "max_frames"
                break
            if source is None:
                if attempt == 0:
                    log.info("opening %s", c.source)
                source, attempt = _open(c, attempt, stop, log, m_connected, m_reconnects)
                if source is None:
                    continue
                live = source.live if c.live is None else c.live
                if pace is None:  # the first open says the source's own rate
                    pace, clock = _start_clock(c.fps, source, live, log)
            try:
                frame = source.read()
            except EndOfStream as exc:
                log.info("%s", exc)
                end = "end_of_file"
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
            t_ns = clock.stamp(index)
            if not live:
                extra.update(live=False, t_read_ns=time.time_ns())
            m_frames.inc()
            m_last.set(time.time())
            parts = encode("frame", camera, epoch, seq, t_ns, frame, frame_index=index, **extra)
            index += 1
            if _send(sock, parts, live, stop, beat):
                seq += 1
            else:
                m_hwm.inc()
            assert pace is not None
            pace.wait(stop)
        if end is not None:
            t_end = clock.stamp(index)
            _send(sock, encode_end(camera, epoch, seq, t_end, end, index), False, stop, beat)
            if not stop.is_set():
                # the queued frames and the end reach a busy worker before the socket goes
                sock.setsockopt(zmq.LINGER, END_LINGER_MS)
    finally:
        if source is not None:
            source.release()
        m_connected.set(0)
        sock.close()
        log.info("stopped after %d frames (%d sent, %d refused at the high-water mark)", index, seq, index - seq)
    return 0


def _start_clock(fps: float | None, source: Any, live: bool, log: logging.Logger) -> tuple[_Pacer, _Clock]:
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
