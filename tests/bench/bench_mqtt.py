"""What MQTT and event snapshots cost the worker's frame path (issue 48), beside MOG2's ``apply``.

Run: ``python tests/bench/bench_mqtt.py [--frames N]`` (needs Debian's ``mosquitto``).

The worker hands its publisher a frame's events (:meth:`streamer.wire.mqtt.MqttPublisher.events`)
and nothing else: a frame without an event does not reach MQTT at all (the worker's
``if self.mqtt is not None and events``). Timed here, per call, microseconds, best of 3 rounds:
a frame's events with none in progress; an event's start and end (the JSON on ``<prefix>/events``
and the ON/OFF states) with a real Mosquitto up; the same with the broker down (the events kept
for it). Beside them, OpenCV MOG2's ``apply`` on 320 x 240 frames of the synthetic scene in the
same run, the per-frame path this is added to.

Snapshots (:mod:`streamer.motion.snapshots`): a frame with no event in progress (the frame noted,
no zone's peak to keep), an event's start (its picture drawn and encoded as JPEG) at 320 x 240 and
1280 x 720, and its JPEG handed to MQTT.
"""

import argparse
import logging
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from core.evaluation.scene import SyntheticScene  # noqa: E402
from streamer.config import MqttConfig  # noqa: E402
from streamer.motion.events import Event  # noqa: E402
from streamer.motion.snapshots import Frame, SnapshotTaker  # noqa: E402
from streamer.ops.metrics import WorkerMetrics  # noqa: E402
from streamer.wire.messages import event_fields  # noqa: E402
from streamer.wire.mqtt import MqttPublisher  # noqa: E402
from streamer.wire.protocol import encode_event  # noqa: E402


def best_us(fn, n: int, rounds: int = 3) -> float:
    """The best round's mean time of ``fn()`` over ``n`` calls, microseconds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=300, help="calls per round (default %(default)s)")
    args = ap.parse_args()
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not pathlib.Path(mosquitto).exists():
        raise SystemExit("mosquitto is not installed (Debian package mosquitto)")
    cv2.setNumThreads(1)
    log = logging.getLogger("bench")
    scene = SyntheticScene(240, 320)
    frames = [(np.clip(scene.frame(t), 0, 1) * 255).astype(np.uint8) for t in range(args.frames)]
    mog2 = cv2.createBackgroundSubtractorMOG2()
    it = iter(range(10**9))
    mog2_us = best_us(lambda: mog2.apply(frames[next(it) % len(frames)]), args.frames)

    start = Event("start", "frame", 10**18, {"frame_epoch": "e", "first_seq": 0, "fraction": 0.1, "box": [1, 2, 3, 4]})
    end = Event("end", "frame", 10**18, {"frame_epoch": "e", "first_seq": 0, "last_seq": 9, "duration_s": 0.3,
                                          "peak": 0.2, "box": [1, 2, 3, 4], "reason": "quiet"})  # fmt: skip
    headers = [encode_event("cam1", "w", i, 10**18, e.event, **event_fields(e))[1] for i, e in enumerate((start, end))]
    rows = {}
    taker = SnapshotTaker(85)
    frame = Frame(frames[0], (240, 320), "e", 0, 10**18)
    rows["snapshots: a frame with no event"] = best_us(
        lambda: taker.observe(Frame(frames[0], (240, 320), "e", 0, 10**18), {}), args.frames
    )
    rows["snapshots: an event's start, 320 x 240"] = best_us(lambda: taker.take([start], frame), 50)
    hd = cv2.resize(frames[0], (1280, 720))
    rows["snapshots: an event's start, 1280 x 720"] = best_us(
        lambda: taker.take([start], Frame(hd, (720, 1280), "e", 0, 10**18)), 20
    )
    jpeg = taker.take([start], frame)[0][1].jpeg
    with tempfile.TemporaryDirectory() as tmp:
        port = 18830 + int(time.time()) % 1000
        conf = pathlib.Path(tmp) / "m.conf"
        conf.write_text(f"user root\nlistener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        broker = subprocess.Popen([mosquitto, "-c", str(conf)], stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            for name, cam_port in (("broker up", port), ("broker down", port + 1)):
                cfg = MqttConfig(host="127.0.0.1", port=cam_port, queue=100)
                pub = MqttPublisher(cfg, f"bench{cam_port}", [], WorkerMetrics(f"bench{cam_port}", mqtt=True), log)
                pub.start()
                time.sleep(1.0)
                rows[f"a frame with no event ({name})"] = best_us(lambda p=pub: p.events([], []), args.frames)
                rows[f"an event's start and end ({name})"] = best_us(  # 20 x 6 messages: within the queue
                    lambda p=pub: p.events([start, end], headers), 20
                )
                rows[f"a snapshot's JPEG to MQTT ({name})"] = best_us(lambda p=pub: p.snapshot(jpeg), 20)
                time.sleep(1.0)  # the acknowledgements
                pub.stop()
        finally:
            broker.kill()
    print(f"| call | microseconds | share of MOG2's apply ({mog2_us:.0f} us) |")
    print("|---|---|---|")
    for name, us in rows.items():
        print(f"| {name} | {us:.1f} | {us / mog2_us:.3f} |")


if __name__ == "__main__":
    main()
