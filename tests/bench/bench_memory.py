"""Where a compiled model's resident memory goes, step by step (issue 44's RSS target).

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_memory.py [--frames 1500] [--held | --trim]``.

One process, as a worker's model: its imports (numpy, OpenCV, SciPy and the model's modules),
numba's import, the kernels' module, the kernels loaded from numba's cache (:func:`core.streaming.
kernels.warm`; the first run on an empty cache compiles them, 15-20 s), the pages read from the
libraries released as the worker releases them once its kernels run (the compiler's among them:
:func:`streamer.ops.memory.release_file_pages`), then a
:class:`KDRSDLBackgroundSubtractor` at its defaults fed the motorway video
(``../shared/data/video/motorway_320x240.avi``, 320 x 240, read frame by frame and looped) for
``--frames`` frames, its refits on their thread, waited for every 50 frames. Printed: the resident
memory (``VmRSS``) after each step, what the step added, and its anonymous and file-backed parts
(``RssAnon``, ``RssFile``: the libraries' pages), MiB, and at the end the peak
(``VmHWM``): the refits' temporaries at their largest. ``--held`` first sets glibc's allocator as
the worker does (:func:`streamer.ops.memory.hold_freed_heap`), which keeps a refit's freed
temporaries resident for the next one; ``--trim`` instead returns the free heap to the system
after each refit (glibc's ``malloc_trim``), which shows what the model's state alone holds.
"""

import argparse
import ctypes
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
VIDEO = ROOT.parent / "shared" / "data" / "video" / "motorway_320x240.avi"


def status() -> dict[str, int]:
    """``VmRSS``, ``VmHWM``, ``RssAnon`` and ``RssFile`` of this process, MiB."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: int(fields[k].split()[0]) // 1024 for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1500, help="frames fed to the model (default %(default)s)")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--held", action="store_true", help="hold the freed heap as the worker does")
    how.add_argument("--trim", action="store_true", help="return the free heap after each refit")
    args = ap.parse_args()
    if not VIDEO.exists():
        raise SystemExit(f"{VIDEO} is missing (it lives in ../shared/data beside the repo)")
    if args.held:
        from streamer.ops.memory import hold_freed_heap

        hold_freed_heap()
    last = 0

    def step(name: str) -> None:
        nonlocal last
        now = status()
        rss = now["VmRSS"]
        parts = f"anonymous {now['RssAnon']}, files {now['RssFile']}"
        print(f"{name:40s} {rss:5d} MiB ({rss - last:+4d}; {parts})", flush=True)
        last = rss

    import cv2

    from core.streaming.background import KDRSDLBackgroundSubtractor

    step("the model's imports")
    import numba  # noqa: F401

    step("numba's import")
    from core.streaming import kernels

    step("the kernels' module")
    kernels.warm()
    step("the kernels loaded")
    from streamer.ops.memory import release_file_pages

    release_file_pages()  # as the worker does once they run
    step("the libraries' pages released")
    model = KDRSDLBackgroundSubtractor()
    cap = cv2.VideoCapture(str(VIDEO))
    for t in range(args.frames):
        ok, frame = cap.read()
        if not ok:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, frame = cap.read()
        model.apply(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY))
        if t % 50 == 0:
            model.wait_refit(10)
            if args.trim:
                ctypes.CDLL(None).malloc_trim(0)
    model.wait_refit(10)
    step(f"the model after {args.frames} frames")
    print(f"{'peak (the refits at their largest)':40s} {status()['VmHWM']:5d} MiB")


if __name__ == "__main__":
    main()
