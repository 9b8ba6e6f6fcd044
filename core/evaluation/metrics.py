"""Evaluation metrics for background subtraction, as pure functions.

CDnet's measures (Goyette et al., CVPRW 2012; changedetection.net): precision,
recall, F-measure, specificity, FPR, FNR, PWC; and the paper's ROC/AUC over all
annotated pixels pooled (Bahri et al., ICCV 2017, Section 5.1).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: CDnet ground-truth labels.
GT_STATIC, GT_SHADOW, GT_OUTSIDE_ROI, GT_UNKNOWN, GT_MOTION = 0, 50, 85, 170, 255


def cdnet_labels(gt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split CDnet ground-truth labels into what is scored and what is foreground.

    Parameters
    ----------
    gt : ndarray of uint8, any shape
        CDnet labels: 0 static, 50 hard shadow, 85 outside ROI, 170 unknown, 255 motion.

    Returns
    -------
    valid : ndarray of bool, shape of ``gt``
        Pixels that are scored: labels 0, 50 and 255 (85 and 170 are not).
    positive : ndarray of bool, shape of ``gt``
        Foreground pixels: label 255 (shadow, 50, counts as background as in CDnet).

    Raises
    ------
    ValueError
        If ``gt`` holds a value that is not a CDnet label.
    """
    gt = np.asarray(gt)
    known = np.isin(gt, (GT_STATIC, GT_SHADOW, GT_OUTSIDE_ROI, GT_UNKNOWN, GT_MOTION))
    if not known.all():
        bad = np.unique(gt[~known])[:5]
        raise ValueError(f"ground truth holds values that are not CDnet labels (0, 50, 85, 170, 255): {bad.tolist()}")
    valid = (gt == GT_STATIC) | (gt == GT_SHADOW) | (gt == GT_MOTION)
    return valid, gt == GT_MOTION


@dataclass(frozen=True)
class Confusion:
    """Pixel counts of a binary classification against ground truth.

    Attributes
    ----------
    tp, fp, fn, tn : int
        True/false positives/negatives (pixels).
    """

    tp: int
    fp: int
    fn: int
    tn: int

    def __add__(self, other: "Confusion") -> "Confusion":
        return Confusion(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn, self.tn + other.tn)

    @property
    def precision(self) -> float:
        """TP / (TP + FP); NaN when nothing was detected."""
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float:
        """TP / (TP + FN); NaN when there is no foreground."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f_measure(self) -> float:
        """2 P R / (P + R) = 2 TP / (2 TP + FP + FN); NaN when undefined."""
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def specificity(self) -> float:
        """TN / (TN + FP)."""
        return _ratio(self.tn, self.tn + self.fp)

    @property
    def fpr(self) -> float:
        """FP / (FP + TN)."""
        return _ratio(self.fp, self.fp + self.tn)

    @property
    def fnr(self) -> float:
        """FN / (TP + FN)."""
        return _ratio(self.fn, self.tp + self.fn)

    @property
    def pwc(self) -> float:
        """Percentage of wrong classifications, 100 (FN + FP) / all."""
        return 100.0 * _ratio(self.fn + self.fp, self.tp + self.fp + self.fn + self.tn)

    def as_dict(self) -> dict[str, Any]:
        """All counts and measures in a dict (NaN measures as None)."""
        out: dict[str, Any] = {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn}
        for name in ("precision", "recall", "f_measure", "specificity", "fpr", "fnr", "pwc"):
            value = getattr(self, name)
            out[name] = None if np.isnan(value) else float(value)
        return out


def _ratio(num: float, den: float) -> float:
    return float(num) / den if den else float("nan")


def confusion(mask: np.ndarray, positive: np.ndarray, valid: np.ndarray | None = None) -> Confusion:
    """Confusion counts of a binary foreground mask.

    Parameters
    ----------
    mask : ndarray of bool (or 0/255), any shape
        Detected foreground.
    positive : ndarray of bool, same shape
        True foreground.
    valid : ndarray of bool, same shape, optional
        Pixels to score (default: all).

    Returns
    -------
    Confusion

    Raises
    ------
    ValueError
        If the shapes differ.
    """
    mask = np.asarray(mask).astype(bool)
    positive = np.asarray(positive, dtype=bool)
    if mask.shape != positive.shape or (valid is not None and np.shape(valid) != mask.shape):
        shapes = f"mask {mask.shape}, positive {positive.shape}, valid {None if valid is None else np.shape(valid)}"
        raise ValueError(f"shapes differ: {shapes}")
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        mask, positive = mask[valid], positive[valid]
    tp = int(np.count_nonzero(mask & positive))
    fp = int(np.count_nonzero(mask & ~positive))
    fn = int(np.count_nonzero(~mask & positive))
    tn = int(mask.size - tp - fp - fn)
    return Confusion(tp, fp, fn, tn)


def roc_curve(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC curve of continuous foreground scores, one point per distinct score.

    Parameters
    ----------
    scores : ndarray, shape (P,)
        Scores of the scored pixels (higher = more likely foreground).
    positive : ndarray of bool, shape (P,)
        Ground truth.

    Returns
    -------
    fpr, tpr, thresholds : ndarray
        Starting at (0, 0) with threshold +inf; ties share one point.

    Raises
    ------
    ValueError
        If the shapes differ, or one class is absent.
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    if scores.shape != positive.shape:
        raise ValueError(f"scores {scores.shape} and positive {positive.shape} differ in size")
    n_pos = np.count_nonzero(positive)
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC needs both foreground and background pixels")
    order = np.argsort(-scores, kind="mergesort")
    s, p = scores[order], positive[order]
    tps = np.cumsum(p)
    fps = np.arange(1, p.size + 1) - tps
    last_of_tie = np.r_[np.nonzero(np.diff(s))[0], p.size - 1]
    tpr = np.r_[0.0, tps[last_of_tie] / n_pos]
    fpr = np.r_[0.0, fps[last_of_tie] / n_neg]
    return fpr, tpr, np.r_[np.inf, s[last_of_tie]]


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve (trapezoidal; ties count one half).

    Equal to the Mann-Whitney probability that a random foreground pixel scores
    higher than a random background pixel.

    Parameters
    ----------
    scores : ndarray, shape (P,)
    positive : ndarray of bool, shape (P,)

    Returns
    -------
    float in [0, 1]

    Raises
    ------
    ValueError
        As :func:`roc_curve`.
    """
    fpr, tpr, _ = roc_curve(scores, positive)
    return float(np.trapezoid(tpr, fpr))


