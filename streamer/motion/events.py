"""Motion events: a zone's foreground fraction turned into ``start`` and ``end`` (hysteresis).

Per zone (or the whole frame, ``zone = "frame"``, when no zone is named):

- ``start`` when the fraction stays above ``threshold`` for ``min_frames`` frames in a row; it
  is raised at the last of them and names the first (``first_seq``);
- ``end`` after ``quiet_frames`` frames in a row at or below the threshold, with the first and
  last active frame's seq, the duration in seconds between their capture times, the peak
  fraction and the union box (the smallest box holding every foreground pixel of the zone on
  the event's active frames);
- ``light_change`` when the model absorbed a change of light at a frame;
- ``end_of_stream`` when the capture's stream ended (a file's end, or its ``max_frames``): every
  open event is ended first, with reason ``"end_of_stream"``.

An open event never vanishes: the end of its stream ends it; a clean stop without a state
directory ends it with reason ``"stop"``; with one, it is checkpointed and ended at the next start
with reason ``"restart"`` (docs/design.md, "Motion").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

#: The zone name of whole-frame events (no zone configured) and of ``light_change`` events.
FRAME = "frame"

Box = tuple[int, int, int, int]


def union(a: Optional[Box], b: Optional[Box]) -> Optional[Box]:
    """The smallest box ``(x, y, w, h)`` holding both (either may be None)."""
    if a is None or b is None:
        return a or b
    x0, y0 = min(a[0], b[0]), min(a[1], b[1])
    x1, y1 = max(a[0] + a[2], b[0] + b[2]), max(a[1] + a[3], b[1] + b[3])
    return x0, y0, x1 - x0, y1 - y0


@dataclass(frozen=True)
class Event:
    """One event, as the header of its message on ``event/<camera>/`` carries it.

    Attributes
    ----------
    event : {"start", "end", "light_change", "end_of_stream"}
    zone : str
        The zone's name, or ``"frame"``.
    t_capture_ns : int
        Capture time of the frame that raised it, ns since the Unix epoch.
    fields : dict
        The rest of the header: ``frame_epoch``, ``first_seq``, ``fraction`` and ``box`` (start);
        ``first_seq``, ``last_seq``, ``duration_s``, ``peak``, ``box``, ``reason`` (end);
        ``frame_seq``, ``gain``, ``offset`` (light_change); ``frame_epoch``, ``reason``,
        ``frames``, ``masks``, ``dropped``, ``lost`` (end_of_stream).
    """

    event: str
    zone: str
    t_capture_ns: int
    fields: dict = field(default_factory=dict)


@dataclass
class _Run:
    """Frames in a row above the threshold, and the open event they belong to (if started)."""

    frame_epoch: str
    first_seq: int
    first_t_ns: int
    last_seq: int
    last_t_ns: int
    peak: float
    box: Optional[Box]
    active: int = 1  # frames in a row above the threshold
    quiet: int = 0  # frames in a row at or below it, once open
    open: bool = False


class EventDetector:
    """Start and end events for each zone from per-frame foreground fractions.

    Parameters
    ----------
    zones : list of str
        The zones' names; ``["frame"]`` for the whole frame.
    threshold : float
        A frame is active in a zone when its fraction is above this, in [0, 1).
    min_frames : int
        Active frames in a row that start an event (>= 1).
    quiet_frames : int
        Frames in a row at or below the threshold that end it (>= 1).

    Raises
    ------
    ValueError
        If a value is out of range or a zone name repeats.
    """

    def __init__(self, zones: list[str], threshold: float, min_frames: int, quiet_frames: int) -> None:
        if not (0 <= threshold < 1) or min_frames < 1 or quiet_frames < 1:
            raise ValueError("threshold must be in [0, 1), min_frames and quiet_frames >= 1")
        if len(set(zones)) != len(zones) or not zones:
            raise ValueError(f"zone names must be unique and at least one, got {zones}")
        self.zones, self.threshold = list(zones), float(threshold)
        self.min_frames, self.quiet_frames = int(min_frames), int(quiet_frames)
        self._runs: dict[str, _Run] = {}
        self._restored: list[Event] = []
        #: The zones whose run reached a new peak fraction at the last :meth:`update` (a run's
        #: first frame included): ``zone -> (fraction, box)``, for the events' peak snapshots.
        self.peaked: dict[str, tuple[float, Optional[Box]]] = {}

    def update(
        self,
        frame_epoch: str,
        seq: int,
        t_ns: int,
        fractions: Mapping[str, float],
        box: Callable[[str], Optional[Box]],
    ) -> list[Event]:
        """One frame: the events it raises (restored events ended first, then by zone order).

        Parameters
        ----------
        frame_epoch : str
            The capture's epoch of this frame.
        seq : int
            The frame's seq.
        t_ns : int
            Its capture time, ns since the Unix epoch.
        fractions : mapping of str to float
            Each zone's foreground fraction at this frame.
        box : callable
            ``box(zone)``: that zone's foreground box at this frame, or None; called only on
            active frames.
        """
        events, self._restored = self._restored, []
        if self.peaked:
            self.peaked = {}
        for zone in self.zones:
            frac = float(fractions[zone])
            run = self._runs.get(zone)
            if frac > self.threshold:
                b = box(zone)
                if run is None or frac > run.peak:
                    self.peaked[zone] = (frac, b)
                if run is None:
                    run = self._runs[zone] = _Run(frame_epoch, seq, t_ns, seq, t_ns, frac, b)
                else:
                    run.active += 1  # a run that had not started was forgotten at its first quiet frame
                    run.quiet = 0
                    run.last_seq, run.last_t_ns = seq, t_ns
                    run.peak, run.box = max(run.peak, frac), union(run.box, b)
                if not run.open and run.active >= self.min_frames:
                    run.open = True
                    fields = {"frame_epoch": run.frame_epoch, "first_seq": run.first_seq, "fraction": round(frac, 6)}
                    events.append(Event("start", zone, t_ns, {**fields, "box": _list(run.box)}))
            elif run is not None:
                if not run.open:  # a run too short to start an event is forgotten
                    del self._runs[zone]
                    continue
                run.quiet += 1
                if run.quiet >= self.quiet_frames:
                    events.append(self._end(zone, run, "quiet", t_ns))
                    del self._runs[zone]
        return events

    def light_change(self, frame_seq: int, t_ns: int, gain: float, offset: float) -> Event:
        """The event of a change of light the model absorbed at frame ``frame_seq``."""
        fields = {"frame_seq": frame_seq, "gain": round(gain, 6), "offset": round(offset, 6)}
        return Event("light_change", FRAME, t_ns, fields)

    def end_of_stream(self, t_ns: int, fields: dict[str, Any]) -> Event:
        """The whole-frame event of a capture's stream end (``fields``: its facts, the worker's counts)."""
        return Event("end_of_stream", FRAME, t_ns, dict(fields))

    def end_all(self, reason: str) -> list[Event]:
        """End every open event now, with ``reason`` ("stop", "end_of_stream"); forget runs not yet started."""
        events = [self._end(z, r, reason, r.last_t_ns) for z, r in self._runs.items() if r.open]
        self._runs.clear()
        return events

    @property
    def open_zones(self) -> list[str]:
        """The zones with an open event."""
        return [z for z, r in self._runs.items() if r.open]

    # ----------------------------------------------------------------- restarts
    def state(self) -> list[dict]:
        """The open events, JSON-able, for a checkpoint."""
        return [{"zone": z, **asdict(r)} for z, r in self._runs.items() if r.open]

    def restore(self, state: list[dict]) -> int:
        """Take the open events of a checkpoint: each is ended, reason ``"restart"``, at the next frame.

        Returns the number restored. An entry that does not fit (another version's) is skipped.
        """
        n = 0
        for entry in state:
            try:
                zone = str(entry["zone"])
                run = _Run(**{k: v for k, v in entry.items() if k != "zone"})
                run.box = tuple(run.box) if run.box is not None else None  # type: ignore[assignment]
            except (KeyError, TypeError):
                continue
            self._restored.append(self._end(zone, run, "restart", run.last_t_ns))
            n += 1
        return n

    def _end(self, zone: str, run: _Run, reason: str, t_ns: int) -> Event:
        fields = {
            "frame_epoch": run.frame_epoch,
            "first_seq": run.first_seq,
            "last_seq": run.last_seq,
            "duration_s": round((run.last_t_ns - run.first_t_ns) / 1e9, 6),
            "peak": round(run.peak, 6),
            "box": _list(run.box),
            "reason": reason,
        }
        return Event("end", zone, t_ns, fields)


def _list(box: Optional[Box]) -> Optional[list[int]]:
    return None if box is None else [int(v) for v in box]
