"""How late a frame comes out while its own worker's refit runs, with the cores busy (issue 46).

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_refit_priority.py [--runs thread:10 thread:0
process:10] [--hogs 3] [--frames 1500] [--video PATH]``.

A worker's refit runs on a thread of the worker's process at a lower priority
(:data:`core.streaming.refit.REFIT_NICENESS`), so that where cameras share the cores a frame does
not wait for a refit's CPU. But both threads run Python, and Python runs one thread at a time
(the GIL): when the refit thread holds the GIL and the scheduler leaves it waiting for a core
behind busier threads, the frame thread waits for it too, whatever its own priority. This
measures that wait.

For each of ``--runs``, a process of its own runs a :class:`KDRSDLBackgroundSubtractor` with
refits off the frames' path (``async_refit``) on the motorway video
(``../shared/data/video/motorway_320x240.avi``, or ``--video``), one frame due every 1/30 s (a sleep
until it is due, as a worker waits for its next frame), while ``--hogs`` busy loops at nice 0 keep
the 2 cores busy (other cameras' frames). ``thread:N``: the refits on their thread, which adds N to
its nice value (the worker's way, N = 10). ``process:N``: each refit handed whole to a process of
its own at nice N (:func:`core.streaming.refit.solve_window` in a ``concurrent.futures`` pool of
one process, started and its imports loaded before the first frame), the refit thread only
waiting for it: a design the worker does not have, measured to tell what it would change.

Printed, over the frames after the 300th: how late each frame's mask is (from when the frame was
due to the end of its ``apply``, ms), p99 and largest, apart for the frames that ran while a refit
ran and for the others; the frames more than 67 ms late (two frames at 30 fps: what the worker's
default ``backlog`` of 2 holds before it drops one); and the refits' count and mean wall time.
"""

import argparse
import concurrent.futures
import multiprocessing
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_paced import FPS, VIDEO, WARMUP  # noqa: E402  (the same video, rate and frames left out)

from streamer.config import WorkerConfig  # noqa: E402

#: Lateness beyond which a worker with the default ``[worker] backlog`` would have dropped a frame, ms.
DROP_MS = WorkerConfig.model_fields["backlog"].default * 1000 / FPS
#: One of ``--runs``: where the refits run and the niceness they get.
RUN = re.compile(r"(thread|process):(\d+)")


def child(run: str, frames: int, video: str) -> None:
    """Run the model paced with its refits as ``run`` says (``thread:N``, ``process:N``) and print one line."""
    match = RUN.fullmatch(run)
    assert match is not None  # checked by main
    where, niceness = match[1], int(match[2])
    from streamer.ops.memory import hold_freed_heap

    hold_freed_heap()  # as the worker does (streamer.ops.memory)
    import core.streaming.refit as refit

    refit.lower_thread_priority.__defaults__ = (niceness,)
    spans: list[tuple[float, float]] = []
    solve = refit.solve_window

    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = time.monotonic()
        try:
            return solve(*args, **kwargs)
        finally:
            spans.append((t, time.monotonic()))

    if where == "thread":
        refit.solve_window = timed  # type: ignore[assignment]
    else:  # each refit whole in one other process at that niceness; this thread waits for it
        pool = concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn"), initializer=os.nice, initargs=(niceness,)
        )
        pool.submit(exec, "import core.streaming.refit, core.solver.fused").result()  # its start, before the frames

        def run_in_pool(job, window, init, start, settings, still):  # type: ignore[no-untyped-def]
            t = time.monotonic()
            try:
                job.report = pool.submit(solve, window, init, start, settings, still=still).result()
            finally:
                spans.append((t, time.monotonic()))
                job.done.set()

        refit._Job.run = run_in_pool  # type: ignore[method-assign]
    from digest_masks import frames_of

    from core.streaming import kernels
    from core.streaming.background import KDRSDLBackgroundSubtractor

    images = list(frames_of(video, 10**6))
    kernels.start()
    while not kernels.ready():
        time.sleep(0.1)
    model = KDRSDLBackgroundSubtractor(async_refit=True)
    runs = []
    t0 = time.monotonic()
    for i in range(frames):
        due = t0 + i / FPS
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        start = time.monotonic()
        model.apply(images[i % len(images)])
        runs.append((due, start, time.monotonic()))
    if not spans:
        raise SystemExit(f"{run}: no refit finished in {frames} frames")
    late = np.array([(end - due) * 1e3 for due, _, end in runs[WARMUP:]])
    during = np.array([any(a < end and start < b for a, b in spans) for _, start, end in runs[WARMUP:]])

    def spread(sel: np.ndarray) -> str:
        return f"{np.percentile(late[sel], 99):.1f} / {late[sel].max():.1f}" if sel.any() else "none"

    seconds = np.mean([b - a for a, b in spans])
    print(
        f"refits on a {where} at nice +{niceness}: {len(spans)} refits, {seconds:.2f} s each (wall); frames late "
        f"by ms, p99 / largest: during a refit ({during.sum()} frames) {spread(during)}, the others "
        f"({(~during).sum()}) {spread(~during)}; more than {DROP_MS:.0f} ms late: {int((late > DROP_MS).sum())}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", default=["thread:10", "thread:0", "process:10"], help="thread:N or process:N")
    ap.add_argument("--hogs", type=int, default=3, help="busy loops at nice 0 beside the model")
    ap.add_argument("--frames", type=int, default=1500)
    ap.add_argument("--video", default=str(VIDEO))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        child(a.child, a.frames, a.video)
        return
    if bad := [run for run in a.runs if RUN.fullmatch(run) is None]:
        raise SystemExit(f"{', '.join(bad)}: a run is thread:N or process:N")
    if not pathlib.Path(a.video).exists():
        raise SystemExit(f"{a.video}: missing (../shared/data is not beside this checkout)")
    print(f"{a.video}: {a.frames} frames at {FPS:.0f} fps, {a.hogs} busy loops beside", flush=True)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.hogs)]
    try:
        for run in a.runs:
            cmd = [sys.executable, __file__, "--child", run, "--frames", str(a.frames), "--video", a.video]
            subprocess.run(cmd, check=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


if __name__ == "__main__":
    main()
