"""Hostile input (issue 6), property-based: thousands of random and mutated messages at the worker's frames
socket and the subscriber, interleaved with valid ones; random configuration files."""

import json
import select
import subprocess
import sys
import time

import pytest
import zmq
from fuzz_messages import accepted, hostile, valid
from helpers import free_port, kdrsdl, metric, receive, scrape, stop, subscriber, tcp, wait_for, wait_for_metrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamer.config import ConfigError, load
from streamer.ops.metrics import REJECT_REASONS
from streamer.wire.protocol import ProtocolError, decode

FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
REASONS = REJECT_REASONS


@pytest.fixture(scope="module")
def fuzzed_worker():
    frames, masks, port = tcp(), tcp(), free_port()
    proc = kdrsdl(
        "worker", "--camera", "cam1", "--frames-endpoint", frames, "--masks-endpoint", masks, "--metrics-port", port
    )
    wait_for_metrics(proc, port)
    ctx = zmq.Context.instance()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(frames)
    sub = subscriber(masks, "cam1")
    box = {"push": push, "sub": sub, "port": port, "proc": proc, "seq": 0, "invalid": 0}
    yield box
    push.close()
    sub.close()
    rc, _, err = stop(proc)
    assert rc == 0, err[-3000:]


def _rejected(port):
    s = scrape(port)
    return sum(metric(s, "kdrsdl_worker_messages_rejected_total", camera="cam1", reason=r) for r in REASONS)


@FUZZ
@given(batch=st.lists(hostile("frame", "cam1"), min_size=1, max_size=20))
def test_worker_survives_hostile_frames_and_counts_every_one(fuzzed_worker, batch):
    box = fuzzed_worker
    invalid = [parts for parts in batch if not accepted(parts, "frame", "cam1")]
    for parts in invalid:
        box["push"].send_multipart(parts)
    box["invalid"] += len(invalid)
    seq = box["seq"]
    box["push"].send_multipart(valid("frame", "cam1", "the-real-capture", seq))
    box["seq"] += 1
    msg = wait_for(lambda: receive(box["sub"], 0.2), 10, f"the mask of valid frame {seq}")
    assert msg.header["frame_seq"] == seq  # every valid frame yields its mask, in order
    assert box["proc"].poll() is None


def test_worker_fuzz_totals(fuzzed_worker):
    # every invalid message was counted and every valid frame processed, over the property test's
    # examples: run here when it has not run yet on this worker (alone, or in another order)
    box = fuzzed_worker
    if box["seq"] == 0:
        test_worker_survives_hostile_frames_and_counts_every_one(fuzzed_worker=box)
    assert box["invalid"] > 2000
    s = scrape(box["port"])
    assert _rejected(box["port"]) == box["invalid"]
    assert metric(s, "kdrsdl_worker_frames_processed_total", camera="cam1") == box["seq"]
    assert metric(s, "kdrsdl_worker_frames_lost_total", camera="cam1") == 0
    print(f"\n{box['invalid']} hostile messages rejected, {box['seq']} valid frames processed")


@settings(max_examples=3000, deadline=None)
@given(parts=hostile("mask", "cam1"))
def test_mask_parser_accepts_or_raises_protocol_error_only(parts):
    try:
        msg = decode(parts, "mask")
    except ProtocolError as exc:
        assert exc.reason in REASONS
        return
    h, w = msg.header["shape"]
    assert msg.image.shape == (h, w) and msg.image.dtype.name == "uint8" and msg.image.tobytes() == bytes(parts[2])


