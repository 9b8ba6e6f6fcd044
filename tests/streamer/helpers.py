"""Real processes and real sockets for the service tests."""

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import portpicker
import pytest
import zmq
import zmq.utils.monitor
from prometheus_client.parser import text_string_to_metric_families

from streamer.wire.protocol import decode


def free_port():
    """A TCP port free now and never handed out before in this run (portpicker: two bare ``bind(0)``
    calls can return the same port, and a worker given it twice cannot start)."""
    return portpicker.pick_unused_port()


def tcp():
    return f"tcp://127.0.0.1:{free_port()}"


#: Every process :func:`kdrsdl` started, so that a failed test leaves none running (tests/conftest.py).
STARTED: list[subprocess.Popen] = []


#: The thread variables a user's shell usually lacks (the worker sets its own threads).
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def kdrsdl(*args, env=None, bare=False, **kw):
    """Start ``python -m streamer ARGS`` as a real process (stderr captured).

    With ``bare`` no thread variable is passed, as from a user's shell; else OPENBLAS_NUM_THREADS=1.
    """
    env = dict(env or os.environ, PYTHONUNBUFFERED="1")
    if bare:
        for name in THREAD_VARIABLES:
            env.pop(name, None)
    else:
        env["OPENBLAS_NUM_THREADS"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamer", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        **kw,
    )
    STARTED.append(proc)
    return proc


def start_worker(frames, masks, port, *extra, camera="cam1", **kw):
    """Start ``kdrsdl worker`` on these endpoints and metrics port; ``extra`` are more flags."""
    return kdrsdl(
        "worker", "--camera", camera, "--frames-endpoint", frames, "--masks-endpoint", masks, "--metrics-port", port,
        *extra, **kw,
    )  # fmt: skip


def start_capture(frames, source, *extra, camera="cam1", **kw):
    """Start ``kdrsdl capture`` from ``source`` to ``frames``; ``extra`` are more flags (``--fps``...)."""
    return kdrsdl("capture", "--camera", camera, "--source", source, "--frames-endpoint", frames, *extra, **kw)


