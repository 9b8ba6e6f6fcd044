"""Shared test helpers: where the real data is, and how to skip without it."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = pathlib.Path(os.environ.get("KDRSDL_SHARED", ROOT.parent / "shared"))
HIGHWAY = SHARED / "data" / "cdnet2014" / "baseline" / "highway"
MOTORWAY = SHARED / "data" / "video" / "motorway_320x240.avi"


def need(path):
    """Skip the test with a reason when real data is absent (a fresh clone has no ../shared)."""
    if not path.exists():
        pytest.skip(f"real data not found at {path} (it lives in ../shared/data beside the repo)")
    return path
