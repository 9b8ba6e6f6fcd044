"""A fresh clone has no ../shared beside it: every test that reads it skips, saying why.

The tests that read ../shared/data carry the ``shared_data`` mark (conftest.need fails an unmarked
one). Here they all run with ``KDRSDL_SHARED`` pointing at a directory that does not exist, as on
a user's clone.
"""

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_every_real_data_test_skips_without_shared(tmp_path):
    env = dict(os.environ, KDRSDL_SHARED=str(tmp_path / "no-shared"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "shared_data", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    summary = out.strip().splitlines()[-1]
    skipped = int(re.search(r"(\d+) skipped", summary).group(1))
    assert "passed" not in summary and "failed" not in summary and "error" not in summary, summary
    # every marked test (the parametrised ones count once per case) skipped, naming the path (or,
    # first, another absent extra such as pybgs)
    reasons = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skipped >= 12 and reasons
    for line in reasons:
        assert "real data not found at " + str(tmp_path / "no-shared") in line or "optional extra" in line, line
