"""CURVE (issue 6): with keys configured, only authorized captures and subscribers get through."""

import os
import shutil
import time

import zmq
from helpers import (
    free_port,
    kdrsdl,
    metric,
    scrape,
    start_capture,
    start_worker,
    stop,
    tcp,
    wait_for,
    wait_for_metrics,
)

from streamer.wire.protocol import decode, encode
from streamer.wire.security import create_keys, make_client


def _sub(endpoint, keys=None):
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"mask/cam1/")
    if keys:
        make_client(sub, *keys)
    sub.connect(endpoint)
    return sub


def test_curve_admits_authorized_peers_only(tmp_path):
    keys, allowed = tmp_path / "keys", tmp_path / "authorized"
    allowed.mkdir()
    paths = {name: create_keys(keys, name) for name in ("worker", "capture", "viewer", "intruder")}
    for name in ("capture", "viewer"):
        shutil.copy(paths[name][0], allowed)
    assert oct(os.stat(paths["worker"][1]).st_mode & 0o777) == "0o600"  # secret keys are private
    worker_secret, worker_public = str(paths["worker"][1]), str(paths["worker"][0])

    frames, masks, port = tcp(), tcp(), free_port()
    worker = start_worker(frames, masks, port, "--curve-secret-key", worker_secret, "--curve-authorized-keys", allowed)
    wait_for_metrics(worker, port)
    viewer = _sub(masks, (str(paths["viewer"][1]), worker_public))
    plain = _sub(masks)  # no CURVE at all
    intruder = _sub(masks, (str(paths["intruder"][1]), worker_public))  # CURVE, but a key not authorized
    cap = start_capture(
        frames,
        "synthetic:160x120",
        "--fps",
        50,
        "--curve-secret-key",
        paths["capture"][1],
        "--curve-server-key",
        worker_public,
    )
    try:
        first = wait_for(
            lambda: decode(viewer.recv_multipart(), "mask") if viewer.poll(200) else None,
            30,
            "an authorized subscriber to receive masks",
        )
        assert first.header["camera"] == "cam1"
        # frames pushed by peers that are not authorized never reach the model
        ctx = zmq.Context.instance()
        pushers = []
        for keys_ in (None, (str(paths["intruder"][1]), worker_public)):
            push = ctx.socket(zmq.PUSH)
            push.setsockopt(zmq.LINGER, 0)
            push.setsockopt(zmq.SNDTIMEO, 100)
            if keys_:
                make_client(push, *keys_)
            push.connect(frames)
            pushers.append(push)
        img = first.image
        for i in range(20):
            for push in pushers:
                try:
                    push.send_multipart(encode("frame", "cam1", "intruder", i, time.time_ns(), img))
                except zmq.Again:
                    pass
        time.sleep(2)
        s = scrape(port)
        assert metric(s, "kdrsdl_worker_capture_restarts_total", camera="cam1") == 0  # no other sender epoch seen
        received, end = 0, time.monotonic() + 2
        while time.monotonic() < end:
            if viewer.poll(100):
                viewer.recv_multipart()
                received += 1
        assert received > 50  # the authorized subscriber keeps getting masks (50 fps)
        assert not plain.poll(500) and not intruder.poll(500)  # the others got nothing, ever
        # and each refusal was counted: two subscribers on masks, two pushers on frames (ZeroMQ retries
        # a refused connection, so each may count more than once)
        s = scrape(port)
        assert metric(s, "kdrsdl_worker_handshakes_failed_total", camera="cam1", socket="masks") >= 2
        assert metric(s, "kdrsdl_worker_handshakes_failed_total", camera="cam1", socket="frames") >= 2
        for push in pushers:
            push.close()
    finally:
        for sock in (viewer, plain, intruder):
            sock.close()
        stop(cap)
        rc, _, err = stop(worker)
    assert rc == 0, err[-3000:]
    assert "CURVE" in err


def test_curve_misconfiguration_is_a_config_error(tmp_path):
    public, secret = create_keys(tmp_path, "w")
    cases = [
        ("worker", "--curve-secret-key", secret),  # without authorized keys
        ("worker", "--curve-secret-key", public, "--curve-authorized-keys", tmp_path),  # public file as the secret
        ("capture", "--curve-secret-key", secret, "--curve-server-key", tmp_path / "missing.key"),
    ]
    for args in cases:
        proc = kdrsdl(*args)
        proc.wait(timeout=30)
        rc, _, err = stop(proc)
        assert rc == 78 and err.count("\n") == 1, (args, err)
        assert "curve" in err.lower() or "certificate" in err, (args, err)
