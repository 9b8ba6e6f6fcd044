"""The wire format of frames and masks over ZeroMQ (docs/design.md, "Wire format").

A message is three frames: ``[topic, header, payload]``.

- topic: ``frame/<camera>/``, ``mask/<camera>/``, ``event/<camera>/``, ``snapshot/<camera>/`` or
  ``end/<camera>/`` (the trailing slash stops a subscription to ``mask/cam1`` matching ``cam10``).
- header: a UTF-8 JSON object: ``v`` (protocol version), ``camera``, ``epoch``
  (random id of the sender's start), ``seq`` (per-camera counter from that epoch),
  ``t_capture_ns`` (wall clock at capture, ns since the Unix epoch), ``shape``
  ``[h, w]``, ``dtype`` ("uint8"), ``encoding`` ("raw"; masks may be "png"). Masks add ``frame_seq``,
  ``fg_ratio``, ``latency_s``, ``solver`` facts and ``regions``. Events carry ``event`` ("start",
  "end" or "light_change"), ``zone`` and the event's facts (:mod:`streamer.motion.events`), and
  ``encoding`` "none". A snapshot (a picture of an event, :mod:`streamer.motion.snapshots`) has
  ``encoding`` "jpeg", ``shape`` the picture's ``[h, w]`` and the event's facts. A frame may say
  ``live`` (false for a file: the receiver must not drop it) and ``t_read_ns`` (wall clock of
  the read, when ``t_capture_ns`` is the video's own time).
  The end of a stream (capture -> worker, on the frames socket) carries ``reason``
  (:data:`END_REASONS`), ``frames`` (frames the capture read in its epoch) and ``seq`` = the
  number of frames it sent, so that frames lost just before it are counted; ``encoding`` "none".
- payload: the C-contiguous pixels (empty for an event); for a mask with ``encoding`` "png", a
  1-bit (bilevel) PNG of the mask, which decodes to 0 / 255; for a snapshot, a colour JPEG.
"""

import logging
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import orjson

VERSION = 1
#: Largest accepted frame side in pixels and header size in bytes: checked before
#: anything is allocated.
MAX_SIDE = 8192
MAX_HEADER_BYTES = 16384
CAMERA_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DTYPES = {"uint8": np.uint8}
KINDS = ("frame", "mask", "event", "snapshot", "end")
#: What an event message announces (``event`` in its header): a zone's motion starts or ends, the
#: model absorbed a change of light, or the capture's stream ended (every open event ended first).
EVENT_KINDS = ("start", "end", "light_change", "end_of_stream")
#: Why a capture's stream ended (``reason`` of an ``end/<camera>/`` message): its file ended, or
#: it sent the ``max_frames`` it was asked for.
END_REASONS = ("end_of_file", "max_frames")
#: Payload encodings of frames and of masks. A mask as a 1-bit PNG: at 1280 x 720, 2 KB instead of
#: 900 KB, encoded in 0.5 ms and decoded in 0.5 ms (OpenCV, one thread; docs/results.md,
#: "Cameras per core"), for subscribers on another host.
ENCODINGS = {"frame": ("raw",), "mask": ("raw", "png"), "snapshot": ("jpeg",)}
#: Why a snapshot was taken (``trigger`` in its header): an event's start, or its peak (the frame
#: of its largest fraction, sent when the event ends and the peak is known).
SNAPSHOT_TRIGGERS = ("start", "peak")
PNG_PARAMS = [cv2.IMWRITE_PNG_BILEVEL, 1, cv2.IMWRITE_PNG_COMPRESSION, 1]
#: The first bytes of a PNG: its signature and the IHDR chunk's length and type.
PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
#: Payloads smaller than this many bytes are copied into ZeroMQ's message when sent (the senders'
#: sockets' ``copy_threshold``; pyzmq's default is 64 KiB). A zero-copy send wakes pyzmq's
#: garbage-collector thread when ZeroMQ frees the message, which costs more CPU than copying a
#: payload this small; larger ones cost more to copy (``tests/bench/bench_send.py``: at 30 messages
#: a second, a 320 x 240 mask copied takes 0.4% of a core less, a 640 x 480 one 0.6% more).
COPY_THRESHOLD = 128 * 1024
#: A receiver logs its first ``REJECT_LOG_FIRST`` rejected messages, then every
#: ``REJECT_LOG_EVERY``-th (all are counted): :func:`log_rejection`.
REJECT_LOG_FIRST = 10
REJECT_LOG_EVERY = 100
#: Every ``reason`` a :class:`ProtocolError` gives (the label of the receivers' rejection counters).
REASONS = ("parts", "topic", "header", "version", "field", "camera", "shape", "dtype", "encoding", "size")


