"""Prometheus metrics of the capture and worker processes (docs/design.md, "Metrics").

Prefix ``kdrsdl_``, label ``camera``. Counters end in ``_total`` and durations
in ``_seconds``; rates are left to PromQL. The default registry also exports the
process collector (``process_cpu_seconds_total``, ``process_resident_memory_bytes``).
"""

import importlib.metadata
import platform
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import Counter, Gauge, Histogram, make_wsgi_app

from streamer.wire.protocol import REASONS

#: /healthz answers 503 when the main loop made no progress for this long (seconds).
STALE_AFTER_S = 30.0
_last_beat = [time.monotonic()]


def beat() -> None:
    """Record that the main loop made progress (read by /healthz)."""
    _last_beat[0] = time.monotonic()


def health(age_s: float, stale_after_s: float = STALE_AFTER_S) -> tuple[str, str]:
    """The /healthz answer for a main loop that last made progress ``age_s`` seconds ago.

    Returns
    -------
    (str, str)
        The HTTP status ("200 OK", or "503 Service Unavailable" from ``stale_after_s`` on) and the body.
    """
    ok = age_s < stale_after_s
    return (
        "200 OK" if ok else "503 Service Unavailable"
    ), f"{'ok' if ok else 'stale'}: last progress {age_s:.1f} s ago\n"


def _app():
    metrics_app = make_wsgi_app()

    def app(environ, start_response):
        if environ.get("PATH_INFO") == "/healthz":
            status, body = health(time.monotonic() - _last_beat[0])
            start_response(status, [("Content-Type", "text/plain")])
            return [body.encode()]
        return metrics_app(environ, start_response)

    return app


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


try:
    __version__ = importlib.metadata.version("kdrsdl-stream")  # one version: pyproject.toml's
except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "unknown"

#: Video latencies: a frame period at 100 fps is 10 ms, a refit can take seconds.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.033, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
ITERATION_BUCKETS = (1, 2, 3, 5, 8, 12, 20, 30, 50, 80, 150)

L = ["camera"]

build_info = Gauge(
    "kdrsdl_build_info",
    "Build information (value 1); joins process_* series to their camera",
    ["version", "python", "role", "camera"],
)

# capture
capture_frames = Counter("kdrsdl_capture_frames_total", "Frames read from the source (sent + dropped)", L)
capture_dropped = Counter("kdrsdl_capture_frames_dropped_total", "Frames read but not sent", L + ["reason"])
capture_reconnects = Counter("kdrsdl_capture_reconnects_total", "Times the source was reopened after a failure", L)
capture_connected = Gauge("kdrsdl_capture_connected", "1 while the source delivers frames, else 0", L)
capture_last_frame = Gauge("kdrsdl_capture_last_frame_timestamp_seconds", "Unix time of the last frame read", L)

# worker
worker_received = Counter("kdrsdl_worker_frames_received_total", "Valid frames received", L)
worker_processed = Counter("kdrsdl_worker_frames_processed_total", "Frames turned into a published mask", L)
worker_dropped = Counter(
    "kdrsdl_worker_frames_dropped_total", "Valid frames received but not processed", L + ["reason"]
)
worker_lost = Counter("kdrsdl_worker_frames_lost_total", "Frames never received (sequence gaps within an epoch)", L)
worker_rejected = Counter("kdrsdl_worker_messages_rejected_total", "Messages that broke the protocol", L + ["reason"])
worker_backlog = Gauge("kdrsdl_worker_backlog_frames", "Frames received and waiting to be processed", L)
worker_restarts_seen = Counter("kdrsdl_worker_capture_restarts_total", "New capture epochs seen (capture restarts)", L)
checkpoint_writes = Counter(
    "kdrsdl_worker_checkpoint_writes_total", "Checkpoints written, by result (ok, error)", L + ["result"]
)
checkpoint_restores = Counter(
    "kdrsdl_worker_checkpoint_restores_total",
    "Checkpoints found at start, by outcome (warm, window, corrupt, mismatch)",
    L + ["result"],
)
checkpoint_last_write = Gauge(
    "kdrsdl_worker_checkpoint_last_write_timestamp_seconds", "Unix time of the last checkpoint written", L
)
handshakes_failed = Counter(
    "kdrsdl_worker_handshakes_failed_total", "Peers refused by CURVE, by socket (frames, masks)", L + ["socket"]
)
worker_last_progress = Gauge(
    "kdrsdl_worker_last_progress_timestamp_seconds", "Unix time the main loop last made progress", L
)

