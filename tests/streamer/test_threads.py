"""The worker sets its own BLAS, OpenMP and OpenCV threads, whatever the environment says (issue 26)."""

import os
import pathlib
import subprocess
import sys

import pytest
from helpers import (
    THREAD_VARIABLES,
    free_port,
    metric,
    scrape,
    start_capture,
    start_worker,
    stop,
    tcp,
    wait_for,
    wait_for_metrics,
)

#: A user's shell: no thread variable at all.
BARE = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}

PROBE = """
import cv2
from threadpoolctl import threadpool_info
from streamer.ops.threads import limit_threads
before = max(p["num_threads"] for p in threadpool_info())
print(before, cv2.getNumThreads())
print(limit_threads(1, 1))
print(max(p["num_threads"] for p in threadpool_info()), cv2.getNumThreads())
"""


def test_limit_threads_brings_every_pool_to_the_budget():
    out = subprocess.run([sys.executable, "-c", PROBE], env=BARE, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, said, after = out.stdout.splitlines()
    if os.cpu_count() > 1:  # without the limit, OpenBLAS and OpenCV take every core
        assert before == f"{os.cpu_count()} {os.cpu_count()}", before
    assert after == "1 1", (said, after)
    assert "openblas 1" in said and "OpenCV 1" in said


def test_the_worker_limits_its_threads_with_no_variable_in_the_environment(tmp_path):
    cfg = tmp_path / "w.toml"
    cfg.write_text("[worker]\nopencv_threads = 2\n")  # an operator's explicit setting wins
    port = free_port()
    proc = start_worker(tcp(), tcp(), port, "--config", cfg, bare=True)
    wait_for_metrics(proc, port)
    rc, _, err = stop(proc)
    assert rc == 0, err[-2000:]
    line = next(x for x in err.splitlines() if "threads:" in x)
    assert "openblas 1" in line and "OpenCV 2" in line, line
    assert "openblas 2" not in line


def _nice(pid, tid):
    """A thread's nice value, from ``/proc/PID/task/TID/stat`` (field 19); None if the thread has ended.

    A short-lived thread (the one that loads the compiled kernels) can end between the listing of
    ``/proc/PID/task`` and the read of its ``stat``.
    """
    try:
        return int(pathlib.Path(f"/proc/{pid}/task/{tid}/stat").read_text().rpartition(")")[2].split()[16])
    except (ProcessLookupError, FileNotFoundError):
        return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority is Linux's")
def test_the_workers_refit_thread_runs_below_its_frame_loop():
    frames, port = tcp(), free_port()
    proc = start_worker(frames, tcp(), port, bare=True)
    wait_for_metrics(proc, port)
    cap = start_capture(frames, "synthetic:160x120", "--fps", 50, "--max-frames", 60)
    wait_for(lambda: metric(scrape(port) or {}, "kdrsdl_solver_starts_total", camera="cam1", mode="cold") >= 1, 30,
             "a refit")  # fmt: skip
    listed = {int(t.name): _nice(proc.pid, t.name) for t in pathlib.Path(f"/proc/{proc.pid}/task").iterdir()}
    tasks = {tid: nice for tid, nice in listed.items() if nice is not None}
    stop(cap)
    rc, _, err = stop(proc)
    assert rc == 0, err[-2000:]
    assert tasks.pop(proc.pid) == 0  # the frame loop (the main thread) at the process's own priority
    assert sorted(tasks.values()).count(10) == 1, tasks  # the refit thread, and only it, at +10