def log_rejection(log: logging.Logger, count: int, what: str, error: object) -> None:
    """Log rejection number ``count`` (1-based) of a ``what`` ("message", "mask message"...), or not.

    The first :data:`REJECT_LOG_FIRST` are logged, then every :data:`REJECT_LOG_EVERY`-th, so that
    a flood of bad messages cannot flood the log (the caller counts every one).
    """
    if count <= REJECT_LOG_FIRST or count % REJECT_LOG_EVERY == 0:
        log.warning("rejected %s #%d: %s", what, count, error)


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``reason`` is a short label for metrics."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"ProtocolError reason {reason!r} is not one of {REASONS}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass
class Message:
    """A decoded message.

    Attributes
    ----------
    kind : str
        "frame", "mask", "snapshot", or "end" (a capture's end of stream, in a worker's backlog).
    header : dict
        The JSON header, validated.
    image : ndarray, shape (h, w) or (h, w, 3), uint8
        Pixels (a frame, or a 0/255 mask; a snapshot's BGR picture, (h, w, 3)); empty, shape
        (0, 0), for an end of stream.
    """

    kind: str
    header: dict
    image: np.ndarray


def new_epoch() -> str:
    """A random id (16 hex characters) for a sender process's start."""
    return secrets.token_hex(8)


def topic(kind: str, camera: str) -> bytes:
    """Topic bytes ``b"<kind>/<camera>/"``."""
    return f"{kind}/{camera}/".encode()


def validate_camera(camera: object) -> str:
    """Return ``camera`` if it is a valid name (1-64 of ``A-Za-z0-9_.-``), else raise ValueError."""
    if not isinstance(camera, str) or not CAMERA_RE.match(camera):
        raise ValueError(f"camera name must be 1-64 characters of A-Z a-z 0-9 _ . -, got {camera!r}")
    return camera


def _common(camera: str, epoch: str, seq: int, t_capture_ns: int) -> dict[str, Any]:
    """The header fields every kind of message carries first."""
    return {"v": VERSION, "camera": camera, "epoch": epoch, "seq": int(seq), "t_capture_ns": int(t_capture_ns)}


def encode(
    kind: str,
    camera: str,
    epoch: str,
    seq: int,
    t_capture_ns: int,
    image: np.ndarray,
    encoding: str = "raw",
    **extra: Any,
) -> list[bytes | memoryview]:
    """Build the three parts of a message.

    Parameters
    ----------
    kind : {"frame", "mask"}
    camera : str
    epoch : str
    seq : int
        Sequence number (>= 0) within the epoch.
    t_capture_ns : int
        Capture time, ns since the Unix epoch (``time.time_ns()``).
    image : ndarray, shape (h, w), uint8
    encoding : {"raw", "png"}
        The payload: the pixels as they are, or (masks only, 0 / 255) a 1-bit PNG.
    **extra
        More header fields (JSON-serialisable).

    Returns
    -------
    list of bytes-like
        ``[topic, header, payload]``; a raw payload is a memoryview of ``image``
        (no copy; send with ``copy=False``).

    Raises
    ------
    ValueError
        If ``encoding`` is not one of ``ENCODINGS[kind]``.
    """
    if encoding not in ENCODINGS.get(kind, ()):
        raise ValueError(f"encoding {encoding!r} is not one of {ENCODINGS.get(kind, ())} for a {kind}")
    image = np.ascontiguousarray(image)
    header = {
        **_common(camera, epoch, seq, t_capture_ns),
        "shape": list(image.shape),
        "dtype": str(image.dtype),
        "encoding": encoding,
        **extra,
    }
    if encoding == "png":
        payload: bytes | memoryview = cv2.imencode(".png", image, PNG_PARAMS)[1].tobytes()
    else:
        payload = image.data.cast("B")
    return [topic(kind, camera), _dumps(header), payload]


def encode_event(camera: str, epoch: str, seq: int, t_capture_ns: int, event: str, **fields: Any) -> list[bytes]:
    """Build the three parts of an event message on ``event/<camera>/``.

    Parameters
    ----------
    camera, epoch : str
    seq : int
        The event counter (>= 0) within the worker's epoch (events have their own ``seq``).
    t_capture_ns : int
        Capture time of the frame that raised the event, ns since the Unix epoch.
    event : {"start", "end", "light_change"}
    **fields
        The event's facts (``zone``, ``first_seq``, ... ; :class:`streamer.motion.events.Event`).

    Returns
    -------
    list of bytes
        ``[topic, header, b""]``: the header has ``encoding`` "none" and no ``shape``.
    """
    header = {
        **_common(camera, epoch, seq, t_capture_ns),
        "encoding": "none",
        "event": event,
        **fields,
    }
    return [topic("event", camera), _dumps(header), b""]


