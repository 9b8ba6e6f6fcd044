"""The protocols of ``kdrsdl evaluate``: run methods on CDnet sequences and score their masks.

Protocols (docs/evaluation.md, "Evaluation"):

- ``cdnet`` (default): CDnet 2014's protocol (changedetection.net). Every method processes every
  frame from the first in ``input/`` (its warm-up) up to the last scored frame, in grayscale, one
  thread; frames inside temporalROI (and ``--frames``) that have a ground-truth file are scored.
  Per sequence: precision, recall, F-measure, specificity, FPR, FNR, PWC from the pixel counts
  summed over its scored frames; AUC where a method has a continuous score; fps of the method's
  own calls on frames decoded beforehand. Then the mean per category and the mean of the
  categories, as CDnet averages them.
- ``paper``: the paper's Highway experiment (Bahri et al., ICCV 2017, Section 5.1): grayscale
  frames resized to 48 x 64 (rows x cols), a 400-frame window of the annotated range, score
  ``|X - L|``, ROC over the annotated pixels pooled, AUC; ``--sweep`` adds the paper's oracle
  lambda sweep (20 values, ``2 * logspace(-1, -4, 20)``), best AUC and its lambda.
"""

import pathlib
import time
import warnings
from typing import Any

import cv2
import numpy as np
from tqdm import tqdm

from core.evaluation.metrics import (
    GT_SHADOW,
    Confusion,
    ScoreHistogram,
    cdnet_average,
    cdnet_labels,
    confusion,
    roc_auc,
)
from core.solver.kdrsdl import ConvergenceWarning, kdrsdl
from core.solver.rpca import rpca_ialm
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.params import BackgroundParams
from streamer.evaluation import peers
from streamer.evaluation.cdnet import DatasetError, Sequence, find_sequences
from streamer.evaluation.report import CONTACT_ROWS, sequence_figures, write_report

PROTOCOLS = ("cdnet", "paper")
PAPER_METHODS = ("kdrsdl", "kdrsdl-stream", "mog2", "knn", "rpca")
METHODS = {"cdnet": peers.METHODS, "paper": PAPER_METHODS}
PAPER_SIZE = (48, 64)  # rows x cols
PAPER_FRAMES = 400
SWEEP = 2 * np.logspace(-1, -4, 20)
#: Threshold turning the batch methods' |X - L| into a mask (paper protocol's F-measure),
#: intensity in [0, 1].
BATCH_THRESHOLD = 0.08
#: Metrics averaged per category and overall.
AVERAGED = ("f_measure", "precision", "recall", "specificity", "fpr", "fnr", "pwc", "auc")

__all__ = ["DatasetError", "evaluate", "evaluate_cdnet", "evaluate_paper", "run_cdnet", "scored_labels"]


def parse_frames(spec: str | None) -> tuple[int | None, int | None]:
    """``A:B`` (1-based, inclusive) as two ints, or ``(None, None)``.

    Raises
    ------
    DatasetError
        If the text is not two integers separated by a colon.
    """
    if not spec:
        return None, None
    try:
        a, b = (int(v) for v in spec.split(":"))
    except ValueError:
        raise DatasetError(f"--frames must be A:B, got {spec!r}") from None
    return a, b


def scored_labels(seq: Sequence, numbers: list[int], shape: tuple[int, ...]) -> np.ndarray:
    """Labels of the scored frames, ROI applied (outside it: 85, not scored), values checked.

    Parameters
    ----------
    seq : streamer.evaluation.cdnet.Sequence
    numbers : list of int
        Frame numbers (1-based).
    shape : (int, int)
        The frames' (h, w), pixels.

    Returns
    -------
    ndarray, shape (len(numbers), h, w), uint8

    Raises
    ------
    DatasetError
        An unreadable ground truth, one of another size, or one with values that are not CDnet labels.
    """
    roi = seq.roi(shape)
    out = np.empty((len(numbers),) + tuple(shape), np.uint8)
    for k, i in enumerate(numbers):
        g = seq.labels(i, shape, roi)
        try:
            cdnet_labels(g)
        except ValueError as exc:
            raise DatasetError(f"{seq.gt_path(i)}: {exc}") from None
        out[k] = g
    return out


