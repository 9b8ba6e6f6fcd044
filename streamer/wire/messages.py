"""Every message's header as a typed structure: the wire contract, and its JSON Schema.

The five kinds of message (docs/design.md, "Wire format"): a frame and the end of a capture's
stream (capture PUSH -> worker PULL), a mask, an event and an event's snapshot (worker PUB -> any
SUB). Each has three parts, ``[topic, header, payload]``; the header is UTF-8 JSON, and its fields
are declared here, once, as pydantic models: :class:`FrameHeader`, :class:`EndHeader`,
:class:`MaskHeader`, :class:`SnapshotHeader`, and the events :class:`StartEvent`,
:class:`EndEvent`, :class:`LightChangeEvent`, :class:`EndOfStreamEvent` (:data:`EventHeader`
tells them apart by ``event``). The models forbid
fields they do not declare, so that the contract is exact: a header the service sends that does
not validate is a bug of the service or of this file (tests/streamer/test_messages.py validates
the headers of a real capture and a real worker).

:func:`schemas` gives their JSON Schemas (draft 2020-12); ``python -m streamer.wire.messages DIR``
writes them as ``DIR/<kind>.schema.json``. The repository keeps them in ``docs/schema/`` for
subscribers written in other languages, and a test checks that they are the ones these models
generate. :mod:`streamer.wire.protocol` encodes and decodes the parts (sizes checked before anything
is allocated, a reason for every rejection); the limits it checks are the ones declared here.
"""

import json
import pathlib
import sys
from typing import Annotated, Any, Literal, Optional, Protocol, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from streamer.wire.protocol import CAMERA_RE, END_REASONS, MAX_SIDE, SNAPSHOT_TRIGGERS, VERSION

Camera = Annotated[str, Field(pattern=CAMERA_RE.pattern, description="The camera's name.")]
Epoch = Annotated[str, Field(min_length=1, max_length=64, description="Random id of the sender's start.")]
Count = Annotated[int, Field(ge=0)]
Side = Annotated[int, Field(ge=1, le=MAX_SIDE)]
Shape = Annotated[tuple[Side, Side], Field(description="[h, w], pixels.")]
Box = Annotated[
    tuple[Count, Count, Count, Count], Field(description="[x, y, w, h] in input pixels (the frame's own size).")
]
Fraction = Annotated[float, Field(ge=0, le=1)]
EndReason = Literal[END_REASONS]  # type: ignore[valid-type]


class _Header(BaseModel):
    """The fields every message carries first."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[VERSION] = Field(description="The wire format's version.")  # type: ignore[valid-type]
    camera: Camera
    epoch: Epoch
    seq: Count = Field(description="The sender's counter of this kind of message within the epoch.")
    t_capture_ns: int = Field(description="Capture time, ns since the Unix epoch (a file's: its video time).")


class FrameHeader(_Header):
    """A frame, on ``frame/<camera>/`` (capture -> worker); the payload is ``h * w`` bytes of gray."""

    shape: Shape
    dtype: Literal["uint8"]
    encoding: Literal["raw"]
    frame_index: Count = Field(description="The capture's counter of frames read (sent or refused).")
    live: bool = Field(True, description="False for a file's frames: the worker never drops them.")
    t_read_ns: Optional[int] = Field(None, description="A file's frames: the wall clock of the read, ns.")
    source_shape: Optional[Shape] = Field(None, description="Frames the capture reduced: the source's [h, w].")


class EndHeader(_Header):
    """The end of a capture's stream, on ``end/<camera>/`` after its last frame; empty payload.
    ``seq`` is the number of frames sent in the epoch."""

    encoding: Literal["none"]
    reason: EndReason
    frames: Count = Field(description="Frames the capture read in this epoch.")


class Region(BaseModel):
    """A connected component of the mask, in input pixels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    box: Box
    area: Count = Field(description="Pixels.")
    centroid: tuple[float, float] = Field(description="[x, y].")


class Solver(BaseModel):
    """The window refit that produced the mask's background."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: Literal["warm", "cold", "reset", "none"]
    iterations: Count
    residual: Optional[float]
    rank: Count


class Light(BaseModel):
    """A change of light the model absorbed at this frame: ``x -> gain * x + offset``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gain: float
    offset: float