# latency
end_to_end = Histogram("kdrsdl_end_to_end_latency_seconds", "Capture to mask published", L, buckets=LATENCY_BUCKETS)
solve_duration = Histogram(
    "kdrsdl_solve_duration_seconds", "Model time per frame (including refits)", L, buckets=LATENCY_BUCKETS
)
refit_duration = Histogram(
    "kdrsdl_refit_duration_seconds", "Window refit (KDRSDL solve) time", L, buckets=LATENCY_BUCKETS
)
#: The refits' CPU beside their wall time: on a busy host the refit thread (nice +10) waits for the
#: frames, and its wall time grows while its CPU does not (docs/runbook.md).
refit_cpu = Counter("kdrsdl_refit_cpu_seconds", "CPU time of the window refits (their thread's own)", L)

# solver
solver_iterations = Histogram("kdrsdl_solver_iterations", "Iterations per window refit", L, buckets=ITERATION_BUCKETS)
solver_residual = Gauge("kdrsdl_solver_residual_ratio", "Stopping criterion at the end of the last refit", L)
solver_rank = Gauge("kdrsdl_solver_rank", "Numerical rank of A after the last refit", L)
solver_starts = Counter("kdrsdl_solver_starts_total", "Window refits by start", L + ["mode"])
solver_not_converged = Counter("kdrsdl_solver_not_converged_total", "Refits that stopped at max_iter", L)
solver_resets = Counter("kdrsdl_solver_resets_total", "Resets to a cold start (numerical trouble, shape change)", L)

# output
masks_published = Counter("kdrsdl_masks_published_total", "Masks published", L)
mask_fg_ratio = Gauge("kdrsdl_mask_foreground_ratio", "Foreground fraction of the last mask", L)
light_changes = Counter("kdrsdl_light_changes_total", "Changes of light the model absorbed (not reported as motion)", L)
zone_fg_ratio = Gauge(
    "kdrsdl_zone_foreground_ratio", "Foreground fraction of a named zone in the last mask", L + ["zone"]
)
motion_events = Counter(
    "kdrsdl_motion_events_total",
    "Events published, by zone and kind (start, end, light_change, end_of_stream)",
    L + ["zone", "kind"],
)
view_viewers = Gauge("kdrsdl_view_viewers", "Live view streams open now", L)


#: Every label value each labelled series takes: created at 0 by :func:`serve`, and the only
#: values the code increments (:class:`WorkerMetrics` binds them by these names).
CAPTURE_DROP_REASONS = ("hwm",)
WORKER_DROP_REASONS = ("overload", "shutdown", "error")
SOLVER_MODES = ("warm", "cold")
CHECKPOINT_WRITE_RESULTS = ("ok", "error")
CHECKPOINT_RESTORE_RESULTS = ("warm", "window", "corrupt", "mismatch")
SOCKETS = ("frames", "masks")
#: :data:`streamer.wire.protocol.REASONS`, and "seq" for a repeated or old sequence number.
REJECT_REASONS = (*REASONS, "seq")


class CaptureMetrics:
    """The capture's series, bound to one camera.

    Parameters
    ----------
    camera : str
    """

    def __init__(self, camera: str) -> None:
        self.frames = capture_frames.labels(camera)
        self.dropped = {r: capture_dropped.labels(camera, r) for r in CAPTURE_DROP_REASONS}
        self.reconnects = capture_reconnects.labels(camera)
        self.connected = capture_connected.labels(camera)
        self.last_frame = capture_last_frame.labels(camera)


