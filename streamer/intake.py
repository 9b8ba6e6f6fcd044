"""The worker's intake: messages in, validated frames out, with at most ``capacity`` waiting.

Pure logic over the parts of ZeroMQ messages (no sockets, no metrics), so it is tested in-process:
each offered message is decoded and checked (:func:`streamer.protocol.decode`, and the camera),
its sequence number tracked (:class:`streamer.protocol.SequenceTracker`), and a valid frame joins
the backlog, whose oldest frame is dropped beyond ``capacity``. :class:`Offered` says what
happened, for the caller to count (docs/design.md, "Wire format").
"""

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from streamer.protocol import Message, ProtocolError, SequenceTracker, decode


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
    """

    accepted: bool
    rejected: Optional[str] = None
    error: Optional[str] = None
    lost: int = 0
    restarted: bool = False
    dropped: int = 0


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
        Frames kept waiting (>= 1); the oldest is dropped beyond that.
    """

    camera: str
    max_side: int
    capacity: int
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    backlog: collections.deque = field(default_factory=collections.deque)

    def offer(self, parts: Sequence[Any]) -> Offered:
        """Take one message (its frames, bytes-like); returns :class:`Offered`."""
        try:
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
        self.backlog.append(msg)
        dropped = 0
        if len(self.backlog) > self.capacity:
            self.backlog.popleft()
            dropped = 1
        return Offered(True, lost=lost, restarted=restarted, dropped=dropped)

    def next(self) -> Optional[Message]:
        """The oldest waiting frame, or None."""
        return self.backlog.popleft() if self.backlog else None

    def __len__(self) -> int:
        return len(self.backlog)
