"""What a frame costs paced at 30 fps against back to back (issue 26): the model alone, by frame size.

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_paced.py [--sizes 40x30 160x120 320x240]
[--steps] [--before spin|memory|model] [--set KNOB=VALUE ...] [--versus KNOB=VALUE ...] [--kernels]
[--kernels-against FILE [--back-to-back]] [--video PATH] [--frames 750] [--batch N]``.

For each size, the motorway video (``../shared/data/video/motorway_320x240.avi``, 748 frames; or
``--video``, a video file or a CDnet sequence's directory, its first ``--frames`` frames)
resized to it goes through a :class:`KDRSDLBackgroundSubtractor` at its defaults with inline
refits, twice: back to back, then one frame every 1/30 s (the wait is a sleep, as a worker's
poll). Printed: the median and the mean CPU time of the frames' thread per frame, over the frames
after the 300th that installed no refit, milliseconds (the median is a frame without the steps
that run on some frames only, the ghost test's judgements every fourth frame among them). One
OpenCV thread. The difference between the two is what a frame costs for arriving at 30 fps: its
code and data are cold after the wait (docs/results.md, "Cameras per core"). The paced run's
mean is also given apart for each of :data:`CLASSES`: the frames that enter the window (every
eighth, judged by the ghost test too), the other frames whose blobs the ghost test judges (every
fourth) and the rest.

With ``--before spin|memory|model``, something runs after each paced wait and before the frame, to
tell what the wait costs the frame (docs/results.md, "Speed"): ``spin`` a 1 ms busy loop (the core
kept awake), ``memory`` a sum over 64 MB of other memory (the caches filled with other data),
``model`` a read of every cache line of the model's arrays (its data brought back, its code not).

With ``--batch N``, the paced run takes its frames N at a time, each group once its last frame is
due, with one wait per group: what a worker would save by waiting for N frames before it works.

With ``--versus KNOB=VALUE``, each size instead runs two models in one process, the second with
that knob changed (:func:`versus_ms`), their paced frames interleaved: what a choice costs a
30-fps frame, with the machine's state the same for both (separate runs of this script on this
shared machine differ by up to 0.3 ms a frame).

With ``--kernels``, each size first replays the compiled kernels' calls of one frame (recorded
with copies of their arguments, :func:`kernel_calls`) 300 times back to back and 300 times paced
at 30 fps (:func:`replay_ms`): what the kernels alone cost, without the interpreter between them.

With ``--kernels-against FILE`` (another version of ``core/streaming/kernels.py``, e.g. from
``git show REV:core/streaming/kernels.py``), the same recorded calls are replayed instead with
this checkout's kernels and with that file's, alternately, 400 rounds each, paced (or back to back
with ``--back-to-back``) (:func:`against_ms`): what a change inside the kernels costs or saves,
in one process.

With ``--steps``, the paced run also times the model's steps (:data:`STEPS`, each wrapped in a
timer of the thread's CPU time) and prints each one's median and mean per frame over the same
frames: where a 30-fps frame's time goes; then the sum of the frame's compiled kernel calls
(:data:`KERNELS`, every kernel wrapped so) and the rest of the frame (:data:`OUTSIDE`: the
interpreter, numpy and OpenCV), each also as its mean over each of :data:`CLASSES`. The timers
add a little to the frame's own figure.
"""

import argparse
import collections
import dataclasses
import importlib.util
import pathlib
import sys
import time
from collections.abc import Iterable
from typing import Any

import cv2
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.streaming import background, decision, ghosts, samples  # noqa: E402
from core.streaming.background import KDRSDLBackgroundSubtractor  # noqa: E402
from core.streaming.ghosts import GhostParams  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_ablation import value  # noqa: E402
from digest_masks import frames_of  # noqa: E402

from core.streaming import kernels  # noqa: E402

