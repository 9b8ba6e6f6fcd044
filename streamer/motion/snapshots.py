"""Event snapshots: a JPEG of the frame at an event's start and at its peak, the event's box drawn.

- ``start``: the frame that started the event, with the event's box so far (the union of its
  active frames' boxes, the ``box`` of the start event).
- ``peak``: the frame of the event's largest foreground fraction in its zone, with that frame's
  box. The peak is known only when the event ends, so this snapshot goes with the ``end`` event
  (an event ended by a restart, whose frames are gone, has none).

The taker keeps, for each zone with a run of active frames, a reference to the frame of its
peak so far: the received message's pixels, not a copy, and at most one frame per zone. A frame
with no event in progress costs a dictionary check. A picture is at the frame's input size
(enlarged when the capture reduced the frame, so that the box, in input pixels, lies on what it
boxes), in colour: the box red, a label with the zone, the trigger and the capture time (UTC).

:class:`SnapshotDir` keeps the newest snapshots as files (``[events] snapshot_dir``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import cv2
import numpy as np

from streamer.motion.events import Box, Event

#: The box's colour (BGR) and the label's.
BOX_BGR = (0, 0, 255)
LABEL_BGR = (255, 255, 255)


@dataclass(frozen=True)
class Frame:
    """A frame as the taker sees it.

    Attributes
    ----------
    image : ndarray, shape (h, w), uint8
        The frame as received (before the ignored areas are filled).
    input_shape : (int, int)
        ``(h, w)`` in input pixels (the source's, when the capture reduced the frame).
    epoch : str
        The capture's epoch.
    seq : int
        The frame's seq.
    t_capture_ns : int
        Its capture time, ns since the Unix epoch.
    """

    image: np.ndarray
    input_shape: tuple[int, int]
    epoch: str
    seq: int
    t_capture_ns: int


@dataclass(frozen=True)
class Snapshot:
    """One event's picture (the header of ``snapshot/<camera>/``: :class:`streamer.wire.messages.SnapshotHeader`).

    Attributes
    ----------
    trigger : {"start", "peak"}
    event : streamer.motion.events.Event
        The event it goes with (the start, or the end that made the peak known); its ``zone`` is
        the snapshot's.
    frame : Frame
        The pictured frame: its epoch, seq, capture time and input size (the picture's).
    fraction : float
        The zone's foreground fraction at that frame, in [0, 1].
    box : (int, int, int, int) or None
        ``(x, y, w, h)`` drawn, input pixels.
    jpeg : bytes
        The picture, a colour JPEG.
    """

    trigger: str
    event: Event
    frame: Frame
    fraction: float
    box: Optional[Box]
    jpeg: bytes


def picture(frame: Frame, box: Optional[Box], label: str, quality: int) -> bytes:
    """A colour JPEG of ``frame`` at its input size with ``box`` drawn and ``label`` at the top left.

    Parameters
    ----------
    frame : Frame
    box : (x, y, w, h) or None
        Input pixels.
    label : str
        ASCII text.
    quality : int
        JPEG quality, 1-100.

    Returns
    -------
    bytes

    Raises
    ------
    RuntimeError
        If OpenCV cannot encode it (it can any 8-bit image).
    """
    h, w = frame.input_shape
    image = frame.image
    if image.shape[:2] != (h, w):
        image = cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)
    bgr = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    thickness = max(2, round(max(h, w) / 400))
    if box is not None:
        x, y, bw, bh = box
        cv2.rectangle(bgr, (x, y), (x + max(bw, 1) - 1, y + max(bh, 1) - 1), BOX_BGR, thickness)
    scale = max(0.35, h / 800)
    (tw, th), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    cv2.rectangle(bgr, (0, 0), (tw + 6, th + base + 6), (0, 0, 0), -1)
    cv2.putText(bgr, label, (3, th + 3), cv2.FONT_HERSHEY_SIMPLEX, scale, LABEL_BGR, 1, cv2.LINE_AA)
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError("OpenCV could not encode a snapshot as JPEG")
    return data.tobytes()


def _utc(t_ns: int) -> str:
    """``2026-11-27 18:30:05.123 UTC`` of a time in ns since the Unix epoch."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t_ns // 10**9)) + f".{t_ns // 10**6 % 1000:03d} UTC"


@dataclass(frozen=True)
class _Peak:
    frame: Frame
    fraction: float
    box: Optional[Box]


class SnapshotTaker:
    """The snapshots of one camera's events (see the module's text).

    Parameters
    ----------
    quality : int
        JPEG quality, 1-100.
    """

    def __init__(self, quality: int = 85) -> None:
        self.quality = int(quality)
        self._peaks: dict[str, _Peak] = {}

    def observe(self, frame: Frame, peaked: dict[str, tuple[float, Optional[Box]]]) -> None:
        """Remember ``frame`` for each zone whose run reached a new peak at it
        (:attr:`streamer.motion.events.EventDetector.peaked`: zone -> (fraction, box))."""
        for zone, (fraction, box) in peaked.items():
            self._peaks[zone] = _Peak(frame, fraction, box)

    def take(self, events: Sequence[Event], frame: Frame | None) -> list[tuple[int, Snapshot]]:
        """The snapshots of ``events``, each with the index in ``events`` of the event it goes with.

        Parameters
        ----------
        events : sequence of Event
            The events of one frame (or of the end of a stream, or of a stop).
        frame : Frame or None
            The frame that raised them; None when no frame did (a start needs one).
        """
        out = []
        for i, e in enumerate(events):
            if e.event == "start" and frame is not None:
                box = e.fields.get("box")
                box = None if box is None else (int(box[0]), int(box[1]), int(box[2]), int(box[3]))
                out.append((i, self._snapshot("start", e, frame, float(e.fields.get("fraction", 0.0)), box)))
            elif e.event == "end" and e.fields.get("reason") != "restart":
                peak = self._peaks.pop(e.zone, None)
                if peak is not None:
                    out.append((i, self._snapshot("peak", e, peak.frame, peak.fraction, peak.box)))
        return out

    def _snapshot(self, trigger: str, event: Event, frame: Frame, fraction: float, box: Optional[Box]) -> Snapshot:
        label = f"{event.zone} {trigger} {_utc(frame.t_capture_ns)}"
        return Snapshot(trigger, event, frame, fraction, box, picture(frame, box, label, self.quality))


def snapshot_files(path: str, camera: str) -> list[str]:
    """The names of ``camera``'s snapshot files in the directory ``path``, oldest first (their names
    sort by time; :class:`SnapshotDir`). Only that camera's: ``cam1-`` alone would also match camera
    ``cam1-x``'s."""
    mine = re.compile(rf"^{re.escape(camera)}-\d{{8}}T\d{{6}}\.\d{{6}}Z-.*\.jpg$")
    return sorted(n for n in os.listdir(path) if mine.match(n))


class SnapshotDir:
    """The newest snapshots of a camera as JPEG files in a directory (``[events] snapshot_dir``).

    A file is named ``<camera>-<UTC time of the write>-<zone>-<trigger>.jpg`` (so that the names
    sort by time), written to a temporary name and renamed, so a reader never sees half of one;
    beyond ``keep`` files of the camera, the oldest are removed.

    Parameters
    ----------
    path : str
        The directory; made if missing.
    camera : str
    keep : int
        Files of this camera kept (>= 1).

    Raises
    ------
    OSError
        If the directory cannot be made.
    """

    def __init__(self, path: str, camera: str, keep: int) -> None:
        os.makedirs(path, exist_ok=True)
        self.path, self.camera, self.keep = path, camera, int(keep)

    def write(self, snapshot: Snapshot) -> str:
        """Write one snapshot, then remove the camera's oldest beyond ``keep``; the file's path.

        Raises
        ------
        OSError
            If the file cannot be written (full disk, permissions): the caller counts it.
        """
        now = time.time_ns()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now // 10**9)) + f".{now // 1000 % 10**6:06d}Z"
        name = f"{self.camera}-{stamp}-{snapshot.event.zone}-{snapshot.trigger}.jpg"
        path = os.path.join(self.path, name)
        tmp = os.path.join(self.path, f".{name}.tmp")
        with open(tmp, "wb") as f:
            f.write(snapshot.jpeg)
        os.replace(tmp, path)
        mine = snapshot_files(self.path, self.camera)
        for old in mine[: max(0, len(mine) - self.keep)]:
            try:
                os.remove(os.path.join(self.path, old))
            except FileNotFoundError:
                pass
        return path
