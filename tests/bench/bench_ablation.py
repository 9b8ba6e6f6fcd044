"""Ablation of the streaming model under CDnet's protocol: each component off in turn.

    python tests/bench/bench_ablation.py [ROOT] [--variants NAME,...] [--json PATH] [--set KNOB=VALUE ...]
                                         [--jobs N] [--seeds 0,1,2,3]

ROOT defaults to ../shared/data/cdnet2014. Every variant is the default model with one knob
changed (the light-change rule is measured by bench_light.py; on CDnet it must change nothing);
every sequence is processed from frame 1 and scored on its temporalROI frames with ground truth,
the model fed as ``kdrsdl evaluate`` feeds it (``kdrsdl evaluate``'s protocol and scorer). Prints
a Markdown table of F per sequence, their plain mean and CDnet's mean (the mean of the category
means), and the share of the hard-shadow pixels flagged on the sequences that label them.
``--jobs`` runs that many (variant, sequence) pairs at once, each in its own process with one thread.
``--seeds`` runs every variant once per value of the model's ``sample_seed`` (a row each, named
``variant @ seed N``) and then prints each variant's F averaged over the seeds: a change that moves
a sequence by less than the seeds do is noise (docs/results.md, "Ablation").
"""

import argparse
import json
import pathlib
import sys
from concurrent.futures import ProcessPoolExecutor

from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from core.evaluation.metrics import cdnet_average  # noqa: E402
from core.streaming.background import BackgroundParams, KDRSDLBackgroundSubtractor  # noqa: E402
from streamer.evaluation import peers  # noqa: E402
from streamer.evaluation.cdnet import find_sequences  # noqa: E402
from streamer.evaluation.protocols import run_cdnet, scored_labels  # noqa: E402

#: name -> knobs changed from the defaults
VARIANTS = {
    "default": {},
    "global threshold (v1 decision)": {"decision": "global"},
    "no E exclusion in the spread": {"e_cut": 1.0},
    "no still cut (E alone decides the spread at still pixels)": {"still_cut": False},
    "no conditional update": {"update_blend": 0.0},
    "dynamic pixels blended too": {"blend_dynamic": True},
    "spatial tolerance 3 where the blink count exceeds 0.5 (v2's default)": {"tolerance": 3},
    "spatial tolerance 3 at every pixel": {"tolerance": 3, "tolerance_blink": 0.0},
    "no blink feedback": {"blink_gain": 0.0},
    "no global offset": {"global_offset": False},
    "no hole filling": {"fill_holes": False},
    "no rims restored after the opening": {"open_restore": 0.0},
    "no specks dropped": {"speck_area": 0.0},
    "specks dropped beside objects too": {"speck_reach": 0.0},
    "spatial tolerance 5 where the blink count exceeds 0.5": {"tolerance": 5},
    "no shadow test": {"shadow": False},
    "no background samples (v2's decision)": {"samples": 0},
    "no dynamic pixels (samples, own pixel only)": {"dynamic_blink": 20.0},
    "samples updated every 64 frames instead of 16": {"sample_period": 64},
    "no light-change rule": {"light_change": False},
    "no ghost test": {"ghost_frames": 0},
    "no ghost remnants": {"ghost_reach": 0.0},
    "no warm-up learning (v3's start)": {"warmup_entries": 0},
    "no blinks counted inside the objects at the start": {"warmup_blink_frames": 0},
    "no moving background (M alone)": {"frame_model": "mean"},
    "the moving background fitted on every frame (fit_refresh = 1)": {"fit_refresh": 1},
    "window median instead of KDRSDL's M, E and moving background (the solver still runs)": {
        "refit_background": "median",
        "frame_model": "mean",
    },
}


def subtractor(knobs):
    """kdrsdl-stream with ``knobs``, fed as ``kdrsdl evaluate`` feeds it."""
    KDRSDLBackgroundSubtractor(BackgroundParams(**knobs))  # a bad knob fails here, before any work
    return peers.create("kdrsdl-stream", BackgroundParams(**knobs))


