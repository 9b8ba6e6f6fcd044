"""Where a worker's CPU goes (issue 26): py-spy on a worker fed the motorway video at 30 fps.

Run: ``pip install -e '.[profile]'; python tests/bench/profile_worker.py [--size 1280x720]
[--seconds 20] [--warmup 15] [--config FILE] [--process capture]`` (``--process capture``
samples the capture instead).

A capture loops the motorway video (``../shared/data/video/motorway_320x240.avi``) resized to
``--size`` (``bench_hd.make_input``) at 30 fps into a worker at its defaults (``--config`` goes to
both), with no thread variable in their environment. After ``--warmup`` seconds, ``py-spy record
--format raw`` samples the worker's threads 200 times a second for ``--seconds``. Printed: each
function's inclusive share of one core (its samples over 200 x seconds), the largest first.
Samples whose stack waits in a blocking call (ZeroMQ's poll and its garbage-collector thread, the
metrics server's select, the refit thread's queue, the stop signals' relay, the frames' blocking
receive, the capture's pacing) are left out: py-spy cannot tell those waits from work.
"""

import argparse
import collections
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "streamer"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))
sys.path.insert(0, str(ROOT))

from bench_hd import VIDEO, make_input  # noqa: E402
from helpers import free_port, scrape, start_capture, start_worker, stop, wait_for  # noqa: E402

from core.streaming import kernels  # noqa: E402

#: Frames of a stack that block in C (waiting, not working).
WAITS = ("GarbageCollectorThread.run", "_PollLikeSelector.select", "Poller.poll", "Socket.poll", "_Pacer.wait")
#: Functions that, as the innermost frame, wait: the refit thread for its next job, the stop
#: signals' relay thread in its read of the signal pipe, and the frames' blocking receive (a
#: frame's own copy out of ZeroMQ takes some 20 us of the 33 ms it waits for the next one).
LEAF_WAITS = ("Refitter._serve", "install_stop_handlers.<locals>.relay", "Socket.recv_multipart")
RATE = 200


def shares(raw: str, seconds: float) -> tuple[float, list[tuple[str, float]]]:
    """From py-spy's raw output: the working share of one core, and each function's inclusive share."""
    total, inclusive = 0, collections.Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [re.sub(r" \((.*?):\d+\)", lambda m: " " + m.group(1).split("/")[-1], f) for f in stack.split(";")]
        if not n.isdigit() or any(f.startswith(WAITS) for f in frames) or frames[-1].startswith(LEAF_WAITS):
            continue
        total += int(n)
        for f in set(frames):
            inclusive[f] += int(n)
    per_core = RATE * seconds
    return total / per_core, [(f, n / per_core) for f, n in inclusive.most_common()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=15)
    ap.add_argument("--config", help="TOML file for the capture and the worker")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--process", choices=("worker", "capture"), default="worker", help="the process to sample")
    args = ap.parse_args()
    kernels.warm()  # compiled into numba's cache before anything is timed: workers load them
    spy = shutil.which("py-spy") or str(pathlib.Path(sys.executable).with_name("py-spy"))
    if not pathlib.Path(spy).exists():
        raise SystemExit("py-spy is not installed: pip install -e '.[profile]'")
    if not VIDEO.exists():
        raise SystemExit(f"{VIDEO} is missing")
    tmp = tempfile.mkdtemp(prefix="kdrsdl-profile-")
    path, _ = make_input(args.size, tmp)
    config = ("--config", args.config) if args.config else ()
    frames, masks, port = f"ipc://{tmp}/f", f"ipc://{tmp}/m", free_port()
    worker = start_worker(frames, masks, port, *config, camera="p", bare=True)
    wait_for(lambda: scrape(port), 60, "the worker's metrics")
    capture = start_capture(frames, path, "--loop", "--live", "--fps", 30, *config, camera="p", bare=True)
    try:
        time.sleep(args.warmup)
        out = pathlib.Path(tmp) / f"{args.process}.txt"
        target = worker if args.process == "worker" else capture
        subprocess.run(
            [spy, "record", "-p", str(target.pid), "-d", str(int(args.seconds)), "-r", str(RATE),
             "--format", "raw", "-o", str(out)],
            check=True, capture_output=True,
        )  # fmt: skip
    finally:
        stop(capture)
        stop(worker)
    working, table = shares(out.read_text(), int(args.seconds))
    seconds = int(args.seconds)
    print(f"{args.process} at {args.size}, 30 fps, {seconds} s: {100 * working:.1f}% of a core in Python stacks")
    for name, share in table[: args.top]:
        print(f"{100 * share:6.1f}%  {name}")


if __name__ == "__main__":
    main()