def encode_snapshot(
    camera: str, epoch: str, seq: int, t_capture_ns: int, jpeg: bytes, shape: Sequence[int], **fields: Any
) -> list[bytes]:
    """Build the three parts of a snapshot message on ``snapshot/<camera>/``.

    Parameters
    ----------
    camera, epoch : str
    seq : int
        The snapshot counter (>= 0) within the worker's epoch.
    t_capture_ns : int
        Capture time of the pictured frame, ns since the Unix epoch.
    jpeg : bytes
        The picture: a colour JPEG of ``shape``.
    shape : (int, int)
        The picture's ``[h, w]``, pixels.
    **fields
        The snapshot's facts (``trigger``, ``event_seq``, ``zone``, ...;
        :func:`streamer.wire.messages.snapshot_fields`).

    Returns
    -------
    list of bytes
        ``[b"snapshot/<camera>/", header, jpeg]``.
    """
    header = {
        **_common(camera, epoch, seq, t_capture_ns),
        "shape": [int(shape[0]), int(shape[1])],
        "dtype": "uint8",
        "encoding": "jpeg",
        **fields,
    }
    return [topic("snapshot", camera), _dumps(header), jpeg]


def encode_end(camera: str, epoch: str, seq: int, t_capture_ns: int, reason: str, frames: int) -> list[bytes]:
    """Build the three parts of the end of a capture's stream, sent on the frames socket after its last frame.

    Parameters
    ----------
    camera, epoch : str
        The capture's camera and epoch (those of its frames).
    seq : int
        The number of frames the capture sent in this epoch (the ``seq`` a next frame would have),
        so that the receiver counts frames lost just before the end.
    t_capture_ns : int
        Capture time of the stream's end, ns since the Unix epoch (the last frame's time plus its interval).
    reason : {"end_of_file", "max_frames"}
    frames : int
        Frames the capture read in this epoch (sent, refused at the high-water mark, and skipped
        as corrupt: ``capture_frames_dropped_total``'s reasons).

    Returns
    -------
    list of bytes
        ``[b"end/<camera>/", header, b""]``.

    Raises
    ------
    ValueError
        If ``reason`` is not one of :data:`END_REASONS`.
    """
    if reason not in END_REASONS:
        raise ValueError(f"end reason {reason!r} is not one of {END_REASONS}")
    header = {**_common(camera, epoch, seq, t_capture_ns), "encoding": "none", "reason": reason, "frames": int(frames)}
    return [topic("end", camera), _dumps(header), b""]


def _dumps(header: dict[str, Any]) -> bytes:
    """A header as compact UTF-8 JSON by orjson (``tests/bench/bench_headers.py`` times it against the
    standard library's ``json``): numpy's scalars written as numbers, NaN as null."""
    return orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)


def _loads(data: bytes | memoryview) -> Any:
    """A header's JSON read by orjson (strict: UTF-8, no NaN; an integer past 64 bits reads as a float).

    Raises
    ------
    orjson.JSONDecodeError
        A ``ValueError``, if ``data`` is not UTF-8 JSON.
    """
    return orjson.loads(data)


def _view(part: Any) -> bytes | memoryview:
    """A part's bytes without a copy: a ``zmq.Frame``'s buffer (received with ``copy=False``), or the part."""
    if hasattr(part, "buffer"):
        return part.buffer
    return part if isinstance(part, (bytes, memoryview)) else bytes(part)


def kind_of(parts: Sequence[Any]) -> str | None:
    """The kind a message's topic names ("frame" for ``frame/cam1/``), or None if none of :data:`KINDS`."""
    if not parts:
        return None
    head = bytes(_view(parts[0])[:8]).split(b"/", 1)[0].decode("ascii", "replace")
    return head if head in KINDS else None


