"""One endpoint for many cameras (``kdrsdl broker``) and the Python client (issue 48, in part).

Real processes: three workers fed by three captures of the synthetic scene, a broker connected to
the three, the client (:class:`streamer.client.Subscriber`) on the broker's one endpoint, and a
subscriber that never reads. The client's own bookkeeping (gaps, restarts, rejections) is checked
against a real PUB socket that sends it encoded messages with a gap, a new epoch and a broken one.
"""

import shutil
import time

import numpy as np
import zmq
from helpers import free_port, kdrsdl, metric, scrape, start_capture, start_worker, stop, tcp, wait_for, wait_for_line

from streamer.client import Event, Mask, Subscriber
from streamer.wire.protocol import encode, encode_event, new_epoch
from streamer.wire.security import create_keys

CAMERAS = ("c0", "c1", "c2")
FRAMES = 150
#: The broker's queue per subscriber, messages: 20 masks of 320 x 240 are 1.5 MB.
HWM = 20
#: Live captures at 10 fps: a worker has 100 ms a frame (it needs 3-5) and a backlog of 2, so only a
#: stall of its own of 200 ms or more would drop a frame, even on a busy 2-core machine; at 20 fps,
#: beside the rest of the suite, a worker dropped 12 of 150 on CPU alone.
FPS = 10


def test_one_subscriber_gets_every_camera_and_a_slow_one_slows_nobody(tmp_path):
    frames = {c: tcp() for c in CAMERAS}
    masks = {c: tcp() for c in CAMERAS}
    ports = {c: free_port() for c in CAMERAS}
    workers = {c: start_worker(frames[c], masks[c], ports[c], camera=c) for c in CAMERAS}
    endpoint, broker_port = tcp(), free_port()
    config = tmp_path / "broker.toml"
    config.write_text(f"[broker]\nsndhwm = {HWM}\n")
    broker = kdrsdl(
        "broker", "--config", config, "--endpoint", endpoint, "--metrics-port", broker_port,
        *[x for c in CAMERAS for x in ("--worker", masks[c])],
    )  # fmt: skip
    captures = []
    try:
        wait_for_line(broker, "worker(s) ->", 30)
        for c in CAMERAS:
            wait_for(lambda c=c: scrape(ports[c]), 60, f"worker {c}'s /metrics")
        sub = Subscriber(endpoint)  # every camera, masks and events
        # A subscriber that never reads, with the smallest queue: the broker drops its messages
        # beyond the high-water mark ([broker] sndhwm) and waits for nobody.
        slow = zmq.Context.instance().socket(zmq.SUB)
        slow.setsockopt(zmq.RCVHWM, 1)
        slow.setsockopt(zmq.RCVBUF, 4096)
        slow.setsockopt(zmq.SUBSCRIBE, b"mask/")
        slow.connect(endpoint)
        time.sleep(1.0)  # both subscriptions reach the workers through the broker
        captures = [
            start_capture(frames[c], "synthetic:320x240", "--max-frames", FRAMES, "--fps", FPS, camera=c)
            for c in CAMERAS
        ]
        got: dict[tuple[str, str], list] = {}
        ends = set()
        deadline = time.monotonic() + 120
        while len(ends) < len(CAMERAS) and time.monotonic() < deadline:
            item = sub.recv(1.0)
            if item is None:
                continue
            got.setdefault((item.camera, item.kind), []).append(item)
            if isinstance(item, Event) and item.event == "end_of_stream":
                ends.add(item.camera)
        assert ends == set(CAMERAS), (ends, sub.stats)
        for c in CAMERAS:
            m = scrape(ports[c])
            published = metric(m, "kdrsdl_masks_published_total", camera=c)
            mine = got[c, "mask"]
            # every mask each worker published reached the one subscriber, in order, none missed
            assert len(mine) == published > 0.8 * FRAMES, (c, len(mine), published)
            assert [x.seq for x in mine] == list(range(len(mine)))
            assert all(isinstance(x, Mask) and x.mask.shape == (240, 320) and x.mask.dtype == np.uint8 for x in mine)
            assert all(x.fg_ratio == np.count_nonzero(x.mask) / x.mask.size for x in mine[:5])
            # the slow subscriber did not hold the worker back: no frame dropped as overload
            assert metric(m, "kdrsdl_worker_frames_dropped_total", camera=c, reason="overload") == 0
            kinds = [x.event for x in got[c, "event"]]
            assert kinds[0] == "start" and kinds[-1] == "end_of_stream" and "end" in kinds, kinds
        assert sub.stats.gaps == 0 and sub.stats.rejected == 0 and sub.stats.restarts == 0, sub.stats
        # the slow subscriber lost masks (its own queue, dropped at the broker), far from all of them
        n_slow = 0
        while slow.poll(500):
            slow.recv_multipart()
            n_slow += 1
        total = sum(len(got[c, "mask"]) for c in CAMERAS)
        assert n_slow < total / 2, (n_slow, total)
        b = scrape(broker_port)
        for c in CAMERAS:  # the broker counted what it forwarded, by camera and kind
            assert metric(b, "kdrsdl_broker_messages_total", camera=c, kind="mask") == len(got[c, "mask"])
        assert metric(b, "kdrsdl_broker_subscriptions_total", change="subscribe") >= 2
        sub.close()
        slow.close()
    finally:
        for p in captures:
            stop(p)
        rc, _, err = stop(broker)
        for p in workers.values():
            stop(p)
    assert rc == 0, err[-2000:]


