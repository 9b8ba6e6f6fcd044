"""The output of ``kdrsdl evaluate``: the terminal table, the F-measure matrix and ``report.md``
with each sequence's curves and contact sheet."""

import pathlib
from typing import Any

import cv2
import numpy as np

from core.evaluation.metrics import ScoreHistogram
from streamer.evaluation.cdnet import Sequence

#: Scored frames a report's contact sheet shows per sequence.
CONTACT_ROWS = 4


def _fmt(v, width=9, digits=3):
    return f"{v:{width}.{digits}f}" if isinstance(v, float) else f"{'-':>{width}s}"


def format_table(result: dict[str, Any]) -> str:
    """The result as fixed-width text: a row per sequence and method, then CDnet's means."""
    cols = ("f_measure", "precision", "recall", "pwc", "auc", "shadow_fg", "fps")
    head = f"{'sequence':28s}{'method':14s}" + "".join(f"{c:>10s}" for c in cols)
    lines = [f"{result['root']}  protocol={result['protocol']}", head]
    for name, s in result["sequences"].items():
        lines.append(
            f"{name:28s}{'':14s}processed {s['frames_processed']} frames, scored {s['frames_scored']}"
            + (f" ({s['note']})" if "note" in s else "")
        )
        for m, e in s["methods"].items():
            if e["available"]:
                digits = {"fps": 0, "pwc": 2}
                lines.append(f"{'':28s}{m:14s}" + "".join(" " + _fmt(e.get(c), 9, digits.get(c, 3)) for c in cols))
    lines.append(
        "shadow_fg: the share of the pixels labelled hard shadow (50) that the mask flags (- where none is labelled)"
    )
    lines.append("mean per category, then overall (CDnet: mean of the per-sequence metrics, then of the categories)")
    means = ("f_measure", "precision", "recall", "pwc", "auc")
    for c, per in result["categories"].items():
        for m, v in per.items():
            lines.append(f"{c:28s}{m:14s}" + "".join(" " + _fmt(v.get(k), 9, 2 if k == "pwc" else 3) for k in means))
    for m, v in result["overall"].items():
        if v["n_categories"]:
            lines.append(
                f"{'overall':28s}{m:14s}" + "".join(" " + _fmt(v.get(k), 9, 2 if k == "pwc" else 3) for k in means)
            )
    for m, why in result["unavailable"].items():
        lines.append(f"{m}: unavailable: {why}")
    return "\n".join(lines)


