"""Ablation of the streaming model under CDnet's protocol: each component off in turn.

    python tests/bench/bench_ablation.py [ROOT] [--variants NAME,...] [--json PATH] [--set KNOB=VALUE ...]

ROOT defaults to ../shared/data/cdnet2014. Every variant is the default model with one knob
changed (the light-change rule is measured by bench_light.py; on CDnet it must change nothing);
every sequence is processed from frame 1 and scored on its temporalROI frames with ground truth
(``kdrsdl evaluate``'s protocol and scorer). Prints a Markdown table of F per sequence, their
plain mean and CDnet's mean (the mean of the category means).
"""

import argparse
import json
import pathlib
import sys

from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from core.evaluation.metrics import cdnet_average  # noqa: E402
from core.streaming.background import BackgroundParams, KDRSDLBackgroundSubtractor  # noqa: E402
from streamer.evaluation.cdnet import find_sequences  # noqa: E402
from streamer.evaluation.peers import Subtractor  # noqa: E402
from streamer.evaluation.protocols import run_cdnet, scored_labels  # noqa: E402

#: name -> knobs changed from the defaults
VARIANTS = {
    "default": {},
    "global threshold (v1 decision)": {"decision": "global"},
    "no E exclusion in the spread": {"e_cut": 1.0},
    "no conditional update": {"update_blend": 0.0},
    "spatial tolerance 3 where the blink count exceeds 0.5 (v2's default)": {"tolerance": 3},
    "spatial tolerance 3 at every pixel": {"tolerance": 3, "tolerance_blink": 0.0},
    "no blink feedback": {"blink_gain": 0.0},
    "no global offset": {"global_offset": False},
    "no hole filling": {"fill_holes": False},
    "spatial tolerance 5 where the blink count exceeds 0.5": {"tolerance": 5},
    "no shadow test": {"shadow": False},
    "no background samples (v2's decision)": {"samples": 0},
    "no dynamic pixels (samples, own pixel only)": {"dynamic_blink": 20.0},
    "samples updated every 64 frames instead of 16": {"sample_period": 64},
    "no light-change rule": {"light_change": False},
}


def subtractor(knobs):
    sub = KDRSDLBackgroundSubtractor(BackgroundParams(**knobs))

    def apply(frame):
        out = sub.process(frame)
        return out.fgmask > 0, out.score

    return Subtractor(apply, knobs)


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
    args = ap.parse_args()
    base = {k: value(v) for k, v in (s.split("=", 1) for s in args.set)}
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    results = {n: {} for n in names}
    for seq in find_sequences(args.root):
        scored = seq.scored_frames()
        X = seq.frames(seq.first_input, scored[-1])
        G = scored_labels(seq, scored, X.shape[1:])
        for n in names:
            with tqdm(total=len(X), desc=f"{seq.name} {n}", leave=False) as bar:
                entry, _, _ = run_cdnet(subtractor({**base, **VARIANTS[n]}), X, seq.first_input, scored, G, set(), bar)
            results[n][seq.name] = (seq.category, entry)
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
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
