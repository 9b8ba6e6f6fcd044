"""Metric functions against hand-computed cases and a rank-based AUC reference."""

import numpy as np
import pytest
import scipy.stats

from core.evaluation.metrics import cdnet_labels, confusion, precision_recall_curve, roc_auc, roc_curve


def test_confusion_hand_case():
    mask = np.array([1, 1, 0, 0, 1, 0], bool)
    gt = np.array([1, 0, 1, 0, 1, 0], bool)
    c = confusion(mask, gt)
    assert (c.tp, c.fp, c.fn, c.tn) == (2, 1, 1, 2)
    assert c.precision == pytest.approx(2 / 3) and c.recall == pytest.approx(2 / 3)
    assert c.f_measure == pytest.approx(2 / 3) and c.specificity == pytest.approx(2 / 3)
    assert c.fpr == pytest.approx(1 / 3) and c.fnr == pytest.approx(1 / 3)
    assert c.pwc == pytest.approx(100 * 2 / 6)


def test_perfect_inverted_and_all_background():
    gt = np.array([1, 0, 1, 0], bool)
    assert confusion(gt, gt).f_measure == 1.0
    assert confusion(~gt, gt).f_measure == 0.0
    empty = confusion(np.zeros(4, bool), gt)
    assert np.isnan(empty.precision) and empty.recall == 0.0 and empty.f_measure == 0.0
    none = confusion(np.zeros(4, bool), np.zeros(4, bool))
    assert np.isnan(none.f_measure) and none.as_dict()["f_measure"] is None and none.pwc == 0.0


def test_cdnet_label_handling():
    gt = np.array([0, 50, 85, 170, 255], np.uint8)
    valid, pos = cdnet_labels(gt)
    assert valid.tolist() == [True, True, False, False, True]  # 85 and 170 not scored
    assert pos.tolist() == [False, False, False, False, True]  # shadow (50) is background
    mask = np.array([1, 1, 1, 1, 1], bool)
    c = confusion(mask, pos, valid)
    assert (c.tp, c.fp, c.fn, c.tn) == (1, 2, 0, 0)
    with pytest.raises(ValueError, match="not CDnet labels"):
        cdnet_labels(np.array([0, 7], np.uint8))


def test_auc_perfect_inverted_and_ties():
    y = np.array([0, 0, 1, 1], bool)
    assert roc_auc(np.array([0.1, 0.2, 0.8, 0.9]), y) == 1.0
    assert roc_auc(np.array([0.9, 0.8, 0.2, 0.1]), y) == 0.0
    assert roc_auc(np.ones(4), y) == 0.5  # all tied: the diagonal
    fpr, tpr, thr = roc_curve(np.ones(4), y)
    assert fpr.tolist() == [0, 1] and tpr.tolist() == [0, 1]
    with pytest.raises(ValueError, match="both foreground and background"):
        roc_auc(np.ones(3), np.ones(3, bool))


def test_auc_matches_mann_whitney_rank_reference():
    rng = np.random.default_rng(0)
    y = rng.random(5000) < 0.2
    s = np.round(rng.normal(size=5000) + 1.2 * y, 1)  # rounding makes many ties
    ranks = scipy.stats.rankdata(s)
    n1, n0 = y.sum(), (~y).sum()
    reference = (ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)
    assert roc_auc(s, y) == pytest.approx(reference, abs=1e-12)


def test_precision_recall_curve_ends_at_full_recall():
    y = np.array([0, 1, 1, 0, 1], bool)
    p, r, t = precision_recall_curve(np.array([0.1, 0.9, 0.8, 0.3, 0.2]), y)
    assert r[-1] == 1.0 and p[0] == 1.0 and p[-1] == pytest.approx(3 / 5)


def test_score_histogram_auc_is_the_pooled_auc_within_one_bin():
    from core.evaluation.metrics import ScoreHistogram

    rng = np.random.default_rng(3)
    y = rng.random(20000) < 0.3
    s = np.clip(rng.normal(0.3 + 0.2 * y, 0.15), 0, 1).astype(np.float32)
    h = ScoreHistogram(bins=1024)
    h.add(s[:7000], y[:7000])  # counts accumulate over calls, as over frames
    h.add(s[7000:], y[7000:])
    # Binning can only merge scores into ties, each worth one half: the error is at most
    # the mass of pairs that share a bin, about 1/1024 of the pairs for a spread like this.
    assert abs(h.auc() - roc_auc(s, y)) < 2e-3
    assert ScoreHistogram().auc() is None
    with pytest.raises(ValueError):
        ScoreHistogram(bins=1)


def test_cdnet_average_is_the_mean_of_category_means():
    from core.evaluation.metrics import cdnet_average

    rows = [
        ("baseline", {"f_measure": 0.9}),
        ("baseline", {"f_measure": 0.7}),
        ("jitter", {"f_measure": 0.2}),
        ("jitter", {"f_measure": None}),
    ]
    cats, overall = cdnet_average(rows, keys=("f_measure",))
    assert cats["baseline"] == {"f_measure": pytest.approx(0.8), "n_sequences": 2}
    assert cats["jitter"] == {"f_measure": pytest.approx(0.2), "n_sequences": 2}  # None is left out of the mean
    # CDnet weighs categories equally: (0.8 + 0.2) / 2, not the mean of the three sequences (0.6)
    assert overall == {"f_measure": pytest.approx(0.5), "n_categories": 2}
