"""A mask subscriber: SUB on ``mask/<camera>/``, validated, gaps counted, PNGs optional; or events.

With ``events`` set it subscribes to ``event/<camera>/`` instead and prints each motion event's
header as a JSON line (:mod:`streamer.motion.events`). It logs "connected to <endpoint>" once its
connection to the worker is up.

Any ZeroMQ SUB socket in any language can do the same (docs/design.md, "Wire format").
"""

from __future__ import annotations

import collections
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import cv2
import zmq

from streamer.wire import security
from streamer.wire.protocol import (
    MAX_SIDE,
    Message,
    ProtocolError,
    SequenceTracker,
    decode,
    decode_event,
    kind_of,
    log_rejection,
    topic,
)

if TYPE_CHECKING:
    from streamer.config import Config


def run_subscriber(
    cfg: Config,
    stop: threading.Event,
    log: logging.Logger,
    on_mask: Callable[[Message], None] | None = None,
    out: TextIO = sys.stdout,
    on_event: Callable[[dict], None] | None = None,
) -> dict[str, int]:
    """Receive masks until ``stop`` is set or ``count`` masks arrived.

    Prints one JSON line per mask on ``out`` (``seq``, ``frame_seq``,
    ``fg_ratio``, ``latency_s``, ``solver``, ``light_change``...). With ``output`` set, writes
    ``mask_<frame_epoch>_<frame_seq>.png`` there, and keeps only the newest ``keep`` of the files
    it wrote (1000 by default: at 30 fps a day would otherwise leave 2.6 million files).

    Parameters
    ----------
    cfg : streamer.config.Config
    stop : threading.Event
    log : logging.Logger
    on_mask : callable, optional
        Called with each :class:`streamer.wire.protocol.Message`; printing is skipped when given.
    out : file, optional
    on_event : callable, optional
        When given, the same socket also subscribes to ``event/<camera>/`` (in order with the
        masks: an ``end_of_stream`` event comes after its stream's last mask) and this is called
        with each valid event's header.

    Returns
    -------
    dict
        ``received``, ``gaps`` (masks missed within a worker epoch), ``rejected``.
    """
    s = cfg.subscribe
    if s.events:
        return _run_events(cfg, stop, log, out)
    sock, connected = _socket(s, cfg.camera, log)
    if on_event is not None:
        sock.setsockopt(zmq.SUBSCRIBE, topic("event", cfg.camera))
    if s.output:
        os.makedirs(s.output, exist_ok=True)
    written: collections.deque[str] = collections.deque()
    tracker = SequenceTracker()
    received = gaps = rejected = 0
    first = True
    try:
        while not stop.is_set() and not (s.count and received >= s.count):
            connected.check()
            if not sock.poll(200):
                continue
            try:
                parts = sock.recv_multipart(copy=False)
                if on_event is not None and kind_of(parts) == "event":
                    on_event(decode_event(parts))
                    continue
                msg = decode(parts, "mask")
            except ProtocolError as exc:
                rejected += 1
                log_rejection(log, rejected, "mask message", exc)
                continue
            lost, _ = tracker.update(msg.header["epoch"], msg.header["seq"])
            if not first and lost > 0:
                gaps += lost
            first = False
            received += 1
            if s.output:
                written.append(_write_png(s.output, msg))
                while s.keep and len(written) > s.keep:
                    _remove(written.popleft(), log)
            if on_mask is not None:
                on_mask(msg)
            else:
                print(json.dumps({k: msg.header.get(k) for k in PRINTED}), file=out, flush=True)
    finally:
        connected.close()
        sock.close()
    return {"received": received, "gaps": gaps, "rejected": rejected}


#: The header fields printed per mask.
PRINTED = (
    "camera",
    "epoch",
    "seq",
    "frame_seq",
    "frame_index",
    "fg_ratio",
    "latency_s",
    "solver",
    "light_change",
    "regions",
    "zones",
)


def _run_events(cfg: Config, stop: threading.Event, log: logging.Logger, out: TextIO) -> dict[str, int]:
    """Print every event of ``event/<camera>/`` as a JSON line until stopped or ``count`` arrived."""
    s = cfg.subscribe
    sock, connected = _socket(s, cfg.camera, log, "event")
    tracker = SequenceTracker()
    received = gaps = rejected = 0
    try:
        while not stop.is_set() and not (s.count and received >= s.count):
            connected.check()
            if not sock.poll(200):
                continue
            try:
                header = decode_event(sock.recv_multipart(copy=False))
            except ProtocolError as exc:
                rejected += 1
                log_rejection(log, rejected, "event message", exc)
                continue
            lost, _ = tracker.update(header["epoch"], header["seq"])
            gaps += max(lost, 0) if received else 0
            received += 1
            print(json.dumps(header), file=out, flush=True)
    finally:
        connected.close()
        sock.close()
    return {"received": received, "gaps": gaps, "rejected": rejected}


class _Connected:
    """Logs once, "connected to <endpoint>", when the SUB socket's connection is up (its ZMTP
    handshake done, CURVE's included): the subscriber's readiness, for an operator or a script
    to wait for. The subscription itself travels right after it."""

    def __init__(self, sock: zmq.Socket, endpoint: str, log: logging.Logger) -> None:
        self.sock, self.endpoint, self.log = sock, endpoint, log
        self.mon: zmq.Socket | None = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)

    def check(self) -> None:
        """Log the connection if it came up since the last call (no wait)."""
        if self.mon is None or not self.mon.poll(0):
            return
        self.mon.recv_multipart()
        self.log.info("connected to %s", self.endpoint)
        self.close()

    def close(self) -> None:
        if self.mon is not None:
            self.sock.disable_monitor()
            self.mon.close()
            self.mon = None


def _socket(s, camera, log, kind="mask"):
    """The SUB socket on ``<kind>/<camera>/``, connected (CURVE when configured), and its
    :class:`_Connected` watch, attached before the connect: a handshake that completed before the
    monitor existed would never be reported, and the readiness line never logged."""
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 1000)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_SIDE * MAX_SIDE + 65536)  # bounded before anything is allocated
    sock.setsockopt(zmq.SUBSCRIBE, topic(kind, camera))
    if s.curve_secret_key:
        security.make_client(sock, s.curve_secret_key, s.curve_server_key)
    connected = _Connected(sock, s.masks_endpoint, log)
    sock.connect(s.masks_endpoint)
    return sock, connected


def _write_png(directory, msg) -> str:
    """Write the mask as ``mask_<frame_epoch>_<frame_seq>.png`` in ``directory``; its path."""
    h = msg.header
    name = f"mask_{h.get('frame_epoch', 'x')}_{h.get('frame_seq', h['seq']):06d}.png"
    path = os.path.join(directory, name)
    cv2.imwrite(path, msg.image)
    return path


def _remove(path: str, log: logging.Logger) -> None:
    """Delete an old mask file; one already gone (an operator's cleanup) is not an error."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)
