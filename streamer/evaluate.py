"""``kdrsdl evaluate``: score background subtractors on a CDnet-format dataset.

Protocols (ALGORITHM.md, "How the paper measured background subtraction"):

- ``paper``: grayscale frames resized to 48 x 64 (rows x cols), a 400-frame window of
  the annotated range, score = |X - L| (OpenCV methods: their foreground output),
  ROC over the annotated pixels pooled, AUC; ``--sweep`` adds the paper's oracle
  lambda sweep (20 values, 2 * logspace(-1, -4, 20)), best AUC and its lambda.
- ``cdnet``: full resolution, all annotated frames, the binary masks each method
  would publish, CDnet's precision, recall, F-measure, specificity, FPR, FNR, PWC;
  AUC where a method has a continuous score; throughput of processing alone.

Every method sees identical frames in one invocation.
"""

import json
import os
import pathlib
import sys
import time
import warnings

import cv2
import numpy as np
from tqdm import tqdm

from core.background import KDRSDLBackgroundSubtractor
from core.kdrsdl import ConvergenceWarning, kdrsdl
from core.metrics import cdnet_labels, confusion, precision_recall_curve, roc_auc, roc_curve
from core.rpca import rpca_ialm

METHODS = ("kdrsdl", "kdrsdl-stream", "mog2", "knn", "rpca")
PAPER_SIZE = (48, 64)  # rows x cols
PAPER_FRAMES = 400
SWEEP = 2 * np.logspace(-1, -4, 20)
#: Threshold turning the batch methods' |X - L| into a mask (cdnet protocol), intensity in [0, 1]:
#: the streaming model's default floor.
BATCH_THRESHOLD = 0.08


class DatasetError(ValueError):
    """A directory that is not a readable CDnet-format dataset; names the first problem."""


class Dataset:
    """A CDnet-layout directory: input/inXXXXXX.jpg, groundtruth/gtXXXXXX.png, temporalROI.txt, ROI.bmp|png.

    Parameters
    ----------
    root : str or path

    Raises
    ------
    DatasetError
        Missing folder or file, malformed temporalROI.txt.
    """

    def __init__(self, root):
        self.root = pathlib.Path(root)
        for sub in ("input", "groundtruth"):
            if not (self.root / sub).is_dir():
                raise DatasetError(f"{self.root}: no {sub}/ folder (expected the CDnet layout)")
        roi_file = self.root / "temporalROI.txt"
        if not roi_file.is_file():
            raise DatasetError(f"{self.root}: no temporalROI.txt")
        try:
            self.first, self.last = (int(v) for v in roi_file.read_text().split()[:2])
        except ValueError:
            raise DatasetError(f"{roi_file}: expected two frame numbers, got {roi_file.read_text()[:40]!r}") from None
        if not 1 <= self.first <= self.last:
            raise DatasetError(f"{roi_file}: bad range {self.first}..{self.last}")
        self.roi = None
        for name in ("ROI.bmp", "ROI.png"):
            if (self.root / name).is_file():
                self.roi = self._read(self.root / name) > 0

    @staticmethod
    def _read(path):
        img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
        if img is None:
            raise DatasetError(f"{path}: missing or unreadable")
        return img

    def frame(self, i):
        """Input frame ``i`` (1-based) as grayscale uint8."""
        return self._read(self.root / "input" / f"in{i:06d}.jpg")

    def labels(self, i):
        """Ground-truth labels of frame ``i``, uint8 CDnet values."""
        return self._read(self.root / "groundtruth" / f"gt{i:06d}.png")

    def check(self, a, b):
        """Raise DatasetError naming the first frame of ``a..b`` whose input or ground truth is missing."""
        for i in range(a, b + 1):
            for path in (self.root / "input" / f"in{i:06d}.jpg", self.root / "groundtruth" / f"gt{i:06d}.png"):
                if not path.is_file():
                    raise DatasetError(f"{path}: missing (frame {i} of {a}..{b})")