VIDEO = ROOT.parent / "shared" / "data" / "video" / "motorway_320x240.avi"
FPS = 30.0
WARMUP = 300
#: The model's steps that ``--steps`` times: a name, and the module or class whose attribute is the
#: step (a module's function as the model calls it: core.streaming.background imports it by name).
STEPS = {
    "prepare": (KDRSDLBackgroundSubtractor, "_prepare"),
    "light": (KDRSDLBackgroundSubtractor, "_absorb_light"),
    "frame background": (background, "frame_background"),
    "raw decision": (decision.PixelDecision, "raw"),
    "band": (decision.PixelDecision, "band"),
    "shadow": (decision.PixelDecision, "_uniform"),
    "shadow, compiled": (kernels, "uniform_shadow"),
    "consensus": (samples.SampleSet, "match"),
    "post-processing": (background, "postprocess_restored"),
    "specks": (background, "drop_specks"),
    "feedback": (decision.PixelDecision, "feedback"),
    "ghosts": (KDRSDLBackgroundSubtractor, "_absorb_ghosts"),
    "ghost blobs": (ghosts.GhostTracker, "_ghost_blobs"),
    "remnants": (ghosts.GhostTracker, "_remnant"),
    "learning": (KDRSDLBackgroundSubtractor, "_learn"),
    "samples' update": (samples.SampleSet, "update_outside"),
}


def read_gray(path: pathlib.Path, limit: int | None = None) -> list[np.ndarray]:
    """The frames of the video at ``path`` (a CDnet sequence's directory: its ``input/`` images,
    read as ``kdrsdl evaluate`` reads them), grayscale uint8, at most ``limit``
    (:func:`digest_masks.frames_of`)."""
    frames = list(frames_of(path, sys.maxsize if limit is None else limit))
    if not frames:
        raise SystemExit(f"no frames read from {path} (it lives in ../shared/data beside the repo)")
    return frames


