"""Where each method's errors lie under CDnet's protocol: false positives by their distance from the
labelled objects, misses by their depth inside them.

    python tests/bench/bench_errors.py [ROOT] [--methods kdrsdl-stream,subsense] [--set KNOB=VALUE ...]
                                       [--jobs N] [--json PATH]

ROOT defaults to ../shared/data/cdnet2014. Each method is fed every frame from frame 1 as
``kdrsdl evaluate`` feeds it and scored on the temporalROI frames with ground truth (ROI
applied). A false positive (flagged, labelled 0 or 50) is counted by its Euclidean distance in
input pixels to the nearest pixel labelled motion (255): 1 px is the object's own outline, a few
pixels a halo, a closing's bridge or a shadow, 16 or more a detection of its own (a ghost,
leaves, a reflection). Most sequences label a band around each object unknown (170, not
scored), so their nearest scored false positives lie a few pixels out. A miss (labelled 255,
not flagged) is counted by its distance to the nearest pixel not labelled motion: 1-3 px the
rim, deeper a hole (camouflage, or an object learnt into the background). The bins are the
shares of each sequence's false positives and misses; "FP on shadow" is the share of the false
positives on pixels labelled hard shadow (50). ``--set`` changes kdrsdl-stream's knobs (as
bench_ablation.py's).
"""

import argparse
import json
import pathlib
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_ablation import value  # noqa: E402

from core.evaluation.metrics import GT_MOTION, GT_SHADOW, cdnet_labels  # noqa: E402
from core.streaming.params import BackgroundParams  # noqa: E402
from streamer.evaluation import peers  # noqa: E402
from streamer.evaluation.cdnet import find_sequences  # noqa: E402
from streamer.evaluation.protocols import scored_labels  # noqa: E402

#: Upper edges (pixels, inclusive) of the distance bins; the last bin is everything beyond.
BINS = (1, 3, 7, 15)
LABELS = ("1 px", "2-3 px", "4-7 px", "8-15 px", "16+ px")


def binned(d: np.ndarray) -> np.ndarray:
    """Counts of the distances ``d`` (pixels) in :data:`BINS`' bins, int64 (len(BINS) + 1,)."""
    return np.bincount(np.searchsorted(BINS, np.ceil(d - 1e-3), side="left"), minlength=len(BINS) + 1)


def run_one(root: str, seq_name: str, method: str, knobs: dict) -> dict:
    """One method on one sequence: counts of its false positives and misses by distance."""
    import cv2

    cv2.setNumThreads(1)
    seq = next(q for q in find_sequences(root) if q.name == seq_name)
    scored = seq.scored_frames()
    X = seq.frames(seq.first_input, scored[-1])
    G = scored_labels(seq, scored, X.shape[1:])
    model = BackgroundParams(**knobs) if method == "kdrsdl-stream" else None
    sub = peers.create(method, model)
    row = {i: k for k, i in enumerate(scored)}
    fp_bins = np.zeros(len(BINS) + 1, np.int64)
    fn_bins = np.zeros(len(BINS) + 1, np.int64)
    fp_shadow = tp = 0
    for t, frame in enumerate(X):
        mask, _ = sub.apply(frame)
        k = row.get(seq.first_input + t)
        if k is None:
            continue
        g = G[k]
        valid, pos = cdnet_labels(g)
        fp = mask & ~pos & valid
        fn = ~mask & pos & valid
        tp += int(np.count_nonzero(mask & pos & valid))
        if fp.any():
            # distance of each pixel to the nearest motion pixel (distanceTransform: to the nearest 0)
            d = cv2.distanceTransform((g != GT_MOTION).view(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
            fp_bins += binned(d[fp])
            fp_shadow += int(np.count_nonzero(fp & (g == GT_SHADOW)))
        if fn.any():
            d = cv2.distanceTransform(pos.view(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
            fn_bins += binned(d[fn])
    return {"fp": fp_bins.tolist(), "fn": fn_bins.tolist(), "fp_shadow": fp_shadow, "tp": tp}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "root", nargs="?", default=str(pathlib.Path(__file__).resolve().parents[3] / "shared/data/cdnet2014")
    )
    ap.add_argument("--methods", default="kdrsdl-stream", help="comma-separated (default %(default)s)")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="change a kdrsdl-stream knob")
    ap.add_argument("--jobs", type=int, default=1, help="processes at once (default %(default)s)")
    ap.add_argument("--json", help="write the counts as JSON")
    args = ap.parse_args()
    knobs = {k: value(v) for k, v in (s.split("=", 1) for s in args.set)}
    BackgroundParams(**knobs)  # a bad knob fails here, before any work
    methods = args.methods.split(",")
    for m in methods:
        if (why := peers.availability(m)) is not None:
            raise SystemExit(f"{m}: {why}")
    seqs = [q.name for q in find_sequences(args.root)]
    jobs = [(m, s) for m in methods for s in seqs]
    results: dict = {m: {} for m in methods}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {job: pool.submit(run_one, args.root, job[1], job[0], knobs) for job in jobs}
        for (m, s), fut in tqdm(futures.items(), desc="methods x sequences"):
            results[m][s] = fut.result()
    head = " | ".join(f"FP {b}" for b in LABELS) + " | FP on shadow | " + " | ".join(f"FN {b}" for b in LABELS)
    print(f"| sequence | method | FP | FN | {head} |")
    print("|---|---|---|---|" + "---|" * (2 * len(LABELS) + 1))
    for s in seqs:
        for m in methods:
            r = results[m][s]
            nfp, nfn = sum(r["fp"]), sum(r["fn"])
            fp = " | ".join(f"{v / max(nfp, 1):.2f}" for v in r["fp"])
            fn = " | ".join(f"{v / max(nfn, 1):.2f}" for v in r["fn"])
            print(f"| {s} | {m} | {nfp:,} | {nfn:,} | {fp} | {r['fp_shadow'] / max(nfp, 1):.2f} | {fn} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