def parse_frames(spec, ds, protocol):
    """``A:B`` (1-based, inclusive) or the protocol's default range; must lie in temporalROI."""
    if spec:
        try:
            a, b = (int(v) for v in spec.split(":"))
        except ValueError:
            raise DatasetError(f"--frames must be A:B, got {spec!r}") from None
    elif protocol == "paper":
        a, b = ds.first, min(ds.last, ds.first + PAPER_FRAMES - 1)
    else:
        a, b = ds.first, ds.last
    if not ds.first <= a <= b <= ds.last:
        raise DatasetError(f"frames {a}:{b} are outside the annotated range {ds.first}:{ds.last} (temporalROI.txt)")
    return a, b


def load(ds, a, b, protocol):
    """Frames (N, m, n) uint8, labels (N, m, n) uint8, resized for the paper protocol."""
    ds.check(a, b)
    frames, labels = [], []
    for i in tqdm(range(a, b + 1), desc="loading", unit="frame", leave=False):
        f, g = ds.frame(i), ds.labels(i)
        if ds.roi is not None and ds.roi.shape == g.shape:
            g = np.where(ds.roi, g, 85).astype(np.uint8)  # outside the spatial ROI: not scored
        if protocol == "paper":
            f = cv2.resize(f, PAPER_SIZE[::-1], interpolation=cv2.INTER_AREA)
            g = cv2.resize(g, PAPER_SIZE[::-1], interpolation=cv2.INTER_NEAREST)
        frames.append(f)
        labels.append(g)
    return np.stack(frames), np.stack(labels)


def _batch(method, X, lam, protocol):
    Xf = X.astype(np.float64 if protocol == "paper" else np.float32) / 255
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if method == "kdrsdl":
            rank = None if protocol == "paper" else 30
            res = kdrsdl(Xf, rank, lam=lam, mean=True, tol=1e-5, max_iter=300)
            params = {"rank": res.A.shape[1], "lam": lam, "alpha": 1e-2, "mean": True, "tol": 1e-5,
                      "n_iter": res.n_iter}
        else:
            res = rpca_ialm(Xf, lam=lam, tol=1e-5)
            params = {"lam": lam, "tol": 1e-5, "n_iter": res.n_iter, "rank": res.rank}
    return np.abs(Xf - res.L), params


def run_method(method, X, lam=None, protocol="paper"):
    """One method on the frames: ``(score (N, m, n) float, mask (N, m, n) bool, params, seconds)``."""
    t0 = time.perf_counter()
    if method in ("kdrsdl", "rpca"):
        score, params = _batch(method, X, lam, protocol)
        mask = score > BATCH_THRESHOLD
    elif method == "kdrsdl-stream":
        sub = KDRSDLBackgroundSubtractor()
        out = [sub.process(f) for f in X]
        score = np.stack([o.score for o in out])
        mask = np.stack([o.fgmask for o in out]) > 0
        params = {**vars(sub.params), "resets": sub.n_resets}
    else:
        sub = (cv2.createBackgroundSubtractorMOG2 if method == "mog2" else cv2.createBackgroundSubtractorKNN)(
            detectShadows=False)
        mask = np.stack([sub.apply(f) for f in X]) > 127
        score = mask.astype(np.float32)
        params = {"detectShadows": False, "defaults": True}
    return score, mask, params, time.perf_counter() - t0