def _envelope(parts: Sequence[Any], kind: str) -> tuple[dict, Any]:
    """The checks every kind shares: parts, topic, header JSON, version, common fields, camera.

    Returns the header and the payload (bytes-like); raises :class:`ProtocolError`.
    """
    if len(parts) != 3:
        raise ProtocolError("parts", f"expected 3 parts, got {len(parts)}")
    t, h, payload = (_view(p) for p in parts)
    t = bytes(t)
    if not (t.startswith(kind.encode() + b"/") and t.endswith(b"/") and len(t) <= 128):
        raise ProtocolError("topic", f"topic {t[:64]!r} is not {kind}/<camera>/")
    if len(h) > MAX_HEADER_BYTES:
        raise ProtocolError("header", f"header of {len(h)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = _loads(h)
    except ValueError as exc:  # not UTF-8, not JSON (NaN and Infinity are not): orjson.JSONDecodeError
        raise ProtocolError("header", f"header is not UTF-8 JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header", "header is not a JSON object")
    if header.get("v") != VERSION:
        raise ProtocolError("version", f"protocol version {header.get('v')!r} is not {VERSION}")
    fields: tuple[tuple[str, type], ...] = (("camera", str), ("epoch", str), ("seq", int), ("t_capture_ns", int))
    if kind == "event":
        fields += (("event", str), ("encoding", str))
    elif kind == "end":
        fields += (("reason", str), ("frames", int), ("encoding", str))
    else:
        fields += (("shape", list), ("dtype", str), ("encoding", str))
    for name, types in fields:
        if not isinstance(header.get(name), types) or isinstance(header.get(name), bool):
            raise ProtocolError("field", f"header field {name!r} is missing or not a {types.__name__}")
    if header["seq"] < 0:
        raise ProtocolError("field", "seq must be >= 0")
    if t.decode("utf-8", "replace") != f"{kind}/{header['camera']}/":
        raise ProtocolError("camera", f"topic {t!r} does not match camera {header['camera']!r}")
    return header, payload


def decode_event(parts: Sequence[Any]) -> dict:
    """Validate a received event message; its header.

    Raises
    ------
    ProtocolError
        With the reasons of :func:`decode`, ``field`` when ``event`` is not one of
        :data:`EVENT_KINDS`, ``encoding`` when it is not "none", ``size`` when the payload is not
        empty.
    """
    header, payload = _envelope(parts, "event")
    if header["event"] not in EVENT_KINDS:
        raise ProtocolError("field", f"event {header['event']!r} is not one of {list(EVENT_KINDS)}")
    if header["encoding"] != "none":
        raise ProtocolError("encoding", f"encoding {header['encoding']!r} of an event is not 'none'")
    if len(payload):
        raise ProtocolError("size", f"event payload of {len(payload)} bytes, expected none")
    return header


def decode_end(parts: Sequence[Any]) -> dict:
    """Validate a received end-of-stream message (:func:`encode_end`); its header.

    Raises
    ------
    ProtocolError
        With the reasons of :func:`decode`, ``field`` when ``reason`` is not one of
        :data:`END_REASONS` or ``frames`` is negative, ``encoding`` when it is not "none", ``size``
        when the payload is not empty.
    """
    header, payload = _envelope(parts, "end")
    if header["reason"] not in END_REASONS:
        raise ProtocolError("field", f"end reason {header['reason']!r} is not one of {list(END_REASONS)}")
    if header["frames"] < 0:
        raise ProtocolError("field", "frames must be >= 0")
    if header["encoding"] != "none":
        raise ProtocolError("encoding", f"encoding {header['encoding']!r} of an end of stream is not 'none'")
    if len(payload):
        raise ProtocolError("size", f"end-of-stream payload of {len(payload)} bytes, expected none")
    return header


def _is_shape(shape: Any, max_side: int) -> bool:
    """``shape`` is a list ``[h, w]`` of ints in 1..max_side."""
    return (
        isinstance(shape, list)
        and len(shape) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= max_side for s in shape)
    )


