"""Why the per-frame fit on the dictionary loses: how much of an object the dictionary absorbs.

    OPENBLAS_NUM_THREADS=1 python tests/bench/bench_fit.py [SEQUENCE_DIR ...]

For each sequence (default: the five in ../shared/data/cdnet2014), the default model runs from
frame 1; on the scored frames it compares the deviation of the frame from the window's robust
mean, D = x - M, with the part of D that the per-frame core fit puts in the low-rank term
(A R B^T, ``frame_model="fit"``): the share of |D| it explains on ground-truth foreground pixels
and on background pixels. A fit that explains much of the foreground takes the object into the
background, which is why "fit" loses recall; one that explains the background's motion is what
it is for.
"""

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.evaluation.metrics import cdnet_labels  # noqa: E402
from core.solver.frame_fit import fit_cores  # noqa: E402
from core.solver.products import sandwich  # noqa: E402
from core.streaming.background import KDRSDLBackgroundSubtractor  # noqa: E402
from streamer.evaluation.cdnet import find_sequences  # noqa: E402
from streamer.evaluation.protocols import scored_labels  # noqa: E402


def main():
    roots = sys.argv[1:] or [str(ROOT.parent / "shared" / "data" / "cdnet2014")]
    print("| sequence | share of |x - M| explained by A R B^T: foreground | background |")
    print("|---|---|---|")
    for root in roots:
        for seq in find_sequences(root):
            scored = seq.scored_frames()
            X = seq.frames(seq.first_input, scored[-1])
            G = scored_labels(seq, scored, X.shape[1:])
            sub = KDRSDLBackgroundSubtractor()
            row = {i: k for k, i in enumerate(scored)}
            fg, bg = np.zeros(2), np.zeros(2)
            for t, frame in enumerate(X):
                sub.process(frame)
                k = row.get(seq.first_input + t)
                if k is None or k % 10 or sub.state is None:
                    continue
                res, st = sub._result, sub.state
                x = frame.astype(np.float32) / 255
                D = x - res.M
                fit = fit_cores(
                    res.A,
                    res.B,
                    D[None],
                    lam=sub._lam,
                    alpha=sub.params.alpha,
                    mu_end=st.mu,
                    mu_ratio=st.mu / st.muK,
                    rho=2.0,
                    max_iter=sub.params.frame_iters,
                )
                L = sandwich(res.A, fit.R, res.B)[0]
                explained = np.abs(D) - np.abs(D - L)  # how much closer to x the fit brings the background
                valid, positive = cdnet_labels(G[k])
                fg += explained[valid & positive].sum(), np.abs(D[valid & positive]).sum()
                bg += explained[valid & ~positive].sum(), np.abs(D[valid & ~positive]).sum()
            print(f"| {seq.name} | {fg[0] / fg[1]:.2f} | {bg[0] / bg[1]:.2f} |")


if __name__ == "__main__":
    main()
