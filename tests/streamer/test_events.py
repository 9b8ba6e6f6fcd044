"""Regions, zones and motion events through a real worker (issue 24).

A generated scene: a still textured background and a 24 x 24 white square that crosses it from
left to right at 4 pixels a frame, through the zone "door". Frames go in lock-step (a frame, then
its mask), so none is dropped and each header can be checked against its own payload.
"""

import json
import subprocess
import time

import numpy as np
import pytest
import zmq
from helpers import (
    free_port,
    kdrsdl,
    metric,
    pusher,
    receive,
    scrape,
    start_worker,
    stop,
    subscriber,
    tcp,
    wait_for,
    wait_for_line,
    wait_for_metrics,
)

from streamer.motion.regions import find_regions
from streamer.motion.zones import rasterise
from streamer.wire.messages import region_fields
from streamer.wire.protocol import decode_event, encode

H, W, SIDE, SPEED, ENTER = 120, 160, 24, 4, 40  # the square appears at frame ENTER at x = 0
ROW = 48
DOOR = [[100, 30], [149, 30], [149, 99], [100, 99]]  # 50 x 70 = 3500 px
IGNORE = [[0, 0], [39, 0], [39, 19], [0, 19]]  # top-left corner: a "timestamp" that changes
THRESHOLD, MIN_FRAMES, QUIET = 0.02, 3, 8
CONFIG = f"""
camera = "cam1"
[motion]
min_area = 30
max_regions = 5
event_threshold = {THRESHOLD}
event_min_frames = {MIN_FRAMES}
event_quiet_frames = {QUIET}
ignore = [{IGNORE}]
[[motion.zones]]
name = "door"
polygon = {DOOR}
"""


def background():
    yy, xx = np.mgrid[0:H, 0:W]
    return (100 + 30 * np.sin(xx / 7.0) * np.cos(yy / 9.0)).astype(np.uint8)


def frame(t):
    """Frame ``t`` and the square's true box (x, y, w, h) or None."""
    img = background().copy()
    img[2:12, 2:30] = (t * 37) % 256  # the "timestamp" in the ignored corner changes every frame
    x = (t - ENTER) * SPEED
    if t < ENTER or x >= W:
        return img, None
    img[ROW : ROW + SIDE, x : min(x + SIDE, W)] = 255
    return img, (x, ROW, min(SIDE, W - x), SIDE)


def events_socket(endpoint):
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"event/cam1/")
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(endpoint)
    return sub


def drain_events(sub, wait_s=0.0):
    out = []
    while sub.poll(int(wait_s * 1000)):
        out.append(decode_event(sub.recv_multipart()))
    return out


class Run:
    """A worker on this test's config, fed frame by frame."""

    def __init__(self, tmp_path, *extra, config=CONFIG):
        self.frames, self.masks, self.port = tcp(), tcp(), free_port()
        cfg = tmp_path / "cam1.toml"
        cfg.write_text(config)
        self.proc = start_worker(self.frames, self.masks, self.port, "--config", cfg, *extra)
        wait_for_metrics(self.proc, self.port)
        self.sub = subscriber(self.masks, "cam1")
        self.ev = events_socket(self.masks)
        self.push = zmq.Context.instance().socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(self.frames)
        self.epoch = f"ep{time.monotonic_ns()}"

    def send(self, t, **extra):
        img, _ = frame(t)
        self.push.send_multipart(encode("frame", "cam1", self.epoch, t, 10**18 + t * 10**8, img, **extra))
        msg = wait_for(lambda: receive(self.sub, 0.2), 30, f"the mask of frame {t}")
        assert msg.header["frame_seq"] == t
        return msg

    def close(self):
        self.push.close()
        self.sub.close()
        rc, _, err = stop(self.proc)
        assert rc == 0, err[-3000:]
        return drain_events(self.ev, 0.5)