def decode(parts: Sequence[Any], kind: str, max_side: int = MAX_SIDE) -> Message:
    """Validate and decode a received multipart message.

    Parameters
    ----------
    parts : list of bytes or zmq.Frame
        The received parts.
    kind : {"frame", "mask", "snapshot"}
        What this socket expects.
    max_side : int
        Largest accepted height or width, pixels.

    Returns
    -------
    Message

    Raises
    ------
    ProtocolError
        With ``reason`` one of: ``parts`` (not 3 parts), ``topic``, ``header``
        (too big, not UTF-8 JSON object), ``version``, ``field`` (missing or
        ill-typed field), ``camera`` (topic and header disagree), ``shape``
        (not 2 positive sides within ``max_side``; or a ``source_shape``, the size a frame was
        reduced from, that is not such a pair at least as large as ``shape``), ``dtype``,
        ``encoding`` (not one of ``ENCODINGS[kind]``, or a PNG that does not decode), ``size``
        (a raw payload's length is not h * w * itemsize; a PNG or JPEG whose own size is not
        ``shape``, checked in its header before it is decoded, or longer than the raw pixels).

    A snapshot's image is the JPEG decoded in colour: shape (h, w, 3), BGR.
    """
    header, payload = _envelope(parts, kind)
    shape = header["shape"]
    if not _is_shape(shape, max_side):
        raise ProtocolError("shape", f"shape {shape!r} is not [h, w] with sides in 1..{max_side}")
    source = header.get("source_shape")
    if source is not None and not (_is_shape(source, max_side) and source[0] >= shape[0] and source[1] >= shape[1]):
        raise ProtocolError("shape", f"source_shape {source!r} is not [h, w] within 1..{max_side} and >= {shape}")
    for name, types in (("live", bool), ("t_read_ns", int)):
        if name in header and (type(header[name]) is not types or (types is int and header[name] < 0)):
            raise ProtocolError("field", f"header field {name!r} is not a {types.__name__}")
    if header["dtype"] not in DTYPES:
        raise ProtocolError("dtype", f"dtype {header['dtype']!r} is not one of {sorted(DTYPES)}")
    if header["encoding"] not in ENCODINGS[kind]:
        raise ProtocolError("encoding", f"encoding {header['encoding']!r} is not one of {ENCODINGS[kind]}")
    dtype = DTYPES[header["dtype"]]
    expected = shape[0] * shape[1] * np.dtype(dtype).itemsize
    if header["encoding"] == "png":
        return Message(kind=kind, header=header, image=_decode_png(payload, shape, expected))
    if header["encoding"] == "jpeg":
        return Message(kind=kind, header=header, image=_decode_jpeg(payload, shape, 3 * expected))
    if len(payload) != expected:
        raise ProtocolError("size", f"payload of {len(payload)} bytes, shape {shape} needs {expected}")
    image = np.frombuffer(payload, dtype=dtype).reshape(shape)
    return Message(kind=kind, header=header, image=image)


def _decode_png(payload: Any, shape: list[int], raw_bytes: int) -> np.ndarray:
    """A mask's PNG payload decoded to (h, w) uint8, its size checked against ``shape`` first."""
    data = bytes(payload)
    if len(data) > raw_bytes + 1024:
        raise ProtocolError("size", f"PNG of {len(data)} bytes, more than the {raw_bytes} of the raw mask")
    if len(data) < 24 or not data.startswith(PNG_HEAD):
        raise ProtocolError("encoding", "payload is not a PNG")
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if [h, w] != shape:
        raise ProtocolError("size", f"PNG of {w} x {h} pixels, header shape {shape}")
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    if image is None or list(image.shape) != shape:
        raise ProtocolError("encoding", "PNG payload does not decode")
    return image


#: JPEG markers that start a frame (SOF0-SOF15 less DHT, JPG and DAC): they hold its size.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """A JPEG's ``(h, w)`` read from its frame header (ITU T.81, B.2), without decoding it; None
    if ``data`` is not a JPEG or has no frame header before its scan."""
    if not data.startswith(b"\xff\xd8"):
        return None
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # a fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # the end, or the scan, before any frame header
            return None
        if marker in _SOF:
            if i + 9 > len(data):
                return None
            return int.from_bytes(data[i + 5 : i + 7], "big"), int.from_bytes(data[i + 7 : i + 9], "big")
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def _decode_jpeg(payload: Any, shape: list[int], raw_bytes: int) -> np.ndarray:
    """A snapshot's JPEG decoded to (h, w, 3) uint8 BGR, its size checked against ``shape`` first."""
    data = bytes(payload)
    if len(data) > raw_bytes + 65536:
        raise ProtocolError("size", f"JPEG of {len(data)} bytes, more than the {raw_bytes} of its raw pixels")
    size = jpeg_size(data)
    if size is None:
        raise ProtocolError("encoding", "payload is not a JPEG")
    if list(size) != shape:
        raise ProtocolError("size", f"JPEG of {size[1]} x {size[0]} pixels, header shape {shape}")
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None or list(image.shape[:2]) != shape:
        raise ProtocolError("encoding", "JPEG payload does not decode")
    return image


class SequenceTracker:
    """Counts gaps in ``seq`` within a sender epoch; a new epoch is a restart, not a loss."""

    def __init__(self) -> None:
        self.epoch: str | None = None
        self.last: int | None = None

    def update(self, epoch: str, seq: int) -> tuple[int, bool]:
        """Return ``(lost, restarted)`` for a received ``(epoch, seq)``; ``lost`` < 0 means a repeated or old seq."""
        if epoch != self.epoch:
            restarted = self.epoch is not None
            self.epoch, self.last = epoch, seq
            return seq if not restarted else 0, restarted
        lost = seq - (self.last or 0) - 1
        if lost >= 0:
            self.last = seq
        return lost, False