class MaskHeader(_Header):
    """A mask, on ``mask/<camera>/`` (worker -> subscribers); the payload is 0 / 255 bytes (``raw``) or
    a 1-bit PNG (``png``). ``seq`` is the worker's counter of masks."""

    shape: Shape
    dtype: Literal["uint8"]
    encoding: Literal["raw", "png"]
    frame_seq: Count = Field(description="The frame's seq.")
    frame_epoch: Epoch
    frame_index: Count
    input_shape: Shape = Field(description="The frame's size before any reduction: the regions' pixels.")
    latency_s: float = Field(description="From the frame's read to the mask's send, seconds.")
    threshold: Optional[float] = Field(description="The global threshold where one decided; null: the bands did.")
    fg_ratio: Fraction = Field(description="Foreground share of the frame, ignored pixels left out.")
    regions: list[Region] = Field(description="Largest first, at most max_regions.")
    regions_omitted: Count = Field(description="Components of at least min_area beyond the list.")
    zones: dict[str, Fraction] = Field(description="Each named zone's foreground fraction.")
    solver: Solver
    mask_resolution: Literal["input", "processing"]
    processing_shape: Shape = Field(description="The size the model worked at.")
    light_change: Optional[Light]


class _Event(_Header):
    """An event, on ``event/<camera>/`` (the masks' socket); empty payload. ``seq`` counts events."""

    encoding: Literal["none"]
    zone: str = Field(description='A zone\'s name, or "frame".')


class StartEvent(_Event):
    """Motion started in a zone."""

    event: Literal["start"]
    frame_epoch: Epoch
    first_seq: Count = Field(description="The first active frame's seq.")
    fraction: Fraction
    box: Optional[Box]


class EndEvent(_Event):
    """Motion ended in a zone (quiet for long enough, the stream's end, the worker's stop or restart)."""

    event: Literal["end"]
    frame_epoch: Epoch
    first_seq: Count
    last_seq: Count = Field(description="The last active frame's seq.")
    duration_s: float = Field(ge=0, description="Between the two frames' capture times, seconds.")
    peak: Fraction
    box: Optional[Box] = Field(description="The union of the boxes over the event.")
    reason: Literal["quiet", "end_of_stream", "stop", "restart"]


class LightChangeEvent(_Event):
    """The model absorbed a change of light at frame ``frame_seq`` instead of reporting motion."""

    event: Literal["light_change"]
    frame_seq: Count
    gain: float
    offset: float


class EndOfStreamEvent(_Event):
    """A capture's stream ended; published after its last mask and the events it ended."""

    event: Literal["end_of_stream"]
    frame_epoch: Epoch
    reason: EndReason
    frames: Count = Field(description="Read by the capture.")
    sent: Count
    masks: Count = Field(description="Published by the worker.")
    dropped: Count = Field(description="Dropped by the worker as overload.")
    lost: Count = Field(description="Lost in transit.")


class SnapshotHeader(_Header):
    """A picture of an event, on ``snapshot/<camera>/`` (the masks' socket): the payload is a colour
    JPEG of the frame at its input size with the event's box drawn. ``seq`` counts snapshots."""

    shape: Shape = Field(description="The picture's [h, w]: the frame's input size.")
    dtype: Literal["uint8"]
    encoding: Literal["jpeg"]
    trigger: Literal[SNAPSHOT_TRIGGERS] = Field(  # type: ignore[valid-type]
        description="start: the frame that started the event; peak: the frame of its largest fraction, "
        "sent when the event ends."
    )
    event_seq: Count = Field(description="The seq of the event message it belongs to (the start, or the end).")
    zone: str = Field(description='A zone\'s name, or "frame".')
    frame_epoch: Epoch
    frame_seq: Count = Field(description="The pictured frame's seq.")
    fraction: Fraction = Field(description="The zone's foreground fraction at that frame.")
    box: Optional[Box] = Field(description="The box drawn: the event's so far (start), or the frame's (peak).")


class RegionLike(Protocol):
    """What :func:`region_fields` reads (:class:`streamer.motion.regions.Region`)."""

    box: tuple[int, int, int, int]
    area: int
    centroid: tuple[float, float]


#: Any event header, told apart by its ``event`` field.
EventHeader = Annotated[Union[StartEvent, EndEvent, LightChangeEvent, EndOfStreamEvent], Field(discriminator="event")]

#: The header type of each kind of message.
HEADERS: dict[str, Any] = {
    "frame": FrameHeader,
    "end": EndHeader,
    "mask": MaskHeader,
    "event": EventHeader,
    "snapshot": SnapshotHeader,
}
#: Their validators, built once (a TypeAdapter takes milliseconds to build, microseconds to use).
_ADAPTERS = {kind: TypeAdapter(model) for kind, model in HEADERS.items()}


def region_fields(region: "RegionLike") -> dict[str, Any]:
    """One entry of a mask header's ``regions``: ``box``, ``area``, ``centroid`` (:class:`Region`)."""
    return {"box": list(region.box), "area": region.area, "centroid": list(region.centroid)}


