"""Changes of light on real sequences: how much false foreground, and for how long, per method.

    OPENBLAS_NUM_THREADS=1 python tests/bench/bench_light.py [SEQUENCE ...] [--methods a,b] [--json PATH]

SEQUENCE defaults to the baseline sequences in ../shared/data/cdnet2014 (highway, office,
pedestrians). Each is processed from frame 1 as CDnet's protocol does. Its frames are changed,
from 100 frames into the annotated range (T), by three synthetic changes of light, each applied
to the 8-bit frame as ``clip(gain * frame)``:

- ``dim``: a sudden dim to 60% at T, held for 150 frames;
- ``brighten``: a sudden return to 100% at T + 150, held for 150 frames;
- ``dusk``: a slow ramp from T + 300, 1% a frame (gain 0.99^k) for 50 frames, then held.

For every method, in the same run (ours at its defaults, MOG2, KNN, SuBSENSE where pybgs is
installed): the false-foreground fraction of each frame (pixels the ground truth calls
background, 0 or 50, that the mask calls foreground, over the frame's scored pixels), its peak
after each change, and the frames until it stays under 2% (for 10 frames in a row). The issue's
targets (issue 23): under 2% within 5 frames of a sudden change, and no frame of the ramp over 2%.
"""

import argparse
import json
import pathlib
import sys

import numpy as np
from tqdm import tqdm

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from core.evaluation.metrics import cdnet_labels  # noqa: E402
from streamer.evaluation import peers  # noqa: E402
from streamer.evaluation.cdnet import Sequence  # noqa: E402
from streamer.evaluation.protocols import scored_labels  # noqa: E402

CDNET = ROOT.parent / "shared" / "data" / "cdnet2014"
SEQUENCES = ("baseline/highway", "baseline/office", "baseline/pedestrians")
METHODS = ("kdrsdl-stream", "mog2", "knn", "subsense")
#: Share of the frame's scored pixels above which false foreground counts as a false alarm.
LIMIT = 0.02
#: Frames in a row under LIMIT that count as settled.
SETTLED = 10
#: Frames from the start of the annotated range to the first change.
LEAD = 100
#: Frames each sudden change is held.
HOLD = 150
#: The dusk ramp: frames, and the gain factor per frame.
RAMP, RAMP_STEP = 50, 0.99


def gains(n: int, t0: int) -> tuple[np.ndarray, dict[str, tuple[int, int]]]:
    """The gain of each of ``n`` frames (0-based) with the changes starting at ``t0``, and each
    change's span of frames ``[start, end)``."""
    g = np.ones(n)
    spans = {
        "dim": (t0, t0 + HOLD),
        "brighten": (t0 + HOLD, t0 + 2 * HOLD),
        "dusk": (t0 + 2 * HOLD, t0 + 3 * HOLD),
    }
    g[t0 : t0 + HOLD] = 0.6
    ramp = t0 + 2 * HOLD
    g[ramp : ramp + RAMP] = RAMP_STEP ** np.arange(1, RAMP + 1)
    g[ramp + RAMP :] = RAMP_STEP**RAMP
    return g[:n], spans


def false_fraction(mask: np.ndarray, labels: np.ndarray) -> float:
    """Pixels labelled background that the mask calls foreground, over the scored pixels."""
    valid, positive = cdnet_labels(labels)
    return float(np.count_nonzero(mask & valid & ~positive)) / max(int(np.count_nonzero(valid)), 1)


def settle(frac: np.ndarray) -> int | None:
    """Frames from the start until ``frac`` stays under LIMIT for SETTLED frames; None if never."""
    under = frac < LIMIT
    for k in range(len(frac) - SETTLED + 1):
        if under[k : k + SETTLED].all():
            return k
    return None


def run(seq: Sequence, methods: list[str]) -> dict:
    scored = seq.scored_frames()
    t0 = scored[0] - seq.first_input + LEAD  # 0-based index of the first change
    n = min(t0 + 3 * HOLD, scored[-1] - seq.first_input + 1)
    X = seq.frames(seq.first_input, seq.first_input + n - 1)
    numbers = [seq.first_input + t for t in range(n) if seq.first_input + t in set(scored)]
    G = dict(zip(numbers, scored_labels(seq, numbers, X.shape[1:]), strict=True))
    g, spans = gains(n, t0)
    X = np.clip(np.rint(X * g[:, None, None]), 0, 255).astype(np.uint8)
    out: dict = {"frames": n, "first_change": seq.first_input + t0, "methods": {}}
    for m in methods:
        sub = peers.create(m)
        frac = np.full(n, np.nan)
        for t in tqdm(range(n), desc=f"{seq.name} {m}", leave=False):
            mask, _ = sub.apply(X[t])
            labels = G.get(seq.first_input + t)
            if labels is not None:
                frac[t] = false_fraction(mask, labels)
        res = {}
        for name, (a, b) in spans.items():
            f = frac[a:b]
            res[name] = {"peak": float(np.nanmax(f)), "frames_to_settle": settle(np.nan_to_num(f, nan=0.0))}
            if name == "dusk":
                res[name]["ramp_peak"] = float(np.nanmax(frac[a : a + RAMP]))
                res[name]["ramp_frames_over"] = int(np.sum(frac[a : a + RAMP] >= LIMIT))
        res["before"] = float(np.nanmax(frac[t0 - 50 : t0]))
        out["methods"][m] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sequences", nargs="*", help=f"sequence directories (default: {', '.join(SEQUENCES)})")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--json", help="write every figure as JSON")
    args = ap.parse_args()
    dirs = args.sequences or [str(CDNET / s) for s in SEQUENCES]
    methods = [m for m in args.methods.split(",") if peers.availability(m) is None]
    results = {}
    for d in dirs:
        seq = Sequence.open(d)
        results[seq.name] = run(seq, methods)
    print("| sequence | change | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for name, r in results.items():
        for change in ("dim", "brighten", "dusk"):
            cells = []
            for m in methods:
                e = r["methods"][m][change]
                s = e["frames_to_settle"]
                cell = f"{e['peak']:.3f} / {'never' if s is None else s}"
                if change == "dusk":
                    cell += f" (ramp peak {e['ramp_peak']:.3f})"
                cells.append(cell)
            print(f"| {name} | {change} | " + " | ".join(cells) + " |")
    print(f"\npeak false-foreground fraction / frames until it stays under {LIMIT:.0%} ({SETTLED} frames in a row)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