def run_cdnet(
    sub: peers.Subtractor,
    X: np.ndarray,
    first: int,
    scored: list[int],
    G: np.ndarray,
    picks: set[int],
    progress: tqdm,
) -> tuple[dict[str, Any], dict[int, np.ndarray], ScoreHistogram | None]:
    """One method over every frame of a sequence, CDnet's counts summed over the scored ones.

    Parameters
    ----------
    sub : streamer.evaluation.peers.Subtractor
        A fresh instance of the method.
    X : ndarray, shape (T, h, w), uint8
        Every frame from ``first`` on, grayscale, decoded beforehand.
    first : int
        Frame number (1-based) of ``X[0]``.
    scored : list of int
        Frame numbers to score, ascending; ``G[k]`` holds the labels of ``scored[k]``.
    G : ndarray, shape (len(scored), h, w), uint8
        CDnet labels (:func:`scored_labels`).
    picks : set of int
        Frame numbers whose masks to keep (the report's contact sheet).
    progress : tqdm
        Advanced by one per frame.

    Returns
    -------
    entry : dict
        Counts and CDnet's metrics, AUC (None for a mask-only method), fps of the method's own
        calls (frames per second), their total ``seconds`` and the method's ``params``.
    picked : dict of int to ndarray
        The masks of the frames in ``picks``, bool (h, w).
    hist : core.evaluation.metrics.ScoreHistogram or None
        The continuous score's histogram (None for a mask-only method).
    """
    row = {i: k for k, i in enumerate(scored)}
    counts = Confusion(0, 0, 0, 0)
    hist = None
    picked = {}
    seconds = 0.0
    shadow_px = shadow_fg = 0
    for t, frame in enumerate(X):
        t0 = time.perf_counter()
        mask, score = sub.apply(frame)
        seconds += time.perf_counter() - t0
        progress.update()
        k = row.get(first + t)
        if k is None:
            continue
        valid, positive = cdnet_labels(G[k])
        counts += confusion(mask, positive, valid)
        shadow = G[k] == GT_SHADOW  # inside the ROI: scored_labels set the outside to 85
        shadow_px += int(np.count_nonzero(shadow))
        shadow_fg += int(np.count_nonzero(mask & shadow))
        if score is not None:
            hist = hist or ScoreHistogram()
            hist.add(score[valid], positive[valid])
        if first + t in picks:
            picked[first + t] = mask
    entry: dict[str, Any] = {
        "available": True,
        **counts.as_dict(),
        "auc": hist.auc() if hist else None,
        "shadow_fg": shadow_fg / shadow_px if shadow_px else None,
        "shadow_pixels": shadow_px,
        "fps": len(X) / seconds if seconds > 0 else None,
        "seconds": seconds,
        "params": sub.params,
    }
    return entry, picked, hist


def evaluate_cdnet(
    seq: Sequence,
    methods: list[str],
    frames: tuple[int | None, int | None] = (None, None),
    report: pathlib.Path | None = None,
    model: BackgroundParams | None = None,
) -> dict[str, Any]:
    """One sequence under CDnet's protocol; the JSON-able entry.

    Parameters
    ----------
    seq : streamer.evaluation.cdnet.Sequence
    methods : sequence of str
        Names from :data:`streamer.evaluation.peers.METHODS`.
    frames : (int or None, int or None)
        Sub-range of temporalROI to score (1-based, inclusive).
    report : pathlib.Path, optional
        Directory for this sequence's curves and contact sheet.
    model : core.streaming.params.BackgroundParams, optional
        kdrsdl-stream's knobs (default: its defaults).

    Raises
    ------
    DatasetError
        A missing or unreadable frame or ground truth, an ROI of another size.
    """
    scored = seq.scored_frames(*frames)
    entry: dict[str, Any] = {
        "category": seq.category,
        "path": str(seq.root),
        "temporal_roi": [seq.roi_first, seq.roi_last],
        "frames_scored": len(scored),
        "frames_processed": 0,
        "processed": None,
        "methods": {},
    }
    if not scored:
        entry["note"] = "no ground-truth file inside the scored range: nothing processed or scored"
        return entry
    if seq.first_input > scored[0]:
        raise DatasetError(f"{seq.input_path(scored[0])}: missing (the first input frame is {seq.first_input})")
    first, last = seq.first_input, scored[-1]
    X = seq.frames(first, last)
    G = scored_labels(seq, scored, X.shape[1:])
    entry.update(frames_processed=len(X), processed=[first, last], scored=[scored[0], scored[-1]])
    picks = set(
        np.asarray(scored)[np.linspace(0, len(scored) - 1, min(CONTACT_ROWS, len(scored))).astype(int)].tolist()
    )
    picked, hists = {}, {}
    for name in methods:
        try:
            sub = peers.create(name, model)
        except peers.Unavailable as exc:
            entry["methods"][name] = {"available": False, "reason": str(exc)}
            continue
        with tqdm(total=len(X), desc=f"{seq.name} {name}", unit="frame", leave=False) as progress:
            entry["methods"][name], picked[name], hists[name] = run_cdnet(sub, X, first, scored, G, picks, progress)
    if report is not None:
        sequence_figures(report, seq, entry, hists, X, G, first, scored, picked)
    return entry


