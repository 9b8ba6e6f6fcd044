"""Event snapshots (issue 48): a JPEG of the frame at an event's start and at its peak, the box drawn.

A real worker fed the generated scene of test_events (a white 24 x 24 square crossing the zone
"door"), received with the package's own client (streamer.client) and from ``[events]
snapshot_dir``; then the wire's checks of a snapshot's JPEG, made before anything is decoded.
"""

import time

import cv2
import numpy as np
import pytest
from helpers import metric, scrape
from test_events import CONFIG, DOOR, ENTER, QUIET, SPEED, Run, W, frame

from streamer.client import Snapshot, Subscriber
from streamer.wire.protocol import ProtocolError, decode, encode_snapshot, jpeg_size

#: JPEG quality 85 moves a gray level by a few units away from edges, and the 2-pixel red line
#: leaves its colour (R - G of 200 drawn) well above this after chroma subsampling.
GRAY_TOL, RED_MARGIN = 12, 80


def _red(image, x, y):
    b, g, r = (int(v) for v in image[y, x])
    return r - max(g, b)


def _outline_red(image, box):
    """The mean redness (R - max(G, B)) along the drawn box's top and left edges, inner pixel."""
    x, y, w, h = box
    top = [_red(image, xx, y) for xx in range(x + 1, x + w - 1)]
    left = [_red(image, x, yy) for yy in range(y + 1, y + h - 1)]
    return float(np.mean(top + left))


def _true_box_in_door(t, scale=1):
    """The square's box at frame t clipped to the door, in input pixels (``scale`` times the frame's)."""
    _, box = frame(t)
    x, y, w, h = box
    x0, x1 = max(x, DOOR[0][0]), min(x + w, DOOR[1][0] + 1)
    return scale * x0, scale * y, scale * (x1 - x0), scale * h


def _holds(outer, inner, tol):
    """``outer`` (x, y, w, h) holds ``inner`` within ``tol`` pixels on each side."""
    return (
        outer[0] <= inner[0] + tol
        and outer[1] <= inner[1] + tol
        and outer[0] + outer[2] >= inner[0] + inner[2] - tol
        and outer[1] + outer[3] >= inner[1] + inner[3] - tol
    )


