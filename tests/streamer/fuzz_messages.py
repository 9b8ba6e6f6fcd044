"""Hypothesis strategies for hostile multipart messages: random parts, and mutations of a valid message."""

import json

import numpy as np
from hypothesis import strategies as st

from streamer.wire.protocol import ProtocolError, decode, encode

FIELDS = ("v", "camera", "epoch", "seq", "t_capture_ns", "shape", "dtype", "encoding")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def valid(kind, camera, epoch, seq, shape=(6, 8)):
    """A valid message as a list of bytes."""
    img = (np.arange(shape[0] * shape[1]) % 251).astype(np.uint8).reshape(shape)
    return [bytes(p) for p in encode(kind, camera, epoch, seq, 0, img)]


@st.composite
def mutated(draw, kind, camera):
    """A valid ``kind`` message for ``camera`` with one hostile change."""
    h_, w_ = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    parts = valid(kind, camera, "fuzz-epoch", draw(st.integers(0, 10**6)), (h_, w_))
    header = json.loads(parts[1])
    how = draw(
        st.sampled_from(["field", "drop_field", "header_json", "header_bytes", "payload", "topic", "parts", "flip"])
    )
    if how == "field":
        header[draw(st.sampled_from(FIELDS))] = draw(json_values)
        parts[1] = json.dumps(header).encode()
    elif how == "drop_field":
        del header[draw(st.sampled_from(FIELDS))]
        parts[1] = json.dumps(header).encode()
    elif how == "header_json":
        parts[1] = json.dumps(draw(json_values)).encode()
    elif how == "header_bytes":
        parts[1] = draw(st.binary(max_size=64))
    elif how == "payload":
        parts[2] = draw(st.binary(max_size=2 * h_ * w_ + 2))
    elif how == "topic":
        parts[0] = draw(st.sampled_from([f"{kind}/{camera}/".encode(), f"{kind}/".encode(), b""])) + draw(
            st.binary(max_size=12)
        )
    elif how == "parts":
        parts = draw(st.sampled_from([parts[:1], parts[:2], parts + [b""], parts + parts]))
    else:
        i = draw(st.integers(0, len(parts[1]) - 1))
        b = bytearray(parts[1])
        b[i] ^= draw(st.integers(1, 255))
        parts[1] = bytes(b)
    return parts


def hostile(kind, camera):
    """Random parts or a mutated valid message."""
    return st.one_of(st.lists(st.binary(max_size=64), min_size=1, max_size=5), mutated(kind, camera))


def accepted(parts, kind, camera):
    """Whether ``parts`` is a valid message for ``kind``/``camera`` (a fuzzer sends only the invalid ones).

    A mutation can leave a message valid (e.g. a changed ``seq``); sending it would be a real frame
    of another sender epoch, not hostile input, so the tests filter those out with this.
    """
    try:
        return decode(parts, kind).header["camera"] == camera
    except ProtocolError:
        return False
