"""A Python client of the masks and events that workers (or a broker) publish.

    from streamer.client import Subscriber

    with Subscriber("tcp://127.0.0.1:5560", cameras=["cam1"]) as sub:
        for item in sub:
            if item.kind == "mask":
                print(item.camera, item.frame_seq, item.fg_ratio, item.mask.shape)
            else:
                print(item.camera, item.event, item.zone)

Each item is a :class:`Mask` (the mask as a numpy array, the header's fields as attributes), an
:class:`Event`, or (asked with ``snapshots=True``) a :class:`Snapshot` (an event's JPEG, and its
decoded picture), each typed by the wire contract (:mod:`streamer.wire.messages`). The client
connects a ZeroMQ SUB socket to one endpoint or several (every worker, or one ``kdrsdl broker``),
subscribes to the cameras asked (all by default), checks each message as the worker's own
subscriber does (sizes before allocation, :mod:`streamer.wire.protocol`; then the typed header),
and counts what it could not take (:attr:`Subscriber.stats`). ZeroMQ reconnects by itself when a
worker restarts; the client tells a restart (a new epoch: its counters start again) from a loss
(a gap in ``seq`` within an epoch), per camera and kind, and logs each gap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pydantic
import zmq

from streamer.wire import messages, security
from streamer.wire.protocol import (
    MAX_SIDE,
    ProtocolError,
    SequenceTracker,
    decode,
    decode_event,
    kind_of,
    topic,
    validate_camera,
)

log = logging.getLogger("kdrsdl.client")


@dataclass(frozen=True)
class Mask:
    """A foreground mask and its header.

    Attributes
    ----------
    mask : ndarray, shape (h, w), uint8
        0 background, 255 foreground, at ``header.shape``.
    header : streamer.wire.messages.MaskHeader
        Every field of the header (``camera``, ``seq``, ``frame_seq``, ``fg_ratio``, ``regions``,
        ``zones``, ``latency_s``, ...); each is also an attribute of the :class:`Mask` itself.
    """

    mask: np.ndarray
    header: messages.MaskHeader
    kind: str = field(default="mask", init=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.header, name)


@dataclass(frozen=True)
class Event:
    """A motion event (start, end, light_change, end_of_stream) and its header.

    Attributes
    ----------
    header : StartEvent, EndEvent, LightChangeEvent or EndOfStreamEvent
        The event's typed header (:mod:`streamer.wire.messages`); each field is also an attribute
        of the :class:`Event` itself (``event``, ``zone``, ``duration_s``, ``box``, ...).
    """

    header: Any
    kind: str = field(default="event", init=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.header, name)


@dataclass(frozen=True)
class Snapshot:
    """An event's snapshot: the frame at its start or at its peak, the event's box drawn.

    Attributes
    ----------
    image : ndarray, shape (h, w, 3), uint8
        The picture, BGR (OpenCV's order), at the frame's input size.
    jpeg : bytes
        The picture as sent (to save it as it is).
    header : streamer.wire.messages.SnapshotHeader
        ``trigger`` ("start" or "peak"), ``event_seq``, ``zone``, ``frame_seq``, ``fraction``,
        ``box``, ...; each is also an attribute of the :class:`Snapshot` itself.
    """

    image: np.ndarray
    jpeg: bytes
    header: messages.SnapshotHeader
    kind: str = field(default="snapshot", init=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.header, name)


@dataclass
class Stats:
    """What a :class:`Subscriber` took and what it could not.

    Attributes
    ----------
    masks, events, snapshots : int
        Items yielded.
    gaps : int
        Messages missed: gaps in a camera's ``seq`` within one worker epoch, of each kind.
    restarts : int
        New worker epochs seen after the first (a worker restarted; nothing is lost there).
    rejected : int
        Messages that broke the wire contract (logged, the first ten and then every 100th).
    """

    masks: int = 0
    events: int = 0
    snapshots: int = 0
    gaps: int = 0
    restarts: int = 0
    rejected: int = 0


class Subscriber:
    """Masks, events and snapshots from one or more endpoints, as typed Python objects.

    Parameters
    ----------
    endpoints : str or sequence of str
        The workers' ``masks_endpoint`` (each connected), or a broker's endpoint.
    cameras : sequence of str, optional
        The cameras to receive; None = every camera the endpoints publish.
    masks, events, snapshots : bool
        Which kinds to receive (masks and events by default; snapshots when asked).
    curve_secret_key, curve_server_key : str, optional
        CURVE: this client's ``NAME.key_secret`` file and the server's public ``NAME.key``
        (``kdrsdl keygen``); together or not at all.
    hwm : int
        Messages ZeroMQ queues for this client before it drops them (a slow client loses masks,
        counted as gaps; it never slows the worker).

    Raises
    ------
    ValueError
        If a camera name is not one (1-64 of ``A-Z a-z 0-9 _ . -``), no kind is asked, or only one
        CURVE key is given.
    zmq.ZMQError
        If an endpoint is malformed.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        cameras: Sequence[str] | None = None,
        masks: bool = True,
        events: bool = True,
        snapshots: bool = False,
        curve_secret_key: str | None = None,
        curve_server_key: str | None = None,
        hwm: int = 1000,
    ) -> None:
        if not (masks or events or snapshots):
            raise ValueError("a subscriber needs masks, events or snapshots")
        if (curve_secret_key is None) != (curve_server_key is None):
            raise ValueError("curve_secret_key and curve_server_key go together")
        self.stats = Stats()
        self._trackers: dict[tuple[str, str], SequenceTracker] = {}
        self._sock: zmq.Socket = zmq.Context.instance().socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVHWM, hwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_SIDE * MAX_SIDE + 65536)  # bounded before allocation
        kinds = [k for k, wanted in (("mask", masks), ("event", events), ("snapshot", snapshots)) if wanted]
        for camera in [validate_camera(c) for c in cameras] if cameras is not None else [None]:
            for kind in kinds:  # the topic's trailing slash keeps cam1 from cam10
                self._sock.setsockopt(zmq.SUBSCRIBE, topic(kind, camera) if camera else f"{kind}/".encode())
        if curve_secret_key is not None:
            security.make_client(self._sock, curve_secret_key, curve_server_key or "")
        for endpoint in [endpoints] if isinstance(endpoints, str) else endpoints:
            self._sock.connect(endpoint)

    def recv(self, timeout_s: float | None = None) -> Mask | Event | Snapshot | None:
        """The next mask, event or snapshot; None when none came within ``timeout_s`` seconds (None = wait).

        Messages that break the contract are counted in :attr:`stats` and skipped.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if not self._sock.poll(wait):
                return None
            item = self._take(self._sock.recv_multipart(copy=False))
            if item is not None:
                return item
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def __iter__(self) -> Iterator[Mask | Event | Snapshot]:
        while True:
            item = self.recv()
            if item is not None:
                yield item

    def _take(self, parts: list) -> Mask | Event | Snapshot | None:
        """One message as a typed item; None (counted) when it breaks the contract."""
        kind = kind_of(parts)
        try:
            if kind == "event":
                header: Any = messages.parse("event", decode_event(parts))
                item: Mask | Event | Snapshot = Event(header)
            elif kind == "snapshot":
                msg = decode(parts, "snapshot")
                header = messages.parse("snapshot", msg.header)
                item = Snapshot(msg.image, bytes(parts[2]), header)
            else:
                msg = decode(parts, "mask")
                header = messages.parse("mask", msg.header)
                item = Mask(msg.image, header)
        except (ProtocolError, pydantic.ValidationError) as exc:
            self.stats.rejected += 1
            if self.stats.rejected <= 10 or self.stats.rejected % 100 == 0:
                log.warning("rejected a %s message (%d so far): %s", kind or "malformed", self.stats.rejected, exc)
            return None
        tracker = self._trackers.setdefault((header.camera, item.kind), SequenceTracker())
        first = tracker.epoch is None
        lost, restarted = tracker.update(header.epoch, header.seq)
        if restarted:
            self.stats.restarts += 1
            log.info("camera %s: the worker restarted (epoch %s)", header.camera, header.epoch)
        elif not first and lost > 0:
            self.stats.gaps += lost
            log.warning("camera %s: %d %s message(s) missed before seq %d", header.camera, lost, item.kind, header.seq)
        if item.kind == "mask":
            self.stats.masks += 1
        elif item.kind == "snapshot":
            self.stats.snapshots += 1
        else:
            self.stats.events += 1
        return item

    def close(self) -> None:
        """Close the socket (the iteration ends with an error after this)."""
        self._sock.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