@pytest.mark.parametrize("mask_resolution", ["input", "processing"])
def test_frames_reduced_by_the_capture_keep_regions_and_zones_in_the_source_pixels(tmp_path, mask_resolution):
    """Frames sent at the processing size with their ``source_shape`` (what the capture sends when
    the source is larger): polygons, regions and ``input_shape`` are in the source's pixels, and
    the mask is at the source's size (the worker enlarges it) unless asked at the processing size."""

    def doubled(poly):
        return [[2 * x + 1, 2 * y + 1] for x, y in poly]  # the same area in a source twice the size

    config = CONFIG.replace(f"polygon = {DOOR}", f"polygon = {doubled(DOOR)}")
    config = config.replace(f"ignore = [{IGNORE}]", f"ignore = [{doubled(IGNORE)}]")
    # the door's far corner (299, 199) lies outside the 160 x 120 frame: checked against the source
    assert "[299, 199]" in config
    run = Run(tmp_path, config=config + f'[model]\nmask_resolution = "{mask_resolution}"\nprocessing_side = 160\n')
    f = 2 if mask_resolution == "input" else 1  # mask pixels a frame pixel spans
    door = rasterise([doubled(DOOR)] if f == 2 else [DOOR], (f * H, f * W))
    checked = 0
    for t in range(ENTER + (W - SIDE) // SPEED):
        msg = run.send(t, source_shape=[2 * H, 2 * W])
        h = msg.header
        assert h["input_shape"] == [2 * H, 2 * W] and h["processing_shape"] == [H, W]
        assert list(msg.image.shape) == [f * H, f * W] and h["mask_resolution"] == mask_resolution
        assert set(np.unique(msg.image)) <= {0, 255}
        assert not msg.image[: 20 * f, : 40 * f].any()  # the ignored corner, drawn in source pixels
        _, truth = frame(t)
        if truth is None or t < ENTER + 10:  # the first frames of the square: the model settles
            continue
        checked += 1
        # the square, 2 x its box in the frame, within 2 frame pixels (4 source pixels) a side:
        # in the regions (measured at the processing size) and in the published mask itself
        x, y, w, hh = truth
        want = [2 * x, 2 * y, 2 * w, 2 * hh]
        box = h["regions"][0]["box"]
        assert np.abs(np.subtract(box, want)).max() <= 4, (t, box, truth)
        rows, cols = np.nonzero(msg.image)
        drawn = [cols.min() * 2 // f, rows.min() * 2 // f, (cols.max() + 1 - cols.min()) * 2 // f]
        assert np.abs(np.subtract(drawn, want[:3])).max() <= 4, (t, drawn, truth)
        fraction = np.count_nonzero(msg.image[door]) / door.sum()
        assert h["zones"]["door"] == pytest.approx(fraction, abs=0.02)
    assert checked >= 20
    run.close()


def test_masks_sent_as_png_decode_to_the_masks_their_headers_describe(tmp_path):
    run = Run(tmp_path, config=CONFIG.replace("[motion]", '[worker]\nmask_encoding = "png"\n[motion]'))
    checked = 0
    for t in range(ENTER + 25):
        msg = run.send(t)
        assert msg.header["encoding"] == "png" and msg.image.shape == (H, W)
        assert set(np.unique(msg.image)) <= {0, 255}
        listed = find_regions(msg.image, 30, 5).listed
        assert [region_fields(r) for r in listed] == msg.header["regions"]
        checked += bool(listed)
    assert checked >= 10  # the square was found in the decoded masks
    run.close()


def expected_events(fractions):
    """The events the documented rule gives for the published ``{frame: fraction}`` of the door."""
    out, run, open_, quiet = [], [], False, 0
    for t in sorted(fractions):
        if fractions[t] > THRESHOLD:
            run.append(t)
            quiet = 0
            if not open_ and len(run) >= MIN_FRAMES:
                open_ = True
                out.append(("start", t, run[0]))
        elif run:
            if not open_:
                run = []
                continue
            quiet += 1
            if quiet >= QUIET:
                out.append(("end", t, run[0]))
                run, open_, quiet = [], False, 0
    return out


def test_regions_zones_and_events_match_the_scene_and_the_published_masks(tmp_path):
    run = Run(tmp_path)
    door = rasterise([DOOR], (H, W))
    ignored = rasterise([IGNORE], (H, W))
    fractions, headers = {}, {}
    n = ENTER + (W // SPEED) + QUIET + 6
    for t in range(n):
        msg = run.send(t)
        h, mask = msg.header, msg.image
        headers[t] = h
        # the ignored corner is never foreground, although its pixels change every frame
        assert not mask[ignored].any()
        # regions: exactly the published mask's components of at least 30 px, at most 5
        regions = find_regions(mask, 30, 5)
        assert h["regions"] == [region_fields(r) for r in regions.listed] and h["regions_omitted"] == regions.omitted
        # zone fraction: exactly the published mask's share of the door's pixels
        fractions[t] = h["zones"]["door"]
        assert fractions[t] == pytest.approx(np.count_nonzero(mask[door]) / door.sum(), abs=1e-6)
        assert h["fg_ratio"] == pytest.approx(np.count_nonzero(mask) / (H * W - ignored.sum()))
        # against the truth: once the model has seen the background (ENTER frames), the square
        # is the one region, its box within 2 px of the truth (the post-processing's morphology
        # may round a corner or close a pixel gap)
        _, truth = frame(t)
        if t >= 10:
            if truth is None:
                assert h["regions"] == [], (t, h["regions"])
            elif truth[2] >= 8:  # a sliver leaving the frame is left out
                assert len(h["regions"]) == 1, (t, h["regions"])
                assert np.abs(np.array(h["regions"][0]["box"]) - truth).max() <= 2, (t, h["regions"], truth)
    events = run.close()
    got = [e for e in events if e["event"] in ("start", "end")]
    # the events are exactly what the rule makes of the published fractions ...
    want = expected_events(fractions)
    assert [(e["event"], e["first_seq"]) for e in got] == [(k, first) for k, _, first in want]
    assert [e["t_capture_ns"] for e in got] == [headers[t]["t_capture_ns"] for _, t, _ in want]
    # ... and what the scene makes of the truth: one event, starting with the first frame the
    # square covers more than 2% of the door (70 px: 3 columns of 24 rows; its left edge at
    # x = 100 - 24 + 3 = 79), within a frame
    assert [e["event"] for e in got] == ["start", "end"]
    start, end = got
    truth_first = ENTER + -(-(100 - SIDE + 3) // SPEED)
    assert abs(start["first_seq"] - truth_first) <= 1, (start, truth_first)
    assert start["zone"] == end["zone"] == "door" and end["reason"] == "quiet"
    last = end["last_seq"]
    assert fractions[last] > THRESHOLD and all(fractions[t] <= THRESHOLD for t in range(last + 1, last + QUIET + 1))
    assert end["duration_s"] == pytest.approx((last - start["first_seq"]) * 0.1)
    assert end["peak"] == pytest.approx(max(fractions[t] for t in range(start["first_seq"], last + 1)), abs=1e-6)
    x0, y0, bw, bh = end["box"]  # the square's pixels inside the door, over the event
    assert abs(x0 - 100) <= 2 and abs(x0 + bw - 150) <= 2 and abs(y0 - ROW) <= 2 and abs(bh - SIDE) <= 2
    assert [e["seq"] for e in events] == list(range(len(events)))  # events have their own counter


def test_an_event_open_at_a_restart_is_ended_with_reason_restart(tmp_path):
    state = tmp_path / "state"
    run = Run(tmp_path, "--state-dir", state)
    mid = ENTER + 100 // SPEED + 3  # the square well inside the door
    for t in range(mid):
        run.send(t)
    assert [e["event"] for e in drain_events(run.ev, 0.5)] == ["start"]
    port = run.port
    s = scrape(port)
    assert metric(s, "kdrsdl_motion_events_total", camera="cam1", zone="door", kind="start") == 1
    assert metric(s, "kdrsdl_zone_foreground_ratio", camera="cam1", zone="door") > THRESHOLD
    assert run.close() == []  # a stop with a state directory ends nothing: the checkpoint keeps it
    again = Run(tmp_path, "--state-dir", state)
    again.epoch = run.epoch  # the same capture goes on
    again.send(mid)
    (end, *rest) = drain_events(again.ev, 1.0)
    assert (end["event"], end["zone"], end["reason"]) == ("end", "door", "restart")
    assert end["last_seq"] == mid - 1 and end["first_seq"] < mid - 3
    # the frame after the restart still shows the square in the door: a new event starts there
    for t in range(mid + 1, mid + MIN_FRAMES + 1):
        again.send(t)
    events = rest + again.close()
    assert [e["event"] for e in events][:1] == ["start"] and events[0]["first_seq"] == mid


def test_a_stop_without_a_state_directory_ends_open_events_with_reason_stop(tmp_path):
    run = Run(tmp_path)
    for t in range(ENTER + 100 // SPEED + 3):
        run.send(t)
    events = run.close()
    assert [(e["event"], e.get("reason")) for e in events] == [("start", None), ("end", "stop")]


BAD = {
    "fewer than 3 points": ("[[motion.zones]]\nname = 'a'\npolygon = [[0, 0], [5, 5]]", "at least 3 items"),
    "a string for a number": ("[[motion.zones]]\nname = 'a'\npolygon = [[0, 0], ['5', 5], [5, 0]]", "valid number"),
    "a point outside": ("[motion]\nignore = [[[0, 0], [64, 0], [0, 5]]]", r"point \(64, 0\) lies outside the 64 x 48"),
    "a name that is no label value": ("[[motion.zones]]\nname = 'front door'\npolygon = [[0, 0], [5, 5], [5, 0]]",
                                      "zone name must be 1-64 characters"),
    "a repeated name": ("[[motion.zones]]\nname = 'a'\npolygon = [[0, 0], [5, 5], [5, 0]]\n"
                        "[[motion.zones]]\nname = 'a'\npolygon = [[0, 0], [5, 5], [5, 0]]", "'a' repeats"),
    "a negative point": ("[motion]\nignore = [[[0, -1], [5, 5], [5, 0]]]", "greater than or equal to 0"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_a_bad_polygon_is_a_configuration_error_at_load(tmp_path, case):
    text, message = BAD[case]
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[capture]\nwidth = 64\nheight = 48\n" + text)
    proc = kdrsdl("worker", "--config", cfg, "--metrics-port", 0)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 78, err.decode()
    assert "configuration error" in err.decode() and message.replace("\\", "") in err.decode().replace("\\", "")


def test_a_zone_outside_the_first_frame_stops_the_worker_with_a_configuration_error(tmp_path):
    cfg = tmp_path / "zones.toml"
    cfg.write_text("[[motion.zones]]\nname = 'far'\npolygon = [[0, 0], [500, 0], [0, 10]]\n")
    frames, masks = tcp(), tcp()
    proc = start_worker(frames, masks, 0, "--config", cfg)
    push = pusher(frames)
    push.send_multipart(encode("frame", "cam1", "ep", 0, time.time_ns(), np.zeros((48, 64), np.uint8)))
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    finally:
        push.close()
    assert proc.returncode == 78, err.decode()[-2000:]
    assert "motion.zones[0] 'far': point (500, 0) lies outside the 64 x 48 frame" in err.decode()


def test_subscribe_events_prints_each_event_as_a_json_line(tmp_path):
    run = Run(tmp_path)
    printer = kdrsdl("subscribe", "--camera", "cam1", "--masks-endpoint", run.masks, "--events", "--count", 2)
    wait_for_line(printer, "connected to", 30)  # its readiness; the subscription travels right after it
    for t in range(ENTER + W // SPEED + QUIET + 2):
        run.send(t)
    out, err = printer.communicate(timeout=30)
    run.close()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert [(e["event"], e["zone"]) for e in lines] == [("start", "door"), ("end", "door")], err.decode()[-2000:]
    assert "received 2 events" in err.decode()


def test_the_subscribers_readiness_is_logged_when_the_handshake_beats_its_first_check(caplog):
    """``kdrsdl subscribe`` logs "connected to" once its connection is up (scripts wait for that
    line). The publisher is bound first and the subscriber's thread stalls 0.3 s after connecting,
    as on a busy machine: the handshake is over long before the first check, and must still be
    reported. A monitor attached after the connect misses such a handshake for good (a one-off
    script with 50 ms between the two missed 20 of 20), and CI once waited 30 s for the line."""
    import logging
    import types

    from streamer.processes import subscriber

    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:0")
    endpoint = pub.getsockopt(zmq.LAST_ENDPOINT).decode()
    settings = types.SimpleNamespace(masks_endpoint=endpoint, curve_secret_key=None, curve_server_key=None)
    log = logging.getLogger("test.subscriber")
    with caplog.at_level(logging.INFO, logger="test.subscriber"):
        for kind in ("mask", "event"):
            sock, connected = subscriber._socket(settings, "cam1", log, kind)
            time.sleep(0.3)
            deadline = time.monotonic() + 5  # the handshake is over; 5 s only bounds a failure
            while connected.mon is not None and time.monotonic() < deadline:
                connected.check()
                time.sleep(0.01)
            connected.close()
            sock.close()
    pub.close()
    assert [r.getMessage() for r in caplog.records] == [f"connected to {endpoint}"] * 2


def test_the_readme_event_consumer_prints_what_the_worker_sends(tmp_path):
    """The README's Python consumer of events, run as a user runs it, against a real worker."""
    import re
    import sys

    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "masks=False" in b)
    run = Run(tmp_path)
    script = tmp_path / "consumer.py"
    script.write_text(code.replace("tcp://127.0.0.1:5560", run.masks))
    consumer = subprocess.Popen([sys.executable, "-u", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # the README's code has no readiness signal of its own: its connection gets the frames before
    # the door enters, 1.5 s in all, to come up
    time.sleep(1.5)
    for t in range(ENTER + W // SPEED + QUIET + 2):
        run.send(t)
    lines = [consumer.stdout.readline().decode().rstrip("\n") for _ in range(2)]  # start, then end
    consumer.terminate()
    _, err = consumer.communicate(timeout=10)
    run.close()
    assert lines[0] == "door start", (lines, err.decode()[-2000:])
    assert re.fullmatch(r"door: motion for \d+\.\d s, peak \d+%, box \[\d+, \d+, \d+, \d+\]", lines[1]), lines