@pytest.mark.parametrize("scale", [1, 2], ids=["frames as sent", "frames reduced by the capture"])
def test_an_event_has_a_snapshot_at_its_start_and_at_its_peak(tmp_path, scale):
    """Start: the frame that started the door's event, its box drawn where the square is; peak: the
    frame of the event's largest fraction (the square wholly in the door), sent with the end. With
    ``scale`` 2 the frames carry a ``source_shape`` twice their size: the picture is at the source's
    size and the box in its pixels. ``[events] snapshot_dir`` keeps the newest one."""
    config = CONFIG
    if scale == 2:
        config = config.replace(f"polygon = {DOOR}", f"polygon = {[[2 * x, 2 * y] for x, y in DOOR]}")
        config = config.replace("ignore = [", "ignore = [[[0, 0], [79, 0], [79, 39], [0, 39]], ")
    snap_dir = tmp_path / "snapshots"
    config += f'[events]\nsnapshot_dir = "{snap_dir}"\nsnapshot_keep = 1\n'
    run = Run(tmp_path, config=config)
    extra = {"source_shape": [2 * 120, 2 * W]} if scale == 2 else {}
    with Subscriber(run.masks, cameras=["cam1"], masks=False, events=True, snapshots=True) as sub:
        for t in range(ENTER):  # quiet frames: the client's connection settles meanwhile
            run.send(t, **extra)
        for t in range(ENTER, ENTER + W // SPEED + QUIET + 2):
            run.send(t, **extra)
        items, deadline = [], time.monotonic() + 20
        while len(items) < 4 and time.monotonic() < deadline:  # 2 events and 2 snapshots
            items += [i for i in [sub.recv(0.2)] if i is not None]
        samples = scrape(run.port)
        run.close()
    events = [i for i in items if i.kind == "event"]
    snaps = [i for i in items if isinstance(i, Snapshot)]
    assert [(e.event, e.zone) for e in events] == [("start", "door"), ("end", "door")]
    assert [(s.trigger, s.zone) for s in snaps] == [("start", "door"), ("peak", "door")]
    start, peak = snaps
    # each names its event's message, and pictures a frame of the event
    assert start.event_seq == events[0].seq and peak.event_seq == events[1].seq
    assert start.frame_seq == events[0].first_seq + 2  # min_frames = 3: the third active frame starts it
    assert events[1].first_seq <= peak.frame_seq <= events[1].last_seq
    assert peak.fraction == events[1].peak and start.fraction == events[0].fraction
    # the square (576 px) wholly inside the door (3500 px) at the peak; the mask's edges within 2%
    assert peak.fraction == pytest.approx(576 / 3500, abs=0.02)
    for s in snaps:
        assert s.image.shape == (120 * scale, W * scale, 3) and list(s.shape) == [120 * scale, W * scale]
        assert cv2.imdecode(np.frombuffer(s.jpeg, np.uint8), cv2.IMREAD_COLOR).shape == s.image.shape
        # the box drawn is where the square is: it holds the square's part in the door at that frame,
        # within the mask's edge (2 pixels of the frame), and its outline is red
        assert _holds(s.box, _true_box_in_door(s.frame_seq, scale), 2 * scale), (s.trigger, s.box)
        assert s.box[2] <= (SPEED * 3 + 24 + 4) * scale  # no wider than the square and its moves
        assert _outline_red(s.image, s.box) > RED_MARGIN
        # elsewhere the picture is the frame: the square's centre white, the background its gray
        x, y, w, h = _true_box_in_door(s.frame_seq, scale)
        assert s.image[y + h // 2, x + w // 2].min() > 255 - GRAY_TOL
        gray = cv2.resize(frame(s.frame_seq)[0], (W * scale, 120 * scale), interpolation=cv2.INTER_LINEAR)
        assert abs(int(s.image[100 * scale, 20 * scale, 1]) - int(gray[100 * scale, 20 * scale])) <= GRAY_TOL
    assert metric(samples, "kdrsdl_snapshots_total", camera="cam1", trigger="start") == 1
    # no [mqtt] table, no MQTT series: the worker never looks disconnected from a broker it has none of
    assert not [name for name, _ in samples if name.startswith("kdrsdl_mqtt_")]
    # the directory keeps the newest one: the peak's, the very bytes that were published
    files = sorted(p.name for p in snap_dir.iterdir())
    assert len(files) == 1 and files[0].startswith("cam1-") and files[0].endswith("-door-peak.jpg"), files
    assert (snap_dir / files[0]).read_bytes() == peak.jpeg


def test_no_snapshots_when_they_are_off(tmp_path):
    run = Run(tmp_path, "--no-snapshots")
    with Subscriber(run.masks, cameras=["cam1"], masks=False, snapshots=True) as sub:
        for t in range(ENTER + W // SPEED + QUIET + 2):
            run.send(t)
        items = [i for i in iter(lambda: sub.recv(0.5), None)]
        run.close()
    assert [(i.kind, i.event) for i in items] == [("event", "start"), ("event", "end")]


def _snapshot_parts(image, shape=None, payload=None):
    jpeg = cv2.imencode(".jpg", image)[1].tobytes()
    fields = {"trigger": "start", "event_seq": 0, "zone": "frame", "frame_epoch": "e", "frame_seq": 0,
              "fraction": 0.1, "box": None}  # fmt: skip
    return encode_snapshot("cam1", "w", 0, 1, jpeg if payload is None else payload, shape or image.shape[:2], **fields)


@pytest.mark.parametrize("h, w", [(1, 1), (120, 160), (721, 1283)])
def test_a_jpeg_size_is_read_from_its_frame_header(h, w):
    image = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    assert jpeg_size(cv2.imencode(".jpg", image)[1].tobytes()) == (h, w)
    assert jpeg_size(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()) == (h, w)
    msg = decode(_snapshot_parts(image), "snapshot")
    assert msg.image.shape == (h, w, 3)


@pytest.mark.parametrize(
    "parts, reason",
    [
        (lambda img: _snapshot_parts(img, shape=(60, 80)), "size"),  # the JPEG says 120 x 160
        (lambda img: _snapshot_parts(img, payload=b"\x89PNG not a jpeg"), "encoding"),
        (lambda img: _snapshot_parts(img, payload=b"\xff\xd8\xff\xda" + bytes(100)), "encoding"),  # scan first
        (lambda img: _snapshot_parts(img, payload=b"\xff\xd8" + bytes(3 * 120 * 160 + 70000)), "size"),
        (lambda img: _snapshot_parts(img, shape=(120, 9000)), "shape"),
    ],
    ids=["another size", "not a jpeg", "no frame header", "longer than raw", "a side beyond the limit"],
)
def test_a_bad_snapshot_is_refused_before_it_is_decoded(parts, reason):
    image = np.zeros((120, 160, 3), np.uint8)
    with pytest.raises(ProtocolError) as err:
        decode(parts(image), "snapshot")
    assert err.value.reason == reason
