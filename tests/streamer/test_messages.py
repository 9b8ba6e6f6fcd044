"""The wire contract (streamer/wire/messages.py) against what a real capture and a real worker send.

The committed JSON Schemas (docs/schema/) are the ones the models generate; every header of a
real capture (frames, the end of its stream) and a real worker (masks raw and PNG, every kind of
event, the events' snapshots) validates against them with an independent validator (jsonschema) and parses into its
typed structure; a header with a field missing, unknown or of another type does not.
"""

import copy
import json
import os
import time

import cv2
import jsonschema
import numpy as np
import pydantic
import pytest
import zmq
from conftest import ROOT
from helpers import free_port, start_capture, start_worker, stop, wait_for

from streamer.wire import messages
from streamer.wire.protocol import kind_of

SCHEMA_DIR = ROOT / "docs" / "schema"
N_FRAMES = 330
#: A box crosses in frames 40-150 (a start and an end event); at frame 240 the light drops by a
#: fifth (a light_change event once the model has a solution); the file's end (end_of_stream).
CROSSING, LIGHT_AT = (40, 150), 240


def write_scene(path):
    """A 320 x 240 MJPG video at 30 fps: a textured ramp, a box crossing, then a change of light."""
    rng = np.random.default_rng(0)
    # a left-to-right ramp of 30-230 under a fine texture: a gain of 0.8 moves the bright and the
    # dark ends out of their bands by more than the frame's median offset can take back, as a
    # change of light the rule must take does (core.streaming.light.MIN_EXPLAINED)
    texture = cv2.GaussianBlur(rng.integers(0, 40, (240, 320)).astype(np.uint8), (9, 9), 3).astype(np.float32)
    bg = np.clip(np.linspace(30, 210, 320, dtype=np.float32)[None, :] + texture, 0, 255).astype(np.uint8)
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (320, 240))
    for t in range(N_FRAMES):
        frame = bg.astype(np.float32)
        if CROSSING[0] <= t <= CROSSING[1]:
            x = int(20 + (t - CROSSING[0]) * 1.5)
            frame[95:145, x : x + 40] = 250
        if t >= LIGHT_AT:
            frame *= 0.8
        out.write(cv2.cvtColor(frame.astype(np.uint8), cv2.COLOR_GRAY2BGR))
    out.release()


@pytest.fixture(scope="module")
def headers(tmp_path_factory):
    """(kind, header) of every message a real capture and two real workers (raw and PNG masks) sent."""
    tmp = tmp_path_factory.mktemp("wire")
    video = tmp / "scene.avi"
    write_scene(video)
    got = []
    # the capture's messages, received as a worker receives them, frames reduced to 160 x 120
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(f"ipc://{tmp}/pull")
    cap = start_capture(f"ipc://{tmp}/pull", video, "--fps", "0", "--width", "160", "--height", "120")
    while pull.poll(30000):
        parts = pull.recv_multipart()
        got.append((kind_of(parts), json.loads(parts[1])))
        if got[-1][0] == "end":
            break
    pull.close()
    stop(cap)
    # two workers' masks and events, with a named zone
    zone = '[[motion.zones]]\nname = "left"\npolygon = [[0, 0], [160, 0], [160, 239], [0, 239]]\n'
    for encoding in ("raw", "png"):
        config = tmp / f"{encoding}.toml"
        config.write_text(f'[worker]\nmask_encoding = "{encoding}"\n{zone}')
        frames, masks = f"ipc://{tmp}/{encoding}-f", f"ipc://{tmp}/{encoding}-m"
        worker = start_worker(frames, masks, free_port(), "--config", config)
        sub = zmq.Context.instance().socket(zmq.SUB)
        for kind in ("mask", "event", "snapshot"):
            sub.setsockopt(zmq.SUBSCRIBE, f"{kind}/cam1/".encode())
        sub.connect(masks)
        wait_for(lambda e=encoding: os.path.exists(f"{tmp}/{e}-m"), 30, "the worker's sockets")
        time.sleep(0.5)  # the subscription reaches the worker
        cap = start_capture(frames, video, "--fps", "0")
        end = time.monotonic() + 120
        while time.monotonic() < end and sub.poll(10000):
            parts = sub.recv_multipart()
            got.append((kind_of(parts), json.loads(parts[1])))
            if got[-1][1].get("event") == "end_of_stream":
                break
        sub.close()
        stop(cap)
        rc, _, err = stop(worker)
        assert rc == 0, err[-2000:]
    return got


def test_the_committed_schemas_are_the_ones_the_models_generate():
    generated = messages.schemas()
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(f"{k}.schema.json" for k in generated)
    for kind, schema in generated.items():
        committed = (SCHEMA_DIR / f"{kind}.schema.json").read_text()
        assert committed == messages.schema_text(schema), (
            f"docs/schema/{kind}.schema.json is stale: run python -m streamer.wire.messages docs/schema"
        )
        jsonschema.Draft202012Validator.check_schema(json.loads(committed))


def test_every_live_header_follows_the_contract(headers):
    validators = {
        kind: jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text()))
        for kind in messages.HEADERS
    }
    seen = set()
    for kind, header in headers:
        errors = [e.message for e in validators[kind].iter_errors(header)]
        assert not errors, (kind, header, errors)
        parsed = messages.parse(kind, header)  # raises on a header off the contract
        assert (parsed.camera, parsed.seq, getattr(parsed, "event", None)) == (
            header["camera"],
            header["seq"],
            header.get("event"),
        )  # the fields land where they belong
        seen.add((kind, header.get("event"), header.get("encoding")))
    # every kind of message and of event was seen, and both mask encodings
    assert {("frame", None, "raw"), ("end", None, "none"), ("mask", None, "raw"), ("mask", None, "png")} <= seen
    assert ("snapshot", None, "jpeg") in seen
    triggers = {h["trigger"] for k, h in headers if k == "snapshot"}
    assert triggers == {"start", "peak"}
    assert {e for k, e, _ in seen if k == "event"} == {"start", "end", "light_change", "end_of_stream"}
    frames = [h for k, h in headers if k == "frame"]
    assert len(frames) == N_FRAMES and frames[0]["shape"] == [120, 160] and frames[0]["live"] is False


@pytest.mark.parametrize(
    "change",
    ["missing", "unknown", "type", "range"],
)
def test_a_header_off_the_contract_is_refused_by_both(headers, change):
    validators = {
        kind: jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text()))
        for kind in messages.HEADERS
    }
    for kind, header in {k: h for k, h in headers}.items():  # one header of each kind
        bad = copy.deepcopy(header)
        if change == "missing":
            del bad["camera"]
        elif change == "unknown":
            bad["colour"] = "red"
        elif change == "type":
            bad["seq"] = "7"
        else:
            bad["seq"] = -1
        assert list(validators[kind].iter_errors(bad)), (kind, change)
        with pytest.raises(pydantic.ValidationError):
            messages.parse(kind, bad)