def memory_mib(pid, field="VmRSS"):
    """A process's memory from ``/proc/PID/status``, MiB: ``VmRSS`` (resident now), ``VmHWM`` (its
    peak), or a part of it (``RssAnon``, ``RssFile``: its files' pages)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(f"no {field} in /proc/{pid}/status")


def _stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()


def child_pids(pid):
    """The live children of process ``pid`` (from ``/proc/*/stat``'s ppid)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(pid):
            try:
                if _stat(entry)[1] == str(pid):
                    out.append(int(entry))
            except OSError:  # ended meanwhile
                continue
    return out


def cpu_seconds(pid):
    """CPU seconds (user + system) a live process and its live children have used so far, from
    ``/proc/PID/stat`` (a worker's refits may run in a child: ``refit_process``)."""
    ticks = 0
    for p in (pid, *child_pids(pid)):
        try:
            fields = _stat(p)
        except OSError:  # a child ended meanwhile
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


#: Seconds a started worker may take to serve /metrics: under 1 s alone; the margin is for a busy 2-core machine.
STARTUP_S = 60


def wait_for(cond, timeout, what, proc=None):
    """Poll ``cond()`` until it returns a truthy value; fail after ``timeout`` seconds, or at once,
    with its stderr, when the process ``proc`` (if given) has ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise AssertionError(f"{what}: the process ended (exit {proc.returncode}) first: {err[-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_for_metrics(proc, port, what="the worker's /metrics"):
    """The first scrape of the /metrics that the started process ``proc`` serves on ``port``."""
    return wait_for(lambda: scrape(port), STARTUP_S, what, proc)


def scrape(port):
    """``{(name, frozenset(labels.items())): value}`` from a /metrics endpoint, or None if it is down."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def pusher(endpoint):
    """A PUSH socket connected to a worker's frames ``endpoint``, as a capture's (no linger)."""
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(endpoint)
    return push


def subscriber(endpoint, camera, timeout=10, kind="mask"):
    """A SUB socket on ``<kind>/<camera>/`` (masks by default), returned once its connection is established."""
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, f"{kind}/{camera}/".encode())
    sub.setsockopt(zmq.LINGER, 0)
    mon = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_CONNECTED)
    sub.connect(endpoint)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if mon.poll(100):
            ev = zmq.utils.monitor.recv_monitor_message(mon)
            if ev["event"] in (zmq.EVENT_HANDSHAKE_SUCCEEDED,):
                break
    sub.disable_monitor()
    mon.close()
    time.sleep(0.1)  # the subscription travels right after the handshake
    return sub


def wait_for_line(proc, text, timeout):
    """Read ``proc``'s stderr (bytes) until a line holds ``text``; the lines read.

    The readiness signal of a process that logs it (``kdrsdl subscribe``: "connected to"). The
    rest of its stderr stays in the pipe for ``communicate``.
    """
    lines, found = [], queue.Queue()

    def read():
        for raw in iter(proc.stderr.readline, b""):
            lines.append(raw.decode(errors="replace"))
            if text in lines[-1]:
                found.put(True)
                return
        found.put(False)

    threading.Thread(target=read, daemon=True).start()
    try:
        ok = found.get(timeout=timeout)
    except queue.Empty:
        ok = False
    assert ok, f"no line with {text!r} within {timeout} s: {''.join(lines)[-2000:]}"
    return lines


def receive(sub, timeout):
    """Next mask message (decoded), or None after ``timeout`` seconds."""
    if not sub.poll(int(timeout * 1000)):
        return None
    return decode(sub.recv_multipart(), "mask")


def sent_from_log(stderr_text):
    m = re.search(r"stopped after (\d+) frames \((\d+) sent", stderr_text)
    assert m, stderr_text[-2000:]
    return int(m.group(1)), int(m.group(2))


def stop(proc, timeout=20):
    if proc.poll() is None:
        proc.terminate()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


RTSP_SERVER = os.path.join(os.path.dirname(__file__), "rtsp_server.py")


def system_gi_python():
    """/usr/bin/python3 if it can import gst-rtsp-server through gi, else None."""
    py = shutil.which("python3", path="/usr/bin")
    if not py:
        return None
    ok = (
        subprocess.run(
            [
                py,
                "-c",
                "import gi; gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer",
            ],
            capture_output=True,
        ).returncode
        == 0
    )
    return py if ok else None


def rtsp_server(source, port=0, codec="h264"):
    """Start the real gst-rtsp-server (tests/streamer/rtsp_server.py); return ``(process, port)``.

    ``codec``: "h264", or "jpeg" (Motion-JPEG).

    Skips the test when gst-rtsp-server is not installed.
    """
    py = system_gi_python()
    if py is None:
        pytest.skip(
            "gst-rtsp-server is not installed (Debian: gir1.2-gst-rtsp-server-1.0 python3-gi "
            "gstreamer1.0-plugins-base/good/ugly gstreamer1.0-libav)"
        )
    proc = subprocess.Popen(
        [py, RTSP_SERVER, str(source), str(port), codec], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        raise AssertionError(f"RTSP server did not start: {proc.stderr.read().decode()[-2000:]}")
    return proc, int(line)


def write_video(path, n_frames, fps, crossings, shape=(240, 320)):
    """Write a grayscale MJPG video: a still textured background and a bright 40 x 50 box crossing it.

    Parameters
    ----------
    path : str or pathlib.Path
        An ``.avi`` file.
    n_frames : int
    fps : float
        The frame rate the file declares, frames per second.
    crossings : list of (int, int)
        ``(first, last)`` frames (inclusive) in which a box is in view, moving 1.5 pixels a frame
        to the right from x = 20: each is one motion event of ``(last - first) / fps`` seconds.
    shape : (int, int)
        ``(height, width)`` in pixels.
    """
    import cv2
    import numpy as np

    h, w = shape
    rng = np.random.default_rng(0)
    bg = cv2.GaussianBlur(rng.integers(40, 200, (h, w)).astype(np.uint8), (9, 9), 3)
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
    for t in range(n_frames):
        frame = bg.copy()
        for first, last in crossings:
            if first <= t <= last:
                x = int(20 + (t - first) * 1.5)
                frame[h // 2 - 25 : h // 2 + 25, x : x + 40] = 250
        out.write(cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR))
    out.release()