def test_the_client_reports_gaps_restarts_and_broken_messages():
    """A real PUB socket sends the client masks of cam1 with seq 0, 1, 3 (one missed), then a new
    epoch's 0 (a restart, nothing lost), a header that breaks the contract, and an event (after
    probes of an epoch of their own until the subscription is through)."""
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = Subscriber(f"tcp://127.0.0.1:{port}", cameras=["cam1"])
    mask = np.zeros((6, 8), np.uint8)
    mask[2:4, 3:6] = 255
    first, second = new_epoch(), new_epoch()
    fields = dict(
        frame_epoch="f", frame_index=0, input_shape=[6, 8], latency_s=0.01, threshold=None, fg_ratio=6 / 48,
        regions=[], regions_omitted=0, zones={}, solver={"start": "warm", "iterations": 3, "residual": 1e-4, "rank": 2},
        mask_resolution="input", processing_shape=[6, 8], light_change=None,
    )  # fmt: skip

    def send(epoch, seq, **extra):
        pub.send_multipart(encode("mask", "cam1", epoch, seq, 10**18, mask, frame_seq=seq, **{**fields, **extra}))

    def until(n_items):
        out, end = [], time.monotonic() + 10
        while len(out) < n_items and time.monotonic() < end:
            item = sub.recv(0.2)
            if item is not None:
                out.append(item)
        return out

    probe = new_epoch()
    probes = wait_for(lambda: (send(probe, 0), sub.recv(0.2))[1], 10, "the subscription")  # slow joiner
    time.sleep(0.3)
    while sub.recv(0.2) is not None:  # the probes still on their way
        pass
    n_probes = sub.stats.masks
    assert probes.epoch == probe and n_probes >= 1
    for seq in (0, 1, 3):
        send(first, seq)
    send(second, 0)
    send(second, 1, fg_ratio=2.0)  # out of range: rejected
    pub.send_multipart(
        encode_event("cam1", second, 0, 10**18, "light_change", zone="frame", frame_seq=1, gain=0.8, offset=0.01)
    )
    items = until(5)
    assert [(i.kind, i.epoch, i.seq) for i in items] == [
        ("mask", first, 0), ("mask", first, 1), ("mask", first, 3), ("mask", second, 0), ("event", second, 0),
    ]  # fmt: skip
    assert np.array_equal(items[1].mask, mask) and items[1].frame_seq == 1 and items[1].solver.rank == 2
    assert items[4].event == "light_change" and items[4].gain == 0.8
    s = sub.stats
    # 3 missed: none; a restart at each new epoch (first, second); the broken header rejected
    assert (s.gaps, s.restarts, s.rejected) == (1, 2, 1), s
    assert (s.masks, s.events) == (n_probes + 4, 1), s
    sub.close()
    pub.close()


