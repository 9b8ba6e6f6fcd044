"""How late a frame comes out while its own worker's refit runs, with the cores busy (issue 46).

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_refit_priority.py [--runs thread:10 thread:0
process:10 spin:10:50] [--hogs 3] [--frames 1500] [--video PATH] [--spin-cpu 0.15]``.

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
its nice value (the worker's way, N = 10). ``process:N``: the refits in a child process at nice +N
(``refit_process``, :class:`core.streaming.refit_process.ProcessRefitter`), a refit's span from
the window's send to the report's arrival.
``spin:N:MS``: no refits after the window's warm-up; instead a thread at nice +N burns a warm
refit's CPU (``--spin-cpu``, seconds), then sleeps ``refit_interval`` frames' time, in compiled calls of MS
ms each that hold no GIL (numba, ``nogil``), taking the GIL back only between two calls: how late
the frames come out as a function of how often a starved thread of their process takes the GIL.

Printed, over the frames after the 300th: how late each frame's mask is (from when the frame was
due to the end of its ``apply``, ms), p99 and largest, apart for the frames that ran while a refit
ran and for the others; the frames more than 67 ms late (two frames at 30 fps: what the worker's
default ``backlog`` of 2 holds before it drops one); and the refits' count and mean wall time.
"""

import argparse
import pathlib
import re
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_paced import FPS, VIDEO, WARMUP  # noqa: E402  (the same video, rate and frames left out)

from core.streaming.params import BackgroundParams  # noqa: E402
from streamer.config import WorkerConfig  # noqa: E402

#: Lateness beyond which a worker with the default ``[worker] backlog`` would have dropped a frame, ms.
DROP_MS = WorkerConfig.model_fields["backlog"].default * 1000 / FPS
#: One of ``--runs``: where the refits run and the niceness they get (and a spinner's call, ms).
RUN = re.compile(r"(thread|process):(\d+)|spin:(\d+):(\d+)")


def spinner(niceness: int, call_ms: int, cpu: float, period: float, spans: list, stop: threading.Event) -> None:
    """Burn ``cpu`` s of this thread's CPU at nice +``niceness`` in nogil calls of ``call_ms`` ms, then
    sleep ``period`` s, until ``stop``; each burst's wall span goes to ``spans``."""
    from numba import njit

    from core.streaming.refit import lower_thread_priority

    @njit(nogil=True)
    def burn(n: int) -> float:  # pragma: no cover - compiled
        s = 0.0
        for i in range(n):
            s += np.sqrt(np.float64(i))
        return s

    burn(1000)
    c = time.thread_time()
    burn(10**7)
    n = max(1, int(call_ms * 1e-3 * 10**7 / (time.thread_time() - c)))  # iterations of one call
    lower_thread_priority(niceness)
    while not stop.wait(period):
        t, c = time.monotonic(), time.thread_time()
        while time.thread_time() - c < cpu:
            burn(n)
        spans.append((t, time.monotonic()))


def child(run: str, frames: int, video: str, spin_cpu: float) -> None:
    """Run the model paced with its refits as ``run`` says (``thread:N``, ``process:N``, ``spin:N:MS``) and
    print one line."""
    match = RUN.fullmatch(run)
    assert match is not None  # checked by main
    where, niceness = (match[1], int(match[2])) if match[1] else ("spin", int(match[3]))
    noun = "burst" if where == "spin" else "refit"
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
    elif where == "process":  # the worker's refit_process: each refit in its child at that niceness
        import core.streaming.refit_process as refit_process

        refit_process.ProcessRefitter.__init__.__defaults__ = (niceness, False)  # compiled: passed by the model
        send, recv = refit_process.send_message, refit_process.recv_message
        sent: list[float] = []

        def timed_send(*args, **kwargs):  # type: ignore[no-untyped-def]
            sent.append(time.monotonic())
            return send(*args, **kwargs)

        def timed_recv(*args, **kwargs):  # type: ignore[no-untyped-def]
            try:
                return recv(*args, **kwargs)
            finally:
                spans.append((sent.pop(), time.monotonic()))

        refit_process.send_message, refit_process.recv_message = timed_send, timed_recv  # type: ignore[assignment]
    from digest_masks import frames_of

    from core.streaming import kernels
    from core.streaming.background import KDRSDLBackgroundSubtractor

    images = list(frames_of(video, 10**6))
    kernels.start()
    while not kernels.ready():
        time.sleep(0.1)
    stop = threading.Event()
    if where == "spin":  # the window's refits while it fills, then none: the spinner stands in
        every = BackgroundParams().refit_interval
        model = KDRSDLBackgroundSubtractor(async_refit=True, refit_interval=10**6)
        args = (niceness, int(match[4]), spin_cpu, every / FPS, spans, stop)
        threading.Thread(target=spinner, args=args, daemon=True).start()
    else:
        model = KDRSDLBackgroundSubtractor(async_refit=True, refit_process=where == "process")
    runs = []
    t0 = time.monotonic()
    for i in range(frames):
        due = t0 + i / FPS
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        start = time.monotonic()
        model.apply(images[i % len(images)])
        runs.append((due, start, time.monotonic()))
    stop.set()
    if not spans:
        raise SystemExit(f"{run}: no {noun} finished in {frames} frames")
    late = np.array([(end - due) * 1e3 for due, _, end in runs[WARMUP:]])
    during = np.array([any(a < end and start < b for a, b in spans) for _, start, end in runs[WARMUP:]])

    def spread(sel: np.ndarray) -> str:
        return f"{np.percentile(late[sel], 99):.1f} / {late[sel].max():.1f}" if sel.any() else "none"

    seconds = np.mean([b - a for a, b in spans])
    what = f"{spin_cpu:.2f} s bursts of {match[4]} ms nogil calls" if where == "spin" else f"refits on a {where}"
    print(
        f"{what} at nice +{niceness}: {len(spans)} {noun}s, {seconds:.2f} s each (wall); frames late "
        f"by ms, p99 / largest: during a {noun} ({during.sum()} frames) {spread(during)}, the others "
        f"({(~during).sum()}) {spread(~during)}; more than {DROP_MS:.0f} ms late: {int((late > DROP_MS).sum())}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", default=["thread:10", "thread:0", "process:10"], help="thread:N or process:N")
    ap.add_argument("--hogs", type=int, default=3, help="busy loops at nice 0 beside the model")
    ap.add_argument("--frames", type=int, default=1500)
    ap.add_argument("--video", default=str(VIDEO))
    ap.add_argument("--spin-cpu", type=float, default=0.15, help="CPU seconds of a spin:N:MS burst (a warm refit's)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        child(a.child, a.frames, a.video, a.spin_cpu)
        return
    if bad := [run for run in a.runs if RUN.fullmatch(run) is None]:
        raise SystemExit(f"{', '.join(bad)}: a run is thread:N, process:N or spin:N:MS")
    if not pathlib.Path(a.video).exists():
        raise SystemExit(f"{a.video}: missing (../shared/data is not beside this checkout)")
    print(f"{a.video}: {a.frames} frames at {FPS:.0f} fps, {a.hogs} busy loops beside", flush=True)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.hogs)]
    try:
        for run in a.runs:
            cmd = [sys.executable, __file__, "--child", run, "--frames", str(a.frames), "--video", a.video]
            cmd += ["--spin-cpu", str(a.spin_cpu)]
            subprocess.run(cmd, check=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


if __name__ == "__main__":
    main()