# ----------------------------------------------------------------------------- paper protocol
def _batch(method, X, lam):
    Xf = X.astype(np.float64) / 255
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if method == "kdrsdl":
            res = kdrsdl(Xf, None, lam=lam, mean=True, tol=1e-5, max_iter=300)
            params = {
                "rank": res.A.shape[1],
                "lam": lam,
                "alpha": 1e-2,
                "mean": True,
                "tol": 1e-5,
                "n_iter": res.n_iter,
            }
        else:
            res = rpca_ialm(Xf, lam=lam, tol=1e-5)
            params = {"lam": lam, "tol": 1e-5, "n_iter": res.n_iter, "rank": res.rank}
    return np.abs(Xf - res.L), params


def _paper_method(method, X):
    t0 = time.perf_counter()
    if method in ("kdrsdl", "rpca"):
        score, params = _batch(method, X, None)
        mask = score > BATCH_THRESHOLD
    elif method == "kdrsdl-stream":
        sub = KDRSDLBackgroundSubtractor()
        scores, masks = [], []
        for f in X:  # each result's score and mask only: a result also holds its frame and background
            o = sub.process(f)
            scores.append(o.score)
            masks.append(o.fgmask > 0)
        score, mask = np.stack(scores), np.stack(masks)
        params = {**vars(sub.params), "resets": sub.n_resets}
    else:
        sub = peers.create(method)
        mask = np.stack([sub.apply(f)[0] for f in X])
        score, params = mask.astype(np.float32), sub.params
    return score, mask, params, time.perf_counter() - t0


def evaluate_paper(
    seq: Sequence, methods: list[str], frames: tuple[int | None, int | None] = (None, None), sweep: bool = False
) -> dict[str, Any]:
    """One sequence under the paper's protocol; the JSON-able entry.

    Raises
    ------
    DatasetError
        A range outside temporalROI, a missing or unreadable frame or ground truth.
    """
    a, b = frames
    if a is None or b is None:  # parse_frames gives both or neither
        a, b = seq.roi_first, min(seq.roi_last, seq.roi_first + PAPER_FRAMES - 1)
    numbers = seq.scored_frames(a, b)
    missing = sorted(set(range(a, b + 1)) - set(numbers))
    if missing:
        raise DatasetError(f"{seq.gt_path(missing[0])}: missing (the paper protocol scores every frame of {a}..{b})")
    full = seq.frames(a, b)
    G = scored_labels(seq, numbers, full.shape[1:])
    X = np.stack([cv2.resize(f, PAPER_SIZE[::-1], interpolation=cv2.INTER_AREA) for f in full])
    G = np.stack([cv2.resize(g, PAPER_SIZE[::-1], interpolation=cv2.INTER_NEAREST) for g in G])
    valid, positive = cdnet_labels(G)
    entry: dict[str, Any] = {
        "category": seq.category,
        "path": str(seq.root),
        "frames": [a, b],
        "frames_processed": len(X),
        "frames_scored": len(X),
        "methods": {},
    }
    for method in tqdm(methods, desc=f"{seq.name} (paper)", unit="method", leave=False):
        score, mask, params, seconds = _paper_method(method, X)
        both = positive[valid].any() and (~positive[valid]).any()
        e = {
            "available": True,
            "auc": roc_auc(score[valid], positive[valid]) if both else None,
            "fps": len(X) / seconds,
            "params": params,
        }
        if method not in ("kdrsdl", "rpca", "kdrsdl-stream"):
            e.update(confusion(mask, positive, valid).as_dict())
        if sweep and method in ("kdrsdl", "rpca"):
            aucs = []
            for lam in tqdm(SWEEP, desc=f"{method} lambda sweep", unit="lambda", leave=False):
                s, _ = _batch(method, X, float(lam))
                aucs.append(roc_auc(s[valid], positive[valid]))
            i = int(np.argmax(aucs))
            e["sweep"] = {"best_auc": aucs[i], "best_lam": float(SWEEP[i]), "lams": SWEEP.tolist(), "aucs": aucs}
        entry["methods"][method] = e
    return entry


