"""A worker restarted from its checkpoint: seconds from the restart to its first mask (issue 46).

Run: ``python tests/bench/bench_restart.py [--restarts 4] [--busy 0 4]``.

One ``kdrsdl worker`` at 320 x 240, fed synthetic frames at 30 fps over loopback TCP by this
process and checkpointing every 2 s into a state directory, is killed with SIGKILL and started
again with the same command, ``--restarts`` times, each after 4 s of masks; printed for each
``--busy`` count: the seconds from each restart to the first mask the new worker publishes, with
that many busy processes (a Python loop each) beside it, as on a machine full of cameras. The
numba cache is the environment's ``NUMBA_CACHE_DIR`` (this script fills it first, so the workers
load their kernels from it rather than compile them).
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "streamer"))
sys.path.insert(0, str(ROOT))

from helpers import free_port, pusher, receive, start_worker, stop, subscriber, tcp, wait_for_line  # noqa: E402

from core.evaluation.scene import SyntheticScene  # noqa: E402
from core.streaming import kernels  # noqa: E402
from streamer.wire.protocol import encode  # noqa: E402

CHECKPOINT_S = 2


def restarts(n: int, busy: int) -> list[float]:
    """Seconds from each of ``n`` restarts to the new worker's first mask, ``busy`` busy processes beside it."""
    state, frames, masks = tempfile.mkdtemp(), tcp(), tcp()
    push, scene, halt = pusher(frames), SyntheticScene(240, 320, seed=2), threading.Event()

    def feed():
        t = 0
        while not halt.is_set():
            push.send_multipart(encode("frame", "cam1", "ep", t, time.time_ns(), scene.frame_uint8(t)))
            t += 1
            halt.wait(1 / 30)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    args = ("--state-dir", state, "--checkpoint-interval", str(CHECKPOINT_S))
    worker = start_worker(frames, masks, free_port(), *args)
    burners = []
    out = []
    try:
        sub = subscriber(masks, "cam1", timeout=60)
        wait_for_line(worker, "model ready in", 60)
        time.sleep(4 * CHECKPOINT_S)  # a checkpoint with a window solution is on disk
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        time.sleep(1)
        for _ in range(n):
            worker.kill()
            worker.wait()
            while receive(sub, 0.05) is not None:  # the killed worker's masks still queued
                pass
            t0 = time.monotonic()
            worker = start_worker(frames, masks, free_port(), *args)
            msg = None
            while msg is None and time.monotonic() < t0 + 60:
                msg = receive(sub, 0.2)
            if msg is None:
                raise SystemExit("a restarted worker published no mask within 60 s")
            out.append(time.monotonic() - t0)
            time.sleep(4)
        sub.close()
    finally:
        for b in burners:
            b.kill()
            b.wait()
        halt.set()
        feeder.join()
        push.close()
        stop(worker)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 4], help="busy processes beside the worker")
    args = ap.parse_args()
    kernels.warm()  # compiled into numba's cache before anything is timed: workers load them
    for busy in args.busy:
        seconds = restarts(args.restarts, busy)
        print(
            f"{busy} busy processes: restart -> first mask "
            + " ".join(f"{s:.2f}" for s in seconds)
            + f" s (mean {sum(seconds) / len(seconds):.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
