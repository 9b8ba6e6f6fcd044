"""Wire format: round trip and every rejection reason."""

import json

import numpy as np
import pytest

from streamer.wire.protocol import ProtocolError, decode, encode


def _frame(shape=(4, 6)):
    return np.arange(np.prod(shape), dtype=np.uint8).reshape(shape)


def test_round_trip_keeps_pixels_and_header():
    img = _frame()
    parts = encode("frame", "cam1", "e1", 7, 123, img, frame_index=9)
    assert bytes(parts[0]) == b"frame/cam1/"
    msg = decode([bytes(p) for p in parts], "frame")
    assert np.array_equal(msg.image, img)
    h = msg.header
    assert (
        h["v"],
        h["camera"],
        h["epoch"],
        h["seq"],
        h["t_capture_ns"],
        h["shape"],
        h["dtype"],
        h["encoding"],
        h["frame_index"],
    ) == (1, "cam1", "e1", 7, 123, [4, 6], "uint8", "raw", 9)


def test_numpy_scalars_in_a_header_are_written_as_json_numbers():
    parts = encode("mask", "cam1", "e1", 0, 0, _frame(), fg_ratio=np.float32(0.25), area=np.int64(7), nan=float("nan"))
    h = json.loads(parts[1])
    assert (h["fg_ratio"], h["area"], h["nan"]) == (0.25, 7, None)  # NaN is not JSON: null
    assert decode([bytes(p) for p in parts], "mask").header["area"] == 7


def _mutated(kind="frame", image=None, png=False, **header_changes):
    """A valid message (a PNG payload with ``png``) whose header then gets ``header_changes``."""
    image = _frame() if image is None else image
    parts = [bytes(p) for p in encode(kind, "cam1", "e1", 0, 0, image, "png" if png else "raw")]
    h = json.loads(parts[1])
    h.update(header_changes)
    parts[1] = json.dumps(h).encode()
    return parts


_NAN_SEQ = (
    b'{"v":1,"camera":"cam1","epoch":"e1","seq":NaN,"t_capture_ns":0,"shape":[4,6],"dtype":"uint8","encoding":"raw"}'
)


@pytest.mark.parametrize(
    "parts, reason",
    [
        ([b"frame/cam1/", b"{}"], "parts"),
        ([b"mask/cam1/", *_mutated()[1:]], "topic"),
        ([b"frame/cam1/", b"\xff\xfe", b""], "header"),
        ([b"frame/cam1/", b"[1, 2]", b""], "header"),
        ([b"frame/cam1/", b"x" * 20000, b""], "header"),
        ([b"frame/cam1/", _NAN_SEQ, b""], "header"),  # strict JSON: NaN is not a JSON number
        ([b"frame/cam1/", _NAN_SEQ.replace(b"NaN", b"9" * 30), b""], "field"),  # past 64 bits: read as a float
        (_mutated(v=2), "version"),
        (_mutated(seq="7"), "field"),
        (_mutated(seq=-1), "field"),
        (_mutated(camera="cam2"), "camera"),
        (_mutated(shape=[4, 6, 1]), "shape"),
        (_mutated(shape=[100000, 100000]), "shape"),
        (_mutated(shape=[0, 6]), "shape"),
        (_mutated(source_shape=[3, 6]), "shape"),  # smaller than the frame it was reduced to
        (_mutated(source_shape=[8, 12, 1]), "shape"),
        (_mutated(source_shape="8x12"), "shape"),
        (_mutated(source_shape=[8, 100000]), "shape"),
        (_mutated(dtype="float64"), "dtype"),
        (_mutated(encoding="png"), "encoding"),
        (_mutated(shape=[5, 6]), "size"),
        (_mutated(live="no"), "field"),  # a file's frame says live false, a bool
        (_mutated(live=0), "field"),
        (_mutated(t_read_ns=-5), "field"),
        (_mutated(t_read_ns=1.5), "field"),
    ],
)
def test_malformed_messages_are_rejected_with_reason(parts, reason):
    with pytest.raises(ProtocolError) as info:
        decode(parts, "frame")
    assert info.value.reason == reason