# ----------------------------------------------------------------------------- the run
def evaluate(
    root: str | pathlib.Path,
    protocol: str = "cdnet",
    methods: list[str] | None = None,
    frames: str | None = None,
    sweep: bool = False,
    report: str | pathlib.Path | None = None,
    model: BackgroundParams | None = None,
) -> dict[str, Any]:
    """Evaluate methods on every sequence under ``root``; returns the JSON-able result.

    Parameters
    ----------
    root : str or path
        One sequence directory, or a tree ``root/<category>/<sequence>/`` (CDnet layout).
    protocol : {"cdnet", "paper"}
    methods : sequence of str, optional
        Default: every method of the protocol.
    frames : str, optional
        ``A:B``, a sub-range of every sequence's temporalROI to score.
    sweep : bool
        The paper protocol's oracle lambda sweep.
    report : str or path, optional
        Directory for ``report.md`` and each sequence's figures.
    model : core.streaming.params.BackgroundParams, optional
        kdrsdl-stream's knobs under the CDnet protocol (default: its defaults).

    Returns
    -------
    dict
        ``protocol``, ``root``, ``methods``, ``sequences`` (name to entry: category, frames
        processed and scored, per-method metrics), ``categories`` and ``overall`` (CDnet's
        averages per method), ``unavailable`` (method to reason).

    Raises
    ------
    DatasetError
        A malformed dataset or range (the message names the file).
    ValueError
        An unknown method or protocol.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    methods = list(methods or METHODS[protocol])
    unknown = [m for m in methods if m not in METHODS[protocol]]
    if unknown:
        raise ValueError(
            f"unknown method(s) {unknown} for the {protocol} protocol; choose from {', '.join(METHODS[protocol])}"
        )
    cv2.setNumThreads(1)  # one thread for every method, as CDnet's comparisons run them
    span = parse_frames(frames)
    sequences = find_sequences(root)
    report = pathlib.Path(report) if report else None
    result: dict[str, Any] = {
        "protocol": protocol,
        "root": str(pathlib.Path(root).resolve()),
        "methods": methods,
        "sequences": {},
    }
    for seq in tqdm(sequences, desc="sequences", unit="sequence", disable=len(sequences) == 1):
        if protocol == "cdnet":
            result["sequences"][seq.name] = evaluate_cdnet(seq, methods, span, report, model)
        else:
            result["sequences"][seq.name] = evaluate_paper(seq, methods, span, sweep)
    result["categories"], result["overall"] = {}, {}
    for m in methods:
        rows = [
            (e["category"], e["methods"][m])
            for e in result["sequences"].values()
            if e["methods"].get(m, {}).get("available")
        ]
        cats, overall = cdnet_average(rows, AVERAGED)
        for c, v in cats.items():
            result["categories"].setdefault(c, {})[m] = v
        result["overall"][m] = overall
    result["unavailable"] = {
        m: e["reason"] for s in result["sequences"].values() for m, e in s["methods"].items() if not e["available"]
    }
    if report is not None:
        write_report(report, result)
    return result