class WorkerMetrics:
    """The worker's series, bound to one camera (label values from the tuples above).

    Parameters
    ----------
    camera : str
    zones : sequence of str
        The zones of the motion events: the named zones, or ``["frame"]`` without any.
    """

    def __init__(self, camera: str, zones: Sequence[str] = ("frame",)) -> None:
        self.received = worker_received.labels(camera)
        self.processed = worker_processed.labels(camera)
        self.lost = worker_lost.labels(camera)
        self.backlog = worker_backlog.labels(camera)
        self.last_progress = worker_last_progress.labels(camera)
        self.restarts_seen = worker_restarts_seen.labels(camera)
        self.end_to_end = end_to_end.labels(camera)
        self.solve_duration = solve_duration.labels(camera)
        self.refit_duration = refit_duration.labels(camera)
        self.refit_cpu = refit_cpu.labels(camera)
        self.iterations = solver_iterations.labels(camera)
        self.residual = solver_residual.labels(camera)
        self.rank = solver_rank.labels(camera)
        self.not_converged = solver_not_converged.labels(camera)
        self.resets = solver_resets.labels(camera)
        self.masks_published = masks_published.labels(camera)
        self.fg_ratio = mask_fg_ratio.labels(camera)
        self.light_changes = light_changes.labels(camera)
        self.dropped = {r: worker_dropped.labels(camera, r) for r in WORKER_DROP_REASONS}
        self.starts = {m: solver_starts.labels(camera, m) for m in SOLVER_MODES}
        self.checkpoint_writes = {r: checkpoint_writes.labels(camera, r) for r in CHECKPOINT_WRITE_RESULTS}
        self.checkpoint_restores = {r: checkpoint_restores.labels(camera, r) for r in CHECKPOINT_RESTORE_RESULTS}
        self.checkpoint_last_write = checkpoint_last_write.labels(camera)
        self.handshakes_failed = {s: handshakes_failed.labels(camera, s) for s in SOCKETS}
        self.rejected = {r: worker_rejected.labels(camera, r) for r in REJECT_REASONS}
        self.zone_fg_ratio = {z: zone_fg_ratio.labels(camera, z) for z in zones if z != "frame"}
        self.events = {(z, k): motion_events.labels(camera, z, k) for z in zones for k in ("start", "end")}
        for kind in ("light_change", "end_of_stream"):  # whole-frame kinds
            self.events["frame", kind] = motion_events.labels(camera, "frame", kind)
        self.viewers = view_viewers.labels(camera)

    def progress(self) -> None:
        """The main loop made progress: the gauge, and the /healthz heartbeat."""
        self.last_progress.set(time.time())
        beat()


def serve(
    port: int, role: str, camera: str, addr: str = "127.0.0.1", zones: Sequence[str] = ("frame",)
) -> WSGIServer | None:
    """Serve /metrics and /healthz on ``addr:port`` (0 = off) and set build_info.

    Parameters
    ----------
    port : int
        TCP port; 0 disables the endpoint.
    role : str
        "capture" or "worker".
    camera : str
        Camera label; the per-camera series are created at 0 so they exist
        before the first event.
    addr : str
        Listen address (loopback by default; 0.0.0.0 in a pod, for Prometheus).
    zones : sequence of str
        The worker's event zones (:class:`WorkerMetrics`).

    Returns
    -------
    wsgiref.simple_server.WSGIServer or None
        The server (its ``shutdown()`` stops it), None when ``port`` is 0.

    Notes
    -----
    ``/healthz`` answers 200 while :func:`beat` was called within
    ``STALE_AFTER_S`` seconds, else 503: it tells a live process from a stuck one.
    """
    build_info.labels(__version__, platform.python_version(), role, camera).set(1)
    if role == "capture":
        CaptureMetrics(camera)  # creates every capture series at 0
    else:
        WorkerMetrics(camera, zones)  # creates every worker series at 0
    beat()
    if not port:
        return None
    return start_http(_app(), addr, port, "metrics")


def start_http(app: Callable[..., Iterable[bytes]], addr: str, port: int, name: str) -> WSGIServer:
    """Serve the WSGI ``app`` on ``addr:port`` from a daemon thread, a thread per request (quiet log).

    Raises
    ------
    OSError
        If the port is taken or the address cannot be bound.
    """
    server = make_server(addr, port, app, _Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True, name=name).start()
    return server