def test_sequence_tracker_counts_gaps_within_an_epoch_and_restarts_across():
    from streamer.wire.protocol import SequenceTracker

    t = SequenceTracker()
    assert t.update("a", 0) == (0, False)
    assert t.update("a", 1) == (0, False)
    assert t.update("a", 5) == (3, False)  # 2, 3, 4 lost
    assert t.update("a", 4) == (-2, False)  # old: rejected by the caller, position kept
    assert t.update("a", 6) == (0, False)
    assert t.update("b", 0) == (0, True)  # a new epoch is a restart, not 7 losses
    fresh = SequenceTracker()
    assert fresh.update("c", 10) == (10, False)  # joining late: the first 10 were lost


def _mask():
    m = np.zeros((48, 64), np.uint8)
    m[10:20, 5:30] = 255
    m[30:47, 40:41] = 255
    return m


def test_a_mask_as_a_1_bit_png_decodes_to_the_same_pixels_and_is_smaller():
    parts = encode("mask", "cam1", "e1", 3, 123, _mask(), "png", fg_ratio=0.1)
    assert json.loads(parts[1])["encoding"] == "png" and len(parts[2]) < _mask().size / 8
    msg = decode([bytes(p) for p in parts], "mask")
    np.testing.assert_array_equal(msg.image, _mask())
    assert msg.header["fg_ratio"] == 0.1 and msg.image.dtype == np.uint8
    with pytest.raises(ValueError, match="not one of"):
        encode("frame", "cam1", "e1", 0, 0, _mask(), "png")  # frames are grey levels: raw only


def _png(**header_changes):
    return _mutated("mask", _mask(), png=True, **header_changes)


@pytest.mark.parametrize(
    "parts, reason",
    [
        (_png(shape=[48, 65]), "size"),  # the PNG's own size differs: refused before decoding
        ([*_png()[:2], b"not a png at all, but long enough to be read"], "encoding"),
        ([*_png()[:2], _png()[2][:40]], "encoding"),  # cut short: the head is right, the data is not
        ([*_png()[:2], _png()[2] + b"\0" * 8000], "size"),  # longer than the raw mask
        (_png(encoding="jpeg"), "encoding"),
    ],
)
def test_malformed_png_masks_are_rejected_with_reason(parts, reason):
    with pytest.raises(ProtocolError) as info:
        decode(parts, "mask")
    assert info.value.reason == reason


def test_a_frame_may_not_be_a_png():
    parts = [bytes(p) for p in encode("mask", "cam1", "e1", 0, 0, _mask(), "png")]
    parts[0] = b"frame/cam1/"
    with pytest.raises(ProtocolError) as info:
        decode(parts, "frame")
    assert info.value.reason == "encoding"


def _end(**changes):
    from streamer.wire.protocol import encode_end

    parts = encode_end("cam1", "ep", 600, 1_000, "end_of_file", 600)
    h = json.loads(parts[1])
    h.update(changes)
    return [parts[0], json.dumps(h).encode(), parts[2]]


def test_an_end_of_stream_round_trips_and_every_malformed_one_has_a_reason():
    """Issue 45: the capture's end of stream is a message of the protocol, validated like the others."""
    from streamer.wire.protocol import decode_end, encode_end, kind_of

    parts = encode_end("cam1", "ep", 600, 1_000, "max_frames", 601)
    assert kind_of(parts) == "end" and parts[0] == b"end/cam1/"
    h = decode_end(parts)
    assert (h["v"], h["seq"], h["reason"], h["frames"], h["encoding"]) == (1, 600, "max_frames", 601, "none")
    with pytest.raises(ValueError, match="end reason"):
        encode_end("cam1", "ep", 0, 0, "bored", 0)
    bad = {
        "field": [_end(reason="bored"), _end(frames=-1), _end(frames="9"), _end(reason=None)],
        "encoding": [_end(encoding="raw")],
        "version": [_end(v=2)],
        "camera": [_end(camera="cam2")],
    }
    for reason, cases in bad.items():
        for case in cases:
            with pytest.raises(ProtocolError) as info:
                decode_end(case)
            assert info.value.reason == reason, case
    with pytest.raises(ProtocolError) as info:
        decode_end([*_end()[:2], b"x"])
    assert info.value.reason == "size"
    assert kind_of([b"nosuch/cam1/", b"", b""]) is None and kind_of([]) is None
