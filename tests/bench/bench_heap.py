"""A warm refit on a thread of its own, with glibc's default heap and with the worker's held heap.

Run: ``python tests/bench/bench_heap.py [--refits 6]``.

The motorway video (``../shared/data/video/motorway_320x240.avi``) goes through a
:class:`KDRSDLBackgroundSubtractor` at its defaults for 700 frames (inline refits), and its last
window is then refitted warm ``--refits`` times, each on a new thread as the worker's refit thread
runs it. This happens in two child processes: one with glibc's defaults, one after
:func:`streamer.ops.memory.hold_freed_heap`, as the worker calls it. Printed, for each refit: the
thread's user and system CPU (seconds) and its minor page faults. By default each refit's thread
gets heaps of its own and faults its temporaries in afresh; held, it reuses the main heap that the
inline refits before it left (docs/results.md, "Cameras per core").
"""

import argparse
import pathlib
import resource
import subprocess
import sys
import threading

ROOT = pathlib.Path(__file__).resolve().parents[2]
VIDEO = ROOT.parent / "shared" / "data" / "video" / "motorway_320x240.avi"


def child(mode: str, refits: int) -> None:
    """Run in a child process: ``mode`` is ``default`` or ``held``."""
    sys.path.insert(0, str(ROOT))
    from streamer.ops.memory import hold_freed_heap

    if mode == "held" and not hold_freed_heap():
        raise SystemExit("glibc's mallopt is missing or refused a setting")
    import cv2
    from threadpoolctl import threadpool_limits

    from core.streaming import refit
    from core.streaming.background import KDRSDLBackgroundSubtractor

    cv2.setNumThreads(1)
    threadpool_limits(1)
    model = KDRSDLBackgroundSubtractor()
    cap = cv2.VideoCapture(str(VIDEO))
    for _ in range(700):
        ok, frame = cap.read()
        if not ok:
            break
        model.process(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY))
    window = model._window
    X = window.stack()
    settings = refit.RefitSettings.from_knobs(model.params, model._lam)

    def one() -> None:
        before = resource.getrusage(resource.RUSAGE_THREAD)
        refit.solve_window(X, model.state, window.start, settings)
        after = resource.getrusage(resource.RUSAGE_THREAD)
        print(
            f"{mode:>7}: user {after.ru_utime - before.ru_utime:.3f} s, system "
            f"{after.ru_stime - before.ru_stime:.3f} s, {after.ru_minflt - before.ru_minflt} page faults",
            flush=True,
        )

    for _ in range(refits):
        thread = threading.Thread(target=one)
        thread.start()
        thread.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refits", type=int, default=6)
    ap.add_argument("--child", choices=("default", "held"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.refits)
        return
    if not VIDEO.exists():
        raise SystemExit(f"{VIDEO} is missing (it lives in ../shared/data beside the repo)")
    for mode in ("default", "held"):
        subprocess.run([sys.executable, __file__, "--child", mode, "--refits", str(args.refits)], check=True)


if __name__ == "__main__":
    main()