def f_measure_matrix(result: dict[str, Any], key: str = "f_measure") -> str:
    """A Markdown table: a row per sequence, a column per method, then the category and overall means.

    With ``key="shadow_fg"`` (the share of CDnet's hard-shadow pixels flagged, lower is better): the
    sequences that label shadows only, and no means.
    """
    methods = [m for m in result["methods"] if m not in result["unavailable"]]
    lines = ["| sequence | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    shadow = key == "shadow_fg"

    def row(label, values):
        pick = min if shadow else max
        best = pick((v for v in values if v is not None), default=None)
        cells = ["-" if v is None else (f"**{v:.3f}**" if v == best else f"{v:.3f}") for v in values]
        return f"| {label} | " + " | ".join(cells) + " |"

    for name, s in result["sequences"].items():
        values = [s["methods"].get(m, {}).get(key) for m in methods]
        if not shadow or any(v is not None for v in values):
            lines.append(row(name, values))
    if shadow:
        return "\n".join(lines)
    for c, per in result["categories"].items():
        lines.append(row(f"mean of {c}", [per.get(m, {}).get(key) for m in methods]))
    lines.append(row("**overall (CDnet mean)**", [result["overall"][m].get(key) for m in methods]))
    return "\n".join(lines)


def sequence_figures(
    directory: pathlib.Path,
    seq: Sequence,
    entry: dict[str, Any],
    hists: dict[str, ScoreHistogram | None],
    X: np.ndarray,
    G: np.ndarray,
    first: int,
    scored: list[int],
    picked: dict[str, dict[int, np.ndarray]],
) -> None:
    """ROC / precision-recall figure and contact sheet of one sequence, in ``directory``.

    Parameters
    ----------
    directory : pathlib.Path
        Where ``<category>_<sequence>_curves.png`` and ``..._contact_sheet.png`` go (made if absent).
    seq : streamer.evaluation.cdnet.Sequence
    entry : dict
        The sequence's entry of the result (per-method metrics, ``available``, ``auc``).
    hists : dict of str to ScoreHistogram or None
        Each method's score histogram (None for a mask-only method: a point, not a curve).
    X : ndarray, shape (n_frames, h, w), uint8
        The processed frames, from input frame ``first`` on.
    G : ndarray, shape (n_scored, h, w), uint8
        The ground truth of the scored frames (CDnet labels).
    first : int
        Number of ``X[0]`` (1-based, CDnet's numbering).
    scored : list of int
        Numbers of the scored frames, in the order of ``G``.
    picked : dict of str to dict of int to ndarray
        Each method's masks (h, w) bool of the frames the contact sheet shows, by frame number.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = seq.name.replace("/", "_")
    directory.mkdir(parents=True, exist_ok=True)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name, e in entry["methods"].items():
        if not e["available"]:
            continue
        hist = hists.get(name)
        if hist is not None:
            fpr, tpr = hist.roc_curve()
            ax1.plot(fpr, tpr, label=f"{name} (AUC {e['auc']:.3f})")
            n_pos, n_neg = hist.positive.sum(), hist.negative.sum()
            tp, fp = tpr[1:] * n_pos, fpr[1:] * n_neg
            ax2.plot(tpr[1:], tp / np.maximum(tp + fp, 1), label=name)
        else:
            ax1.plot([e["fpr"] or 0], [e["recall"] or 0], "o", label=name)
            ax2.plot([e["recall"] or 0], [e["precision"] or 0], "o", label=name)
    ax1.set(xlabel="false positive rate", ylabel="true positive rate", title=f"{seq.name}: ROC", xlim=(0, 0.1))
    ax2.set(xlabel="recall", ylabel="precision", title="precision-recall (points: binary masks)")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(directory / f"{stem}_curves.png", dpi=90)
    plt.close(fig)
    names = [n for n in entry["methods"] if entry["methods"][n]["available"]]
    h, w = X.shape[1:]
    scale = min(1.0, 160 / h)
    size = (max(1, int(w * scale)), max(1, int(h * scale)))

    def tile(img, label=None):
        t = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
        if label:
            cv2.putText(t, label, (3, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.45, 255, 1, cv2.LINE_AA)
        return t

    rows = []
    index = {i: k for k, i in enumerate(scored)}
    for i in sorted(picked[names[0]]) if names else []:
        g = G[index[i]]
        gt = np.where(g == 255, 255, np.where((g == 0) | (g == 50), 0, 128)).astype(np.uint8)
        cells = [tile(X[i - first], f"frame {i}"), tile(gt, "ground truth")]
        cells += [tile(picked[n][i].astype(np.uint8) * 255, n) for n in names]
        rows.append(np.hstack(cells))
    if rows:
        cv2.imwrite(str(directory / f"{stem}_contact_sheet.png"), np.vstack(rows))


def write_report(directory: str | pathlib.Path, result: dict[str, Any]) -> None:
    """``report.md``: the F-measure matrix, every sequence's rows, curves and contact sheet."""
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    lines = [f"# Evaluation: {result['root']}", "", f"Protocol `{result['protocol']}`.", ""]
    if result["protocol"] == "cdnet":
        lines += ["## F-measure", "", f_measure_matrix(result), ""]
        lines += [
            "## Cast shadows",
            "",
            "The share of the pixels CDnet labels hard shadow (50) that each method's mask flags as foreground "
            "(CDnet scores them as background; lower is better).",
            "",
            f_measure_matrix(result, "shadow_fg"),
            "",
        ]
    lines += ["## Every figure", "", "```", format_table(result), "```", ""]
    for name in result["sequences"]:
        stem = name.replace("/", "_")
        if (d / f"{stem}_curves.png").is_file():
            lines += [
                f"## {name}",
                "",
                f"![{name}: ROC and precision-recall]({stem}_curves.png)",
                "",
                "Contact sheet, one row per sampled scored frame: input | ground truth (gray = not scored) | "
                "each method's mask",
                "",
                f"![{name}: contact sheet]({stem}_contact_sheet.png)",
                "",
            ]
    (d / "report.md").write_text("\n".join(lines))