def precision_recall_curve(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision and recall at every distinct score threshold.

    Parameters
    ----------
    scores : ndarray, shape (P,)
    positive : ndarray of bool, shape (P,)

    Returns
    -------
    precision, recall, thresholds : ndarray
        Ordered by decreasing threshold.
    """
    fpr, tpr, thr = roc_curve(scores, positive)
    positive = np.asarray(positive, dtype=bool)
    n_pos = np.count_nonzero(positive)
    n_neg = positive.size - n_pos
    tp = tpr[1:] * n_pos
    fp = fpr[1:] * n_neg
    return tp / np.maximum(tp + fp, 1), tpr[1:], thr[1:]


class ScoreHistogram:
    """Foreground and background counts of a continuous score in fixed bins, for ROC over long runs.

    Pooling every scored pixel of a sequence (hundreds of millions) is too large to sort; counts
    in ``bins`` equal bins over ``[0, high]`` give the ROC curve and its AUC with ties inside a
    bin counted one half, so the AUC is within 1 / ``bins`` of the exact pooled value for scores
    that spread over the range.

    Parameters
    ----------
    bins : int
        Number of bins (>= 2).
    high : float
        Upper end of the score range; larger scores fall in the last bin, negative ones in the first.

    Raises
    ------
    ValueError
        If ``bins < 2`` or ``high`` is not finite and > 0.
    """

    def __init__(self, bins: int = 1024, high: float = 1.0) -> None:
        if bins < 2 or not (np.isfinite(high) and high > 0):
            raise ValueError(f"need bins >= 2 and a finite high > 0, got {bins}, {high}")
        self.bins, self.high = int(bins), float(high)
        self.positive = np.zeros(self.bins, np.int64)
        self.negative = np.zeros(self.bins, np.int64)

    def add(self, scores: np.ndarray, positive: np.ndarray) -> None:
        """Count scores (any shape, float) against ground truth (bool, same shape)."""
        idx = np.clip((np.asarray(scores, np.float32) * (self.bins / self.high)).astype(np.int64), 0, self.bins - 1)
        positive = np.asarray(positive, dtype=bool)
        self.positive += np.bincount(idx[positive], minlength=self.bins)
        self.negative += np.bincount(idx[~positive], minlength=self.bins)

    def roc_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """``fpr, tpr`` from the highest bin down, starting at (0, 0).

        Raises
        ------
        ValueError
            If one class was never counted.
        """
        n_pos, n_neg = self.positive.sum(), self.negative.sum()
        if n_pos == 0 or n_neg == 0:
            raise ValueError("ROC needs both foreground and background pixels")
        tpr = np.r_[0.0, np.cumsum(self.positive[::-1]) / n_pos]
        fpr = np.r_[0.0, np.cumsum(self.negative[::-1]) / n_neg]
        return fpr, tpr

    def auc(self) -> float | None:
        """Area under :meth:`roc_curve`; None when one class was never counted."""
        if self.positive.sum() == 0 or self.negative.sum() == 0:
            return None
        fpr, tpr = self.roc_curve()
        return float(np.trapezoid(tpr, fpr))


def cdnet_average(
    per_sequence: Iterable[tuple[str, dict[str, Any]]],
    keys: tuple[str, ...] = ("precision", "recall", "f_measure", "specificity", "fpr", "fnr", "pwc"),
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """CDnet's averages: the mean of each metric per category, then the mean over categories.

    CDnet computes every metric per sequence (from the counts summed over its scored frames),
    averages the sequences of a category, and averages the categories (changedetection.net,
    Goyette et al., CVPRW 2012), so a category with many sequences weighs no more than one with few.

    Parameters
    ----------
    per_sequence : iterable of (str, dict)
        ``(category, metrics)`` per sequence; ``metrics`` maps names to float or None
        (None, an undefined metric, is left out of that mean).
    keys : tuple of str
        Metrics to average.

    Returns
    -------
    categories : dict of str to dict
        Per category: each key's mean (None if no sequence defines it) and ``n_sequences``.
    overall : dict
        Each key's mean over the categories that define it, and ``n_categories``.
    """
    by_category: dict[str, list[dict[str, Any]]] = {}
    for category, metrics in per_sequence:
        by_category.setdefault(category, []).append(metrics)

    def mean(values: Iterable[float | None]) -> float | None:
        defined = [v for v in values if v is not None]
        return float(np.mean(defined)) if defined else None

    categories = {
        c: {**{k: mean(m.get(k) for m in ms) for k in keys}, "n_sequences": len(ms)}
        for c, ms in sorted(by_category.items())
    }
    overall: dict[str, Any] = {k: mean(c[k] for c in categories.values()) for k in keys}
    overall["n_categories"] = len(categories)
    return categories, overall
