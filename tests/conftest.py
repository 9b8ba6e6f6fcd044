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
