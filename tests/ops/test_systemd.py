"""systemd units verified by systemd-analyze, and sd_notify from a real worker (issue 5)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from helpers import kdrsdl, stop, tcp

UNITS = ("kdrsdl-worker@.service", "kdrsdl-capture@.service")


@pytest.fixture
def unit_dir(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    exe = shutil.which("kdrsdl", path=os.path.dirname(sys.executable)) or shutil.which("kdrsdl")
    assert exe, "the kdrsdl console script is not installed"
    for name in UNITS:
        text = (ROOT / "systemd" / name).read_text().replace("/usr/local/bin/kdrsdl", exe)
        (tmp_path / name).write_text(text)
        (tmp_path / name.replace("@.", "@cam1.")).write_text(text)  # an instance, as systemd would load it
    shutil.copy(ROOT / "systemd" / "kdrsdl.target", tmp_path)
    text = (ROOT / "systemd" / "kdrsdl-broker.service").read_text().replace("/usr/local/bin/kdrsdl", exe)
    (tmp_path / "kdrsdl-broker.service").write_text(text)
    return tmp_path


def test_units_verify_without_any_warning(unit_dir):
    proc = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "kdrsdl-worker@cam1.service",
            "kdrsdl-capture@cam1.service",
            "kdrsdl-broker.service",
            "kdrsdl.target",
        ],  # fmt: skip
        cwd=unit_dir,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_the_network_drop_in_verifies_and_adds_to_the_allowed_addresses(unit_dir):
    """Issue 27 (part): masks and metrics off the host by a documented drop-in."""
    drop_in = unit_dir / "kdrsdl-worker@cam1.service.d"
    drop_in.mkdir()
    shutil.copy(ROOT / "systemd" / "worker-network.conf", drop_in / "network.conf")
    proc = subprocess.run(
        ["systemd-analyze", "verify", "kdrsdl-worker@cam1.service"], cwd=unit_dir, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "IPAddressAllow=192.0.2.0/24" in (drop_in / "network.conf").read_text()
    assert "worker-network.conf" in (ROOT / "docs" / "operations.md").read_text()


# the worker 1.1 before its refit thread's setpriority was allowed (docs/operations.md)
@pytest.mark.parametrize(
    "unit, bound",
    [("kdrsdl-worker@cam1.service", 1.2), ("kdrsdl-capture@cam1.service", 1.5), ("kdrsdl-broker.service", 1.5)],
)
def test_hardening_exposure_level(unit_dir, unit, bound):
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", unit], cwd=unit_dir, capture_output=True, text=True
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout + proc.stderr)
    assert m, proc.stdout[-2000:]
    assert float(m.group(1)) <= bound  # docs/operations.md states these levels ("OK"; 4.0 is the bar)


def test_ready_then_watchdog_and_watchdog_stops_when_stuck(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.5)
    env_extra = {"NOTIFY_SOCKET": path}
    worker = kdrsdl(
        "worker",
        "--camera",
        "cam1",
        "--frames-endpoint",
        tcp(),
        "--masks-endpoint",
        tcp(),
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1", **env_extra),
    )

    def next_message(timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                return sock.recv(256).decode()
            except socket.timeout:
                continue
        return None

    try:
        assert next_message(30) == "READY=1"
        assert next_message(5) == "WATCHDOG=1"
        assert next_message(5) == "WATCHDOG=1"  # keeps coming while the loop runs (1/s)
        os.kill(worker.pid, signal.SIGSTOP)  # the main loop can make no progress
        next_message(1.5)  # at most one ping already in flight
        assert next_message(3) is None
        os.kill(worker.pid, signal.SIGCONT)
        assert next_message(5) == "WATCHDOG=1"
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        rc, _, err = stop(worker)
        sock.close()
    assert rc == 0, err[-2000:]


def _filter_allows(unit_text, call):
    """Whether the unit's ``SystemCallFilter=`` lines, in order, allow ``call`` (groups from systemd-analyze)."""
    allowed: set[str] = set()
    for i, line in enumerate(re.findall(r"^SystemCallFilter=(.*)$", unit_text, re.M)):
        deny = line.startswith("~")
        names = set()
        for item in line.lstrip("~").split():
            if item.startswith("@"):
                out = subprocess.run(["systemd-analyze", "syscall-filter", item], capture_output=True, text=True)
                names |= {w for w in out.stdout.split() if re.fullmatch(r"[a-z_0-9]+", w)}
            else:
                names.add(item)
        assert i or not deny, "the first SystemCallFilter= line is an allow list here"
        allowed = allowed - names if deny else allowed | names
    return call in allowed


def test_the_worker_unit_allows_the_refit_threads_setpriority(unit_dir):
    """A call the filter denies kills the process (SIGSYS): the refit thread lowers its own priority
    with setpriority (core/streaming/refit.py), which @resources, denied, holds."""
    text = (unit_dir / "kdrsdl-worker@.service").read_text()
    assert "~@privileged @resources" in text  # the rest of @resources stays denied
    assert _filter_allows(text, "setpriority")
    assert not _filter_allows(text, "sched_setscheduler") and not _filter_allows(text, "setrlimit")
    assert _filter_allows(text, "getpriority") and not _filter_allows(text, "reboot")
