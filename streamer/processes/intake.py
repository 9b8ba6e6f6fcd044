"""The worker's intake: messages in, validated frames out, with at most ``capacity`` waiting.

Pure logic over the parts of ZeroMQ messages (no sockets, no metrics), so it is tested in-process:
each offered message is decoded and checked (:func:`streamer.wire.protocol.decode`, and the camera),
its sequence number tracked (:class:`streamer.wire.protocol.SequenceTracker`), and a valid frame joins
the backlog. A live source's oldest frame is dropped beyond ``capacity``; a file's (``live``
false in its header) never is: the intake then :attr:`~Intake.holds_back`, the caller stops
receiving, and the sockets' high-water marks make the capture wait. A capture's end of stream
joins the backlog in its place among the frames. :class:`Offered` says what happened, for the
caller to count (docs/design.md, "Wire format").
"""

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from streamer.wire.protocol import Message, ProtocolError, SequenceTracker, decode, decode_end, kind_of


@dataclass(frozen=True)
class Offered:
    """What :meth:`Intake.offer` did with one message.

    Attributes
    ----------
    accepted : bool
        The frame joined the backlog.
    rejected : str or None
        Why it was refused: a :class:`ProtocolError` reason, or "seq" (repeated or old number).
    error : str or None
        The refusal in words.
    lost : int
        Frames of the same sender never received before this one (a gap in ``seq``).
    restarted : bool
        The sender restarted (a new epoch).
    dropped : int
        Frames dropped from the backlog to make room (0 or 1).
    end : bool
        The message was the end of the sender's stream (it joined the backlog, not as a frame).
    """

    accepted: bool
    rejected: Optional[str] = None
    error: Optional[str] = None
    lost: int = 0
    restarted: bool = False
    dropped: int = 0
    end: bool = False


@dataclass
class Intake:
    """Validation, sequence tracking and the backlog of one worker.

    Attributes
    ----------
    camera : str
        Frames for another camera are refused.
    max_side : int
        Largest accepted frame side, pixels (checked before anything is allocated).
    capacity : int
        Frames kept waiting (>= 1); beyond that a live source's oldest is dropped.
    live : bool
        Whether the last frame offered came from a live source (its header's ``live``, true
        when absent).
    """

    camera: str
    max_side: int
    capacity: int
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    backlog: collections.deque = field(default_factory=collections.deque)
    live: bool = True

    @property
    def holds_back(self) -> bool:
        """The backlog is full of a file's frames: take no more messages until one is processed."""
        return not self.live and len(self.backlog) >= self.capacity

    def offer(self, parts: Sequence[Any]) -> Offered:
        """Take one message (its frames, bytes-like: a frame or an end of stream); returns :class:`Offered`."""
        try:
            if kind_of(parts) == "end":
                return self._end(decode_end(parts))
            msg = decode(parts, "frame", max_side=self.max_side)
            if msg.header["camera"] != self.camera:
                raise ProtocolError(
                    "camera", f"frame for camera {msg.header['camera']!r}, this worker is {self.camera!r}"
                )
        except ProtocolError as exc:
            return Offered(False, rejected=exc.reason, error=str(exc))
        lost, restarted = self.tracker.update(msg.header["epoch"], msg.header["seq"])
        if lost < 0:
            return Offered(
                False, rejected="seq", error=f"sequence number {msg.header['seq']} already seen", restarted=restarted
            )
        self.live = msg.header.get("live", True)
        self.backlog.append(msg)
        dropped = 0
        if self.live and self._frames() > self.capacity:
            for i, waiting in enumerate(self.backlog):  # the oldest frame; an end of stream stays
                if waiting.kind == "frame":
                    del self.backlog[i]
                    dropped = 1
                    break
        return Offered(True, lost=lost, restarted=restarted, dropped=dropped)

    def _end(self, header: dict) -> Offered:
        """An end of stream: frames lost just before it counted, then it joins the backlog."""
        if header["camera"] != self.camera:
            raise ProtocolError(
                "camera", f"end of stream for camera {header['camera']!r}, this worker is {self.camera!r}"
            )
        lost, restarted = self.tracker.update(header["epoch"], header["seq"])
        if lost < 0:
            return Offered(False, rejected="seq", error=f"end of stream at seq {header['seq']} already passed")
        self.backlog.append(Message("end", header, np.empty((0, 0), np.uint8)))
        return Offered(True, lost=lost, restarted=restarted, end=True)

    def _frames(self) -> int:
        return sum(m.kind == "frame" for m in self.backlog)

    def next(self) -> Optional[Message]:
        """The oldest waiting frame, or None."""
        return self.backlog.popleft() if self.backlog else None

    def __len__(self) -> int:
        return len(self.backlog)