def evaluate(root, protocol="paper", methods=METHODS, frames=None, sweep=False, report=None):
    """Evaluate methods on a dataset; returns the JSON-able result dict.

    Raises
    ------
    DatasetError
        For a malformed dataset or range; ValueError for an unknown method or protocol.
    """
    if protocol not in ("paper", "cdnet"):
        raise ValueError(f"protocol must be 'paper' or 'cdnet', got {protocol!r}")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    ds = Dataset(root)
    a, b = parse_frames(frames, ds, protocol)
    X, G = load(ds, a, b, protocol)
    valid, positive = cdnet_labels(G)
    result = {"dataset": str(ds.root), "protocol": protocol, "frames": [a, b], "methods": {}}
    curves, masks = {}, {}
    for method in tqdm(methods, desc="methods", unit="method"):
        score, mask, params, seconds = run_method(method, X, protocol=protocol)
        continuous = method in ("kdrsdl", "rpca", "kdrsdl-stream")
        auc = roc_auc(score[valid], positive[valid]) if positive[valid].any() and (~positive[valid]).any() else None
        c = confusion(mask, positive, valid)
        entry = {"auc": auc, "f_measure": None, "precision": None, "recall": None, "fps": len(X) / seconds,
                 "params": params}
        if protocol == "cdnet" or not continuous:
            entry.update({k: v for k, v in c.as_dict().items() if k in (
                "f_measure", "precision", "recall", "specificity", "fpr", "fnr", "pwc")})
        if sweep and method in ("kdrsdl", "rpca"):
            aucs = []
            for lam in tqdm(SWEEP, desc=f"{method} lambda sweep", unit="lambda", leave=False):
                s, _ = _batch(method, X, float(lam), protocol)
                aucs.append(roc_auc(s[valid], positive[valid]))
            i = int(np.argmax(aucs))
            entry["sweep"] = {"best_auc": aucs[i], "best_lam": float(SWEEP[i]), "lams": SWEEP.tolist(), "aucs": aucs}
        result["methods"][method] = entry
        if report:
            curves[method] = (score[valid], positive[valid])
            masks[method] = mask
    if report:
        write_report(report, result, curves, X, G, masks)
    return result


def format_table(result):
    """The result as a fixed-width text table."""
    cols = ("auc", "f_measure", "precision", "recall", "pwc", "fps")
    lines = [f"{result['dataset']}  protocol={result['protocol']}  frames={result['frames'][0]}:{result['frames'][1]}",
             f"{'method':15s}" + "".join(f"{c:>11s}" for c in cols) + "   sweep (best AUC @ lambda)"]
    for name, e in result["methods"].items():
        row = f"{name:15s}" + "".join(f"{e.get(c):11.4f}" if isinstance(e.get(c), float) else f"{'-':>11s}" for c in cols)
        if "sweep" in e:
            row += f"   {e['sweep']['best_auc']:.4f} @ {e['sweep']['best_lam']:.2e}"
        lines.append(row)
    return "\n".join(lines)


def write_report(directory, result, curves, X, G, masks):
    """Markdown report, ROC and precision-recall curves (PNG), and a contact sheet PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name, (s, y) in curves.items():
        fpr, tpr, _ = roc_curve(s, y)
        ax1.plot(fpr, tpr, label=f"{name} (AUC {result['methods'][name]['auc']:.3f})")
        p, r, _ = precision_recall_curve(s, y)
        ax2.plot(r, p, label=name)
    ax1.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC")
    ax2.set(xlabel="recall", ylabel="precision", title="precision-recall")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "curves.png", dpi=100)
    plt.close(fig)
    picks = np.linspace(0, len(X) - 1, 4).astype(int)
    rows = []
    for i in picks:
        gt = np.where(G[i] == 255, 255, np.where(G[i] == 0, 0, 128)).astype(np.uint8)
        rows.append(np.hstack([X[i], gt] + [masks[n][i].astype(np.uint8) * 255 for n in masks]))
    cv2.imwrite(str(d / "contact_sheet.png"), np.vstack(rows))
    lines = [f"# Evaluation: {result['dataset']}", "",
             f"Protocol `{result['protocol']}`, frames {result['frames'][0]}-{result['frames'][1]}.", "",
             "```", format_table(result), "```", "", "![ROC and precision-recall](curves.png)", "",
             "Contact sheet, one row per sampled frame: input | ground truth (gray = not scored) | "
             + " | ".join(masks), "", "![contact sheet](contact_sheet.png)", ""]
    (d / "report.md").write_text("\n".join(lines))


def main(args):
    """CLI body: returns the exit status (2 for a dataset or argument error)."""
    try:
        methods = [m.strip() for m in args.methods.split(",")] if args.methods else list(METHODS)
        result = evaluate(args.dataset, args.protocol, methods, args.frames, args.sweep, args.report)
    except (DatasetError, ValueError) as exc:
        print(f"kdrsdl evaluate: {exc}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=float)
    return 0