@pytest.fixture(scope="module")
def fuzzed_subscriber():
    port = free_port()
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(f"tcp://127.0.0.1:{port}")
    proc = kdrsdl("subscribe", "--camera", "cam1", "--masks-endpoint", f"tcp://127.0.0.1:{port}")
    # slow joiner: publish a probe until the subscriber prints it
    seq = 0
    end = time.monotonic() + 20
    while True:
        pub.send_multipart(valid("mask", "cam1", "w", seq))
        seq += 1
        if _readable(proc.stdout, 0.1):
            proc.stdout.readline()
            break
        assert time.monotonic() < end, "the subscriber never received a mask"
    box = {"pub": pub, "proc": proc, "seq": seq, "invalid": 0}
    yield box
    pub.close()
    rc, out, err = stop(proc)
    assert rc == 0, err[-3000:]
    rejected = int(err.rsplit(" rejected", 1)[0].rsplit(", ", 1)[1])
    assert rejected == box["invalid"], err[-2000:]


def _readable(f, timeout):
    return bool(select.select([f], [], [], timeout)[0])


@FUZZ
@given(batch=st.lists(hostile("mask", "cam1"), min_size=1, max_size=20))
def test_subscriber_survives_hostile_masks(fuzzed_subscriber, batch):
    box = fuzzed_subscriber
    for parts in batch:
        if accepted(parts, "mask", "cam1"):
            continue
        box["pub"].send_multipart(parts)
        # SUB filters by topic prefix: only messages on mask/cam1/ reach the parser
        if bytes(parts[0]).startswith(b"mask/cam1/"):
            box["invalid"] += 1
    box["pub"].send_multipart(valid("mask", "cam1", "w", box["seq"]))
    assert _readable(box["proc"].stdout, 10), "no line for a valid mask"
    line = json.loads(box["proc"].stdout.readline())
    assert line["seq"] == box["seq"]  # the valid mask after the hostile batch got through
    box["seq"] += 1
    assert box["proc"].poll() is None


toml_keys = st.sampled_from(
    [
        "camera",
        "capture.source",
        "capture.fps",
        "capture.width",
        "capture.loop",
        "worker.backlog",
        "worker.max_side",
        "worker.state_dir",
        "worker.checkpoint_interval_s",
        "model.window",
        "model.rank",
        "model.lam",
        "model.threshold",
        "model.min_threshold",
        "model.frame_model",
        "model.open_size",
        "subscribe.count",
        "nosuch.key",
        "model.nosuch",
    ]
)
toml_values = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(),
    st.booleans(),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.just("inf"),
    st.just("nan"),
)


def _toml_value(v):
    if isinstance(v, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(v, "nan" if v != v else repr(v))
    if isinstance(v, bool):
        return "true" if v else "false"
    if v in ("inf", "nan"):
        return v  # bare TOML floats
    return json.dumps(v)


@settings(max_examples=1500, deadline=None)
@given(entries=st.dictionaries(toml_keys, toml_values, max_size=6), garbage=st.one_of(st.none(), st.text(max_size=30)))
def test_random_config_files_load_or_give_a_config_error(tmp_path_factory, entries, garbage):
    sections = {}
    for key, value in entries.items():
        section, _, name = key.rpartition(".")
        sections.setdefault(section, []).append(f"{name} = {_toml_value(value)}")
    text = "\n".join(sections.pop("", []))
    for section, lines in sections.items():
        text += f"\n[{section}]\n" + "\n".join(lines)
    if garbage is not None:
        text += "\n" + garbage
    path = tmp_path_factory.mktemp("cfg") / "fuzz.toml"
    path.write_text(text)
    try:
        cfg = load(str(path))
    except ConfigError as exc:
        msg = str(exc)
        assert msg.startswith(str(path)) and "\n" not in msg
        return
    cfg.model.params().validate()  # what the worker builds from it must be valid too


def test_non_finite_config_values_exit_78_through_the_cli(tmp_path):
    # the end of the same path, through the real CLI: non-finite numbers are configuration errors
    for text in ("[model]\nlam = inf\n", "[model]\nalpha = nan\n", "[worker]\ncheckpoint_interval_s = inf\n"):
        path = tmp_path / "c.toml"
        path.write_text(text)
        proc = subprocess.run(
            [sys.executable, "-m", "streamer", "worker", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 78 and proc.stderr.count("\n") == 1, (text, proc.stderr)
