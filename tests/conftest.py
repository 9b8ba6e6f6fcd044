"""Shared test helpers: where the real data is, and how to skip without it."""

import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = pathlib.Path(os.environ.get("KDRSDL_SHARED", ROOT.parent / "shared"))
HIGHWAY = SHARED / "data" / "cdnet2014" / "baseline" / "highway"
MOTORWAY = SHARED / "data" / "video" / "motorway_320x240.avi"
CDNET = SHARED / "data" / "cdnet2014"
YALE = SHARED / "data" / "denoise" / "yaleB01"


#: Tests that called :func:`need` (node ids): each must carry the ``shared_data`` mark.
NEEDED: set[str] = set()


def need(path):
    """Skip the test with a reason when real data is absent (a fresh clone has no ../shared).

    A test that calls it (directly or through a fixture) is marked ``@pytest.mark.shared_data``:
    tests/test_fresh_clone.py runs every marked test without ../shared and checks that each
    skips, and a test that reads the data unmarked fails (:func:`pytest_runtest_makereport`).
    """
    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    if current:
        NEEDED.add(current)
    if not path.exists():
        pytest.skip(f"real data not found at {path} (it lives in ../shared/data beside the repo)")
    return path


def cdnet_counts(name, first_scored=0, last_scored=None, **knobs):
    """The default model (``knobs`` changed) over a CDnet sequence under ../shared, fed every frame
    from its first input to ``last_scored``: (tp, fp, fn) summed over its scored frames numbered
    ``first_scored``-``last_scored`` (CDnet's labels; outside the ROI and unknown not counted).
    Call it from a test marked ``shared_data``: it skips without the data (:func:`need`)."""
    import numpy as np

    from core.evaluation.metrics import cdnet_labels
    from core.streaming.background import KDRSDLBackgroundSubtractor
    from streamer.evaluation.cdnet import find_sequences
    from streamer.evaluation.protocols import scored_labels

    seq = next(q for q in find_sequences(need(CDNET / name)) if q.name == name)
    scored = [f for f in seq.scored_frames() if last_scored is None or f <= last_scored]
    X = seq.frames(seq.first_input, scored[-1])
    G = scored_labels(seq, scored, X.shape[1:])
    sub = KDRSDLBackgroundSubtractor(**knobs)
    at = {n: i for i, n in enumerate(scored)}
    tp = fp = fn = 0
    for i, image in enumerate(X):
        mask = sub.apply(image) > 0
        j = at.get(seq.first_input + i)
        if j is not None and seq.first_input + i >= first_scored:
            valid, fg = cdnet_labels(G[j])
            tp += np.count_nonzero(mask & fg)
            fp += np.count_nonzero(mask & valid & ~fg)
            fn += np.count_nonzero(~mask & fg)
    return tp, fp, fn


@pytest.fixture(autouse=True)
def _no_process_left_by_a_failed_test(request):
    """Kill the ``kdrsdl`` processes a failed test started and left running (its clean-up never ran).

    Processes of module-scoped fixtures start before this fixture and are not touched.
    """
    helpers = sys.modules.get("helpers")
    before = len(helpers.STARTED) if helpers is not None else 0
    yield
    helpers = sys.modules.get("helpers")
    report = getattr(request.node, "report_call", None)
    if helpers is None or report is None or report.passed:
        return
    for proc in helpers.STARTED[before:]:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Fail a test that read ../shared without the ``shared_data`` mark (it would go unchecked)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.report_call = report
    if report.when == "call" and report.passed and item.nodeid in NEEDED:
        if item.get_closest_marker("shared_data") is None:
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid} reads ../shared/data: mark it @pytest.mark.shared_data"