def model_arrays(obj: object, seen: set[int] | None = None, depth: int = 0) -> list[np.ndarray]:
    """The arrays over 4 KiB that ``obj`` (the model) holds, through its attributes, containers and
    dataclasses within the project's own classes, each once."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 4:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [obj] if obj.nbytes > 4096 else []
    if isinstance(obj, dict):
        items: Iterable[object] = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif type(obj).__module__.startswith("core.") and hasattr(obj, "__dict__"):
        items = vars(obj).values()
    else:
        return []
    return [a for item in items for a in model_arrays(item, seen, depth + 1)]


#: ``--steps``' two sums over a frame: its compiled kernels' calls (all of them, in whichever
#: step), and the rest of the frame (the interpreter, numpy and OpenCV between and around them).
KERNELS = "compiled kernels"
OUTSIDE = "outside them"
#: The kinds of frame whose means are given apart: a window entry (every eighth frame, whose blobs
#: the ghost test judges too), a frame the ghost test judges (every fourth), the others.
CLASSES = ("window entry", "ghost-judged", "plain")


def before_frame(kind: str | None, model: KDRSDLBackgroundSubtractor, other: np.ndarray) -> None:
    """``--before``: what runs between a paced wait and the frame (see the module's docstring)."""
    if kind == "spin":
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
    elif kind == "memory":
        other.sum()
    elif kind == "model":
        for a in model_arrays(model):
            if a.flags.c_contiguous:
                a.reshape(-1).view(np.uint8)[::64].sum()  # one byte of each 64-byte cache line


def frame_ms(
    frames: list[np.ndarray],
    paced: bool,
    steps: dict[str, list[float]] | None = None,
    knobs=None,
    before: str | None = None,
    classes: list[str] | None = None,
    batch: int = 1,
) -> tuple[float, float, dict[str, float]]:
    """The median and the mean CPU time of the frames' thread per frame, ms (frames after the
    warm-up, no refit), and the mean over each of :data:`CLASSES`. The mean counts the steps that
    run on some frames only (the ghost test's judgements every fourth frame, a window entry every
    eighth), which the median leaves out.

    ``steps``: filled with each of :data:`STEPS`' CPU time per counted frame, seconds (the steps are
    timed only when it is given); ``classes``: filled with each counted frame's class.
    ``before``: :func:`before_frame`'s kind, after each paced wait. ``batch``: paced frames are
    taken ``batch`` at a time, once the last of them is due (one wait for each ``batch`` frames).
    """
    model = KDRSDLBackgroundSubtractor(**(knobs or {}))
    spent: collections.Counter[str] = collections.Counter()
    originals = {name: getattr(owner, attr) for name, (owner, attr) in STEPS.items()}
    compiled = {n: getattr(kernels, n) for n in dir(kernels) if hasattr(getattr(kernels, n), "py_func")}
    if steps is not None:
        for n, kernel in compiled.items():  # every compiled call, whichever step makes it
            setattr(kernels, n, timed(kernel, KERNELS, spent))
        for name, (owner, attr) in STEPS.items():  # a step that is a kernel: around its timer
            setattr(owner, attr, timed(getattr(owner, attr), name, spent))
    times, kinds = [], []
    other = np.ones(64 << 20, np.uint8) if before == "memory" else np.zeros(0, np.uint8)
    try:
        t0 = time.perf_counter()
        for i, frame in enumerate(frames):
            if paced:
                due = (i // batch) * batch + batch - 1
                while (wait := t0 + due / FPS - time.perf_counter()) > 0:
                    time.sleep(wait)
                before_frame(before, model, other)
            spent.clear()
            entry, judged = model._window.enters_next(), model.n_frames % GhostParams.period == 0
            c = time.thread_time()
            result = model.process(frame)
            dt = time.thread_time() - c
            if i > WARMUP and result.refit is None:
                times.append(dt)
                kinds.append(CLASSES[0] if entry else CLASSES[1] if judged else CLASSES[2])
                if steps is not None:
                    for name in (*STEPS, KERNELS):
                        steps.setdefault(name, []).append(spent[name])
                    steps.setdefault(OUTSIDE, []).append(dt - spent[KERNELS])
    finally:
        for name, (owner, attr) in STEPS.items():
            setattr(owner, attr, originals[name])
        for n, kernel in compiled.items():
            setattr(kernels, n, kernel)
    if classes is not None:
        classes.extend(kinds)
    ms, kind = 1e3 * np.array(times), np.array(kinds)
    means = {k: float(ms[kind == k].mean()) for k in CLASSES if (kind == k).any()}
    return float(np.median(ms)), float(ms.mean()), means


def versus_ms(frames: list[np.ndarray], knobs: dict, changed: dict) -> tuple[tuple[float, float], tuple[float, float]]:
    """``--versus``: two models in this process, one at ``knobs`` and one with ``changed`` on top,
    fed the same frames paced at 30 fps each, their frames interleaved half a period apart (the
    first of each pair alternating): the same machine state for both. Returns each one's median
    and mean CPU time of the frames' thread per frame, ms, over the frames after the warm-up that
    installed no refit in either."""
    models = (KDRSDLBackgroundSubtractor(**knobs), KDRSDLBackgroundSubtractor(**{**knobs, **changed}))
    times: tuple[list[float], list[float]] = ([], [])
    t0 = time.perf_counter()
    for i, frame in enumerate(frames):
        spent, quiet = [0.0, 0.0], True
        for k, j in enumerate((i % 2, 1 - i % 2)):
            while (wait := t0 + (i + k / 2) / FPS - time.perf_counter()) > 0:
                time.sleep(wait)
            c = time.thread_time()
            quiet &= models[j].process(frame).refit is None
            spent[j] = time.thread_time() - c
        if i > WARMUP and quiet:
            for j in (0, 1):
                times[j].append(1e3 * spent[j])
    a, b = (np.array(t) for t in times)
    return (float(np.median(a)), float(a.mean())), (float(np.median(b)), float(b.mean()))


def kernel_calls(frames: list[np.ndarray], knobs: dict) -> list[tuple[str, Any, list]]:
    """``--kernels``: the compiled kernels' calls of one frame, with copies of their arguments: a
    model at ``knobs`` fed ``frames`` back to back until its frame at index ``WARMUP + 1``, whose
    calls are recorded (a frame the ghost test judges when that index is a multiple of its period)."""
    model = KDRSDLBackgroundSubtractor(**knobs)
    for frame in frames[: WARMUP + 1]:
        model.process(frame)
    names = [n for n in dir(kernels) if hasattr(getattr(kernels, n), "py_func")]
    originals = {n: getattr(kernels, n) for n in names}
    calls: list[tuple[str, Any, list]] = []

    def recorder(name):
        def call(*args):
            calls.append((name, originals[name], [a.copy() if isinstance(a, np.ndarray) else a for a in args]))
            return originals[name](*args)

        return call

    try:
        for n in names:
            setattr(kernels, n, recorder(n))
        model.process(frames[WARMUP + 1])
    finally:
        for n in names:
            setattr(kernels, n, originals[n])
    return calls


def replay_ms(calls: list[tuple[str, Any, list]], paced: bool, rounds: int = 300) -> dict[str, float]:
    """The median CPU time of each recorded kernel call over ``rounds`` replays of the frame's
    calls in order, and of the whole replay (``"all"``), ms; each replay after a wait of 1/30 s
    when ``paced``."""
    spent: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(rounds):
        replay_once(calls, paced, spent)
    return {name: 1e3 * float(np.median(t)) for name, t in spent.items()}


def replay_once(calls: list[tuple[str, Any, list]], paced: bool, spent: dict[str, list[float]]) -> None:
    """Replay the recorded calls once, in order, after a wait of 1/30 s when ``paced``: each
    call's CPU time (s) appended to ``spent["k name"]``, the whole replay's to ``spent["all"]``."""
    if paced:
        time.sleep(1 / FPS)
    start = time.thread_time()
    for k, (name, kernel, args) in enumerate(calls):
        c = time.thread_time()
        kernel(*args)
        spent[f"{k:2d} {name}"].append(time.thread_time() - c)
    spent["all"].append(time.thread_time() - start)


def load_kernels(path: pathlib.Path) -> object:
    """Another version of the kernels' module, from ``path``, as module ``kernels_against`` (its
    compiled code cached by numba as this checkout's is)."""
    spec = importlib.util.spec_from_file_location("kernels_against", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernels_against"] = module  # numba's cache finds a function's module by name
    spec.loader.exec_module(module)
    return module


def against_ms(
    calls: list[tuple[str, Any, list]], other: object, paced: bool, rounds: int = 400
) -> dict[str, tuple[float, float]]:
    """The median CPU time of each recorded call and of the whole replay (``"all"``), ms, with this
    checkout's kernels and with ``other``'s same-named ones: (this, other). The two replays
    alternate, their order swapped every round, each after a wait of 1/30 s when ``paced``."""
    theirs = [(name, getattr(other, name), args) for name, _, args in calls]
    for _, kernel, args in theirs:  # compiled (or loaded) before anything is timed
        kernel(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    spent: dict[str, dict[str, list[float]]] = {
        "this": collections.defaultdict(list),
        "other": collections.defaultdict(list),
    }
    for r in range(rounds):
        order = (("this", calls), ("other", theirs))
        for tag, replay in order if r % 2 == 0 else order[::-1]:
            replay_once(replay, paced, spent[tag])
    return {
        name: (1e3 * float(np.median(spent["this"][name])), 1e3 * float(np.median(spent["other"][name])))
        for name in spent["this"]
    }


def timed(step, name: str, spent: collections.Counter):
    """``step`` adding its thread CPU time to ``spent[name]`` at each call."""

    def run(*args, **kwargs):
        c = time.thread_time()
        try:
            return step(*args, **kwargs)
        finally:
            spent[name] += time.thread_time() - c

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["40x30", "160x120", "320x240"])
    ap.add_argument("--steps", action="store_true", help="also time the model's steps in the paced run")
    ap.add_argument(
        "--batch", type=int, default=1, help="paced frames taken this many at a time after one wait (default 1)"
    )
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="one of the model's knobs")
    ap.add_argument("--video", default=str(VIDEO), help="a video file or a CDnet sequence's directory")
    ap.add_argument("--frames", type=int, default=750, help="at most this many of its frames (default %(default)s)")
    ap.add_argument(
        "--before", choices=["spin", "memory", "model"], help="run this after each paced wait, before the frame"
    )
    ap.add_argument(
        "--versus",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="time a second model with this knob changed beside the first, in the same process",
    )
    ap.add_argument(
        "--kernels", action="store_true", help="replay one frame's compiled kernel calls, paced and back to back"
    )
    ap.add_argument("--kernels-against", metavar="FILE", help="replay them with this kernels.py too, alternately")
    ap.add_argument("--back-to-back", action="store_true", help="with --kernels-against: no wait between replays")
    args = ap.parse_args()
    kernels.warm()  # compiled into numba's cache before anything is timed: workers load them
    knobs = {k: value(v) for k, v in (s.split("=", 1) for s in args.set)}
    cv2.setNumThreads(1)
    video = read_gray(pathlib.Path(args.video), args.frames)
    for size in args.sizes:
        w, h = (int(v) for v in size.split("x"))
        frames = [cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in video]
        if args.kernels_against:
            other = load_kernels(pathlib.Path(args.kernels_against))
            both = against_ms(kernel_calls(frames, knobs), other, not args.back_to_back)
            how = "back to back" if args.back_to_back else "paced at 30 fps"
            print(
                f"{size}: frame {WARMUP + 1}'s kernel calls replayed {how}, ms (median): "
                f"this checkout / {args.kernels_against}"
            )
            for name, (a, b) in both.items():
                print(f"  {name:22s} {a:.3f} / {b:.3f}  ({b - a:+.3f})")
            continue
        if args.kernels:
            calls = kernel_calls(frames, knobs)
            tight_k, paced_k = replay_ms(calls, False), replay_ms(calls, True)
            print(f"{size}: frame {WARMUP + 1}'s {len(calls)} kernel calls replayed, ms (median back to back / paced):")
            for name in tight_k:
                print(f"  {name:22s} {tight_k[name]:.3f} / {paced_k[name]:.3f}")
        if args.versus:
            changed = {k: value(v) for k, v in (s.split("=", 1) for s in args.versus)}
            (a, a_mean), (b, b_mean) = versus_ms(frames, knobs, changed)
            print(
                f"{size}, paced at 30 fps, interleaved: {a:.3f} ms a frame (mean {a_mean:.3f}); with "
                f"{' '.join(args.versus)} {b:.3f} (mean {b_mean:.3f}): {b - a:+.3f} ({b_mean - a_mean:+.3f})",
                flush=True,
            )
            continue
        steps: dict[str, list[float]] | None = {} if args.steps else None
        kinds: list[str] = []
        tight, tight_mean, _ = frame_ms(frames, False, knobs=knobs)
        paced, paced_mean, means = frame_ms(frames, True, steps, knobs, args.before, kinds, args.batch)
        print(
            f"{size}: back to back {tight:.2f} ms a frame (mean {tight_mean:.2f}), paced at 30 fps "
            f"{paced:.2f} ms (mean {paced_mean:.2f}; " + ", ".join(f"{k} {v:.2f}" for k, v in means.items()) + ")",
            flush=True,
        )
        kind = np.array(kinds)
        for name, seconds in (steps or {}).items():
            ms = 1e3 * np.asarray(seconds)
            apart = ", ".join(f"{k} {float(ms[kind == k].mean()):.3f}" for k in means)
            median, mean = float(np.median(ms)), float(ms.mean())
            print(f"  {name:16s} {median:.3f} ms a paced frame (median), {mean:.3f} (mean; {apart})")


if __name__ == "__main__":
    main()
