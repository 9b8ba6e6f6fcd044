"""A sender's CPU for copied and zero-copy ZeroMQ sends, by payload size (``protocol.COPY_THRESHOLD``).

Run: ``python tests/bench/bench_send.py [--seconds 20] [--sizes 320x240 640x480 1280x720 1920x1080]``.

For each mask size and each mode, this process publishes a new uint8 mask (a copy of a zero array, as
the worker makes a new mask per frame) with a header on a PUB socket bound to an ipc endpoint, at 30
messages a second for ``--seconds``, to a subscriber in a child process that receives them all.
The modes: ``copy`` (the payload copied into ZeroMQ's message) and ``zero-copy`` (``copy=False``
above pyzmq's threshold: ZeroMQ sends from the array's buffer, and pyzmq's garbage-collector thread
releases the array when ZeroMQ frees the message). Printed: this process's CPU (every thread) as a
share of one core, for each size and mode, and which mode ``COPY_THRESHOLD`` picks. The pacing's
own CPU is the same in both modes, so their difference is the send's.
"""

import argparse
import multiprocessing
import pathlib
import sys
import tempfile
import time

import numpy as np
import zmq

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from streamer.wire.protocol import COPY_THRESHOLD  # noqa: E402

RATE = 30.0


def receive_all(endpoint: str) -> None:
    """Receive until the message ``end``."""
    sock = zmq.Context().socket(zmq.SUB)
    sock.connect(endpoint)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    while sock.recv_multipart(copy=False)[0].bytes != b"end":
        pass


def measure(endpoint: str, shape: tuple[int, int], copy: bool, seconds: float) -> float:
    """This process's CPU, a share of one core, while it publishes masks of ``shape`` at 30 a second."""
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.copy_threshold = 2**31 - 1 if copy else 0  # every payload copied / none
    pub.bind(endpoint)
    child = multiprocessing.Process(target=receive_all, args=(endpoint,))
    child.start()
    time.sleep(0.5)  # the subscription reaches the publisher
    zero = np.zeros(shape, np.uint8)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(int(seconds * RATE)):
        due = t0 + i / RATE
        while (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        pub.send_multipart([b"mask.bench", b'{"seq": %d}' % i, zero.copy()], copy=False)
    cpu = (time.process_time() - c0) / (time.perf_counter() - t0)
    pub.send_multipart([b"end"])
    child.join(10)
    pub.close(linger=1000)
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of sending per size and mode")
    ap.add_argument("--sizes", nargs="+", default=["320x240", "640x480", "1280x720", "1920x1080"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for k, size in enumerate(args.sizes):
            w, h = (int(v) for v in size.split("x"))
            cpu = {
                mode: measure(f"ipc://{tmp}/send{k}{mode}", (h, w), mode == "copy", args.seconds)
                for mode in ("zero-copy", "copy")
            }
            picked = "copy" if w * h < COPY_THRESHOLD else "zero-copy"
            print(
                f"{size} ({w * h / 1024:.0f} KiB): zero-copy {100 * cpu['zero-copy']:.2f}%, "
                f"copy {100 * cpu['copy']:.2f}% of a core; COPY_THRESHOLD picks {picked}",
                flush=True,
            )


if __name__ == "__main__":
    main()