def run_one(root: str, seq_name: str, knobs: dict) -> tuple[str, dict]:
    """One variant on one sequence: (category, the evaluate's entry)."""
    import cv2

    cv2.setNumThreads(1)
    seq = next(q for q in find_sequences(root) if q.name == seq_name)
    scored = seq.scored_frames()
    X = seq.frames(seq.first_input, scored[-1])
    G = scored_labels(seq, scored, X.shape[1:])
    with tqdm(total=len(X), desc=seq_name, leave=False, disable=True) as bar:
        entry, _, _ = run_cdnet(subtractor(knobs), X, seq.first_input, scored, G, set(), bar)
    return seq.category, entry


def variant_names(text: str) -> list[str]:
    """The names in ``--variants``, comma-separated; a name that holds commas itself (the median
    row's) is taken whole."""
    names, part = [], ""
    for piece in text.split(","):
        part = f"{part},{piece}" if part else piece
        if part in VARIANTS:
            names.append(part)
            part = ""
    if part:
        raise SystemExit(f"unknown variant {part!r}; the variants: {', '.join(VARIANTS)}")
    return names


def value(text):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "root", nargs="?", default=str(pathlib.Path(__file__).resolve().parents[3] / "shared/data/cdnet2014")
    )
    ap.add_argument("--variants", help="comma-separated names of VARIANTS (default all)")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="change a default knob for all")
    ap.add_argument("--json", help="write every figure as JSON")
    ap.add_argument("--jobs", type=int, default=1, help="processes at once (default %(default)s)")
    ap.add_argument("--seeds", help="comma-separated sample_seed values: each variant at each, and their mean")
    args = ap.parse_args()
    base = {k: value(v) for k, v in (s.split("=", 1) for s in args.set)}
    variants = variant_names(args.variants) if args.variants else list(VARIANTS)
    seeds = [int(v) for v in args.seeds.split(",")] if args.seeds else []
    # row name -> knobs
    rows = {n: {**base, **VARIANTS[n]} for n in variants}
    if seeds:
        rows = {f"{n} @ seed {d}": {**rows[n], "sample_seed": d} for n in variants for d in seeds}
    names = list(rows)
    results: dict = {n: {} for n in names}
    seq_names = [q.name for q in find_sequences(args.root)]
    jobs = [(n, q) for n in names for q in seq_names]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {job: pool.submit(run_one, args.root, job[1], rows[job[0]]) for job in jobs}
        for (n, q), fut in tqdm(futures.items(), desc="variants x sequences"):
            results[n][q] = fut.result()
    seqs = list(next(iter(results.values())))
    print("| variant | " + " | ".join(s.split("/")[1] for s in seqs) + " | mean of the sequences | CDnet mean |")
    print("|---|" + "---|" * (len(seqs) + 2))
    for n in names:
        _, overall = cdnet_average([(c, e) for c, e in results[n].values()], ("f_measure",))
        f = [results[n][s][1]["f_measure"] for s in seqs]
        fps = sum(results[n][s][1]["seconds"] for s in seqs)
        print(
            f"| {n} | " + " | ".join(f"{v:.3f}" for v in f) + f" | {sum(f) / len(f):.3f} | {overall['f_measure']:.3f} |"
            f"  ({fps:.0f} s)"
        )
    if seeds:
        print(f"\nMean over the seeds {args.seeds}:\n")
        print("| variant | " + " | ".join(s.split("/")[1] for s in seqs) + " | mean of the sequences |")
        print("|---|" + "---|" * (len(seqs) + 1))
        for n in variants:
            f = [sum(results[f"{n} @ seed {d}"][s][1]["f_measure"] for d in seeds) / len(seeds) for s in seqs]
            print(f"| {n} | " + " | ".join(f"{v:.4f}" for v in f) + f" | {sum(f) / len(f):.4f} |")
    print("\nShare of the hard-shadow pixels (label 50) flagged:")
    for n in names:
        cells = [
            f"{s.split('/')[1]} {results[n][s][1]['shadow_fg']:.3f}"
            for s in seqs
            if results[n][s][1].get("shadow_fg") is not None
        ]
        print(f"- {n}: " + ", ".join(cells))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