def mask_fields(
    frame: dict[str, Any],
    input_shape: tuple[int, int],
    latency_s: float,
    threshold: Optional[float],
    motion: Any,
    solver: Any,
    mask_resolution: str,
    processing_shape: tuple[int, ...],
    light: Any,
) -> dict[str, Any]:
    """A mask header's fields after the envelope's, in the wire's order, from the stages' results.

    The one place that writes them (:class:`MaskHeader` declares them); the envelope's (``v``,
    ``camera``, ``epoch``, ``seq``, ``t_capture_ns``, ``shape``, ``dtype``, ``encoding``) are
    :func:`streamer.wire.protocol.encode`'s.

    Parameters
    ----------
    frame : dict
        The frame's header as received (its ``seq``, ``epoch``, ``frame_index``).
    input_shape : (int, int)
        The frame's size before any reduction, pixels.
    latency_s : float
        From the frame's read to now, seconds.
    threshold : float or None
        The global threshold where one decided.
    motion : streamer.motion.stage.MotionResult
        ``fg_ratio``, ``regions`` (``listed``, ``omitted``) and ``zones``.
    solver : streamer.processes.model_stage.SolverFacts
        ``start``, ``iterations``, ``residual``, ``rank``.
    mask_resolution : str
    processing_shape : tuple of int
        The size the model works at (empty before its first frame).
    light : core.streaming.light.LightChange or None
        ``gain`` and ``offset`` of a change of light absorbed at this frame.

    Returns
    -------
    dict
        JSON-able; a zone's fraction rounded to 1e-6.
    """
    return {
        "frame_seq": frame["seq"],
        "frame_epoch": frame["epoch"],
        "frame_index": frame.get("frame_index"),
        "input_shape": list(input_shape),
        "latency_s": latency_s,
        "threshold": threshold,
        "fg_ratio": motion.fg_ratio,
        "regions": [region_fields(r) for r in motion.regions.listed],
        "regions_omitted": motion.regions.omitted,
        "zones": {k: round(v, 6) for k, v in motion.zones.items()},
        "solver": {
            "start": solver.start,
            "iterations": solver.iterations,
            "residual": solver.residual,
            "rank": solver.rank,
        },
        "mask_resolution": mask_resolution,
        "processing_shape": list(processing_shape),
        "light_change": None if light is None else {"gain": light.gain, "offset": light.offset},
    }


def event_fields(event: Any) -> dict[str, Any]:
    """An event header's fields after the envelope's: ``zone``, then the event's own facts
    (:class:`streamer.motion.events.Event`'s ``fields``, written by the event detector)."""
    return {"zone": event.zone, **event.fields}


def snapshot_fields(snapshot: Any, event_seq: int) -> dict[str, Any]:
    """A snapshot header's fields after the envelope's (:class:`SnapshotHeader`), from a
    :class:`streamer.motion.snapshots.Snapshot` and the seq of its event's message."""
    return {
        "trigger": snapshot.trigger,
        "event_seq": event_seq,
        "zone": snapshot.event.zone,
        "frame_epoch": snapshot.frame.epoch,
        "frame_seq": snapshot.frame.seq,
        "fraction": round(snapshot.fraction, 6),
        "box": None if snapshot.box is None else [int(v) for v in snapshot.box],
    }


def parse(kind: str, header: bytes | str | dict[str, Any]) -> BaseModel:
    """A header as its typed structure, checked strictly against the contract (JSON's types, no
    coercion: ``"7"`` is not a ``seq``), as the JSON Schemas check it.

    Parameters
    ----------
    kind : {"frame", "end", "mask", "event"}
    header : bytes, str or dict
        The header part as received (UTF-8 JSON), or its JSON decoded.

    Returns
    -------
    pydantic.BaseModel
        A :class:`FrameHeader`, :class:`EndHeader`, :class:`MaskHeader`, :class:`SnapshotHeader`
        or one of the events.

    Raises
    ------
    KeyError
        If ``kind`` is none of the five.
    pydantic.ValidationError
        If the header does not follow the contract (a field missing, unknown, of another type or
        out of range); the error lists each.
    """
    text = json.dumps(header) if isinstance(header, dict) else header
    return _ADAPTERS[kind].validate_json(text, strict=True)


def schemas() -> dict[str, dict[str, Any]]:
    """Each kind's JSON Schema (draft 2020-12, pydantic's validation mode), by kind."""
    out = {}
    for kind, model in HEADERS.items():
        schema = TypeAdapter(model).json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema.setdefault("title", f"{kind} header, wire format v{VERSION}")
        out[kind] = schema
    return out


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as the repository keeps it: indented JSON, keys sorted, a final newline."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    """``python -m streamer.wire.messages DIR``: write each kind's schema to ``DIR/<kind>.schema.json``."""
    if len(argv) != 1:
        print("usage: python -m streamer.wire.messages DIR", file=sys.stderr)
        return 64
    out = pathlib.Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for kind, schema in schemas().items():
        (out / f"{kind}.schema.json").write_text(schema_text(schema))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