def test_a_malformed_worker_endpoint_is_a_configuration_error():
    proc = kdrsdl("broker", "--worker", "nonsense://x", "--endpoint", tcp())
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 78 and "configuration error" in err.decode(), (proc.returncode, err[-1000:])


def test_curve_on_both_sides_of_the_broker(tmp_path):
    """A worker with CURVE that admits its capture and the broker; the broker a CURVE client of it
    and a CURVE server to its subscribers, admitting one: that one gets the masks through the
    broker, a subscriber with no keys and one with a key not admitted get none, each refusal
    counted on the broker's subscriber side."""
    keys, worker_allowed, broker_allowed = tmp_path / "keys", tmp_path / "worker-allowed", tmp_path / "broker-allowed"
    worker_allowed.mkdir()
    broker_allowed.mkdir()
    paths = {n: create_keys(keys, n) for n in ("worker", "capture", "broker", "client", "intruder")}
    for name in ("capture", "broker"):
        shutil.copy(paths[name][0], worker_allowed)
    shutil.copy(paths["client"][0], broker_allowed)
    public = {n: str(p[0]) for n, p in paths.items()}
    secret = {n: str(p[1]) for n, p in paths.items()}
    frames, masks, port = tcp(), tcp(), free_port()
    worker = start_worker(
        frames, masks, port, "--curve-secret-key", secret["worker"], "--curve-authorized-keys", worker_allowed
    )
    endpoint, broker_port = tcp(), free_port()
    broker = kdrsdl(
        "broker", "--endpoint", endpoint, "--metrics-port", broker_port, "--worker", masks,
        "--curve-secret-key", secret["broker"], "--curve-server-key", public["worker"],
        "--curve-authorized-keys", broker_allowed,
    )  # fmt: skip
    cap = None
    subs = {}
    try:
        wait_for_line(broker, "CURVE toward the workers, CURVE toward the subscribers", 30)
        wait_for(lambda: scrape(port), 60, "the worker's /metrics")
        subs = {
            "client": Subscriber(endpoint, curve_secret_key=secret["client"], curve_server_key=public["broker"]),
            "plain": Subscriber(endpoint),
            "intruder": Subscriber(endpoint, curve_secret_key=secret["intruder"], curve_server_key=public["broker"]),
        }
        time.sleep(1.0)  # the subscriptions reach the worker
        cap = start_capture(
            frames, "synthetic:160x120", "--fps", FPS, "--max-frames", 30,
            "--curve-secret-key", secret["capture"], "--curve-server-key", public["worker"],
        )  # fmt: skip
        first = wait_for(lambda: subs["client"].recv(0.5), 60, "a mask through the broker, over CURVE")
        assert first.kind == "mask" and first.camera == "cam1" and first.mask.shape == (120, 160)
        time.sleep(2.0)
        assert subs["plain"].recv(0.5) is None and subs["intruder"].recv(0.5) is None
        assert subs["plain"].stats.masks == subs["intruder"].stats.masks == 0
        b = scrape(broker_port)
        assert metric(b, "kdrsdl_broker_messages_total", camera="cam1", kind="mask") >= 1
        # both refused on the broker's subscriber side: no CURVE at all, and a key not admitted
        wait_for(
            lambda: metric(scrape(broker_port), "kdrsdl_broker_handshakes_failed_total", camera="default",
                           socket="subscribers") >= 2,
            10, "the refusals counted",
        )  # fmt: skip
        assert metric(b, "kdrsdl_broker_handshakes_failed_total", camera="default", socket="workers") == 0
    finally:
        for s in subs.values():
            s.close()
        if cap is not None:
            stop(cap)
        rc, _, err = stop(broker)
        stop(worker)
    assert rc == 0, err[-2000:]


def test_a_curve_key_without_its_pair_is_a_configuration_error(tmp_path):
    public, _ = create_keys(tmp_path, "worker")
    proc = kdrsdl("broker", "--curve-server-key", public)
    _, err = proc.communicate(timeout=60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 78 and len(lines) == 1 and "curve_secret_key goes with" in lines[0], lines
