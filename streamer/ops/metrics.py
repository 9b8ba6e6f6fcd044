"""Prometheus metrics of the capture and worker processes (docs/design.md, "Metrics").

Prefix ``kdrsdl_``, label ``camera``. Counters end in ``_total`` and durations
in ``_seconds``; rates are left to PromQL. Each process owns its registry
(:class:`CaptureMetrics`, :class:`WorkerMetrics`): its own series, ``kdrsdl_build_info``, and
prometheus_client's process, platform and garbage-collector collectors
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ...).
"""

import importlib.metadata
import platform
import socketserver
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    make_wsgi_app,
)

from streamer.wire.protocol import REASONS

#: /healthz answers 503 when the main loop made no progress for this long (seconds).
STALE_AFTER_S = 30.0


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

#: Every label value each labelled series takes: created at 0 with the process's metrics, and the
#: only values the code increments (:class:`WorkerMetrics` binds them by these names).
CAPTURE_DROP_REASONS = ("hwm", "corrupt")
WORKER_DROP_REASONS = ("overload", "shutdown", "error")
SOLVER_MODES = ("warm", "cold")
CHECKPOINT_WRITE_RESULTS = ("ok", "error")
CHECKPOINT_RESTORE_RESULTS = ("warm", "window", "corrupt", "mismatch")
SOCKETS = ("frames", "masks")
#: :data:`streamer.wire.protocol.REASONS`, and "seq" for a repeated or old sequence number.
REJECT_REASONS = (*REASONS, "seq")


class _ProcessMetrics:
    """A process's own registry: its build information, the process collectors, /healthz's heartbeat.

    Parameters
    ----------
    camera : str
    role : str
        "capture" or "worker" (``kdrsdl_build_info{role}``).
    """

    def __init__(self, camera: str, role: str) -> None:
        self.camera = camera
        self.registry = CollectorRegistry(auto_describe=True)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        info = self.gauge(
            "kdrsdl_build_info",
            "Build information (value 1); joins process_* series to their camera",
            ["version", "python", "role"],
        )
        info.labels(camera, __version__, platform.python_version(), role).set(1)
        self._last_beat = time.monotonic()

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        """A counter family on this process's registry, labelled ``camera`` and ``labels``."""
        return Counter(name, doc, ["camera", *labels], registry=self.registry)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        """A gauge family on this process's registry, labelled ``camera`` and ``labels``."""
        return Gauge(name, doc, ["camera", *labels], registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: Sequence[float]) -> Histogram:
        """A histogram family on this process's registry, labelled ``camera``."""
        return Histogram(name, doc, ["camera"], buckets=buckets, registry=self.registry)

    def beat(self) -> None:
        """Record that the main loop made progress (read by /healthz)."""
        self._last_beat = time.monotonic()

    def app(self) -> Callable[..., Iterable[bytes]]:
        """The WSGI app of /metrics (this registry) and /healthz (:func:`health` of the heartbeat)."""
        metrics_app = make_wsgi_app(self.registry)

        def app(environ, start_response):
            if environ.get("PATH_INFO") == "/healthz":
                status, body = health(time.monotonic() - self._last_beat)
                start_response(status, [("Content-Type", "text/plain")])
                return [body.encode()]
            return metrics_app(environ, start_response)

        return app

    def serve(self, port: int, addr: str = "127.0.0.1") -> WSGIServer | None:
        """Serve /metrics and /healthz on ``addr:port`` from a thread; None when ``port`` is 0.

        ``/healthz`` answers 200 while :meth:`beat` was called within ``STALE_AFTER_S`` seconds,
        else 503: it tells a live process from a stuck one.

        Raises
        ------
        OSError
            If the port is taken or the address cannot be bound.
        """
        self.beat()
        if not port:
            return None
        return start_http(self.app(), addr, port, "metrics")


class CaptureMetrics(_ProcessMetrics):
    """The capture's series, on its own registry, bound to one camera (created at 0).

    Parameters
    ----------
    camera : str
    """

    def __init__(self, camera: str) -> None:
        super().__init__(camera, "capture")
        c = camera
        self.frames = self.counter(
            "kdrsdl_capture_frames_total", "Frames read from the source (sent + dropped)"
        ).labels(c)
        dropped = self.counter("kdrsdl_capture_frames_dropped_total", "Frames read but not sent", ["reason"])
        self.dropped = {r: dropped.labels(c, r) for r in CAPTURE_DROP_REASONS}
        self.reconnects = self.counter(
            "kdrsdl_capture_reconnects_total", "Times the source was reopened after a failure"
        ).labels(c)
        self.connected = self.gauge("kdrsdl_capture_connected", "1 while the source delivers frames, else 0").labels(c)
        self.last_frame = self.gauge(
            "kdrsdl_capture_last_frame_timestamp_seconds", "Unix time of the last frame read"
        ).labels(c)


class WorkerMetrics(_ProcessMetrics):
    """The worker's series, on its own registry, bound to one camera (label values from the tuples
    above; every series created at 0).

    Parameters
    ----------
    camera : str
    zones : sequence of str
        The zones of the motion events: the named zones, or ``["frame"]`` without any.
    mqtt : bool
        Whether the worker publishes on MQTT: the ``kdrsdl_mqtt_*`` series exist only then, so
        that a worker without MQTT never looks disconnected from a broker it has none of.
    """

    def __init__(self, camera: str, zones: Sequence[str] = ("frame",), mqtt: bool = False) -> None:
        super().__init__(camera, "worker")
        c, counter, gauge, histogram = camera, self.counter, self.gauge, self.histogram
        self.received = counter("kdrsdl_worker_frames_received_total", "Valid frames received").labels(c)
        self.processed = counter("kdrsdl_worker_frames_processed_total", "Frames turned into a published mask").labels(
            c
        )
        dropped = counter("kdrsdl_worker_frames_dropped_total", "Valid frames received but not processed", ["reason"])
        self.dropped = {r: dropped.labels(c, r) for r in WORKER_DROP_REASONS}
        self.lost = counter(
            "kdrsdl_worker_frames_lost_total", "Frames never received (sequence gaps within an epoch)"
        ).labels(c)
        rejected = counter("kdrsdl_worker_messages_rejected_total", "Messages that broke the protocol", ["reason"])
        self.rejected = {r: rejected.labels(c, r) for r in REJECT_REASONS}
        self.backlog = gauge("kdrsdl_worker_backlog_frames", "Frames received and waiting to be processed").labels(c)
        self.restarts_seen = counter(
            "kdrsdl_worker_capture_restarts_total", "New capture epochs seen (capture restarts)"
        ).labels(c)
        writes = counter(
            "kdrsdl_worker_checkpoint_writes_total", "Checkpoints written, by result (ok, error)", ["result"]
        )
        self.checkpoint_writes = {r: writes.labels(c, r) for r in CHECKPOINT_WRITE_RESULTS}
        restores = counter(
            "kdrsdl_worker_checkpoint_restores_total",
            "Checkpoints found at start, by outcome (warm, window, corrupt, mismatch)",
            ["result"],
        )
        self.checkpoint_restores = {r: restores.labels(c, r) for r in CHECKPOINT_RESTORE_RESULTS}
        self.checkpoint_last_write = gauge(
            "kdrsdl_worker_checkpoint_last_write_timestamp_seconds", "Unix time of the last checkpoint written"
        ).labels(c)
        refused = counter(
            "kdrsdl_worker_handshakes_failed_total", "Peers refused by CURVE, by socket (frames, masks)", ["socket"]
        )
        self.handshakes_failed = {s: refused.labels(c, s) for s in SOCKETS}
        self.last_progress = gauge(
            "kdrsdl_worker_last_progress_timestamp_seconds", "Unix time the main loop last made progress"
        ).labels(c)
        # latency
        self.end_to_end = histogram(
            "kdrsdl_end_to_end_latency_seconds", "Capture to mask published", LATENCY_BUCKETS
        ).labels(c)
        self.solve_duration = histogram(
            "kdrsdl_solve_duration_seconds", "Model time per frame (including refits)", LATENCY_BUCKETS
        ).labels(c)
        self.refit_duration = histogram(
            "kdrsdl_refit_duration_seconds", "Window refit (KDRSDL solve) time", LATENCY_BUCKETS
        ).labels(c)
        # The refits' CPU beside their wall time: on a busy host the refit thread (nice +10) waits for
        # the frames, and its wall time grows while its CPU does not (docs/runbook.md).
        self.refit_cpu = counter(
            "kdrsdl_refit_cpu_seconds", "CPU time of the window refits (their thread's own)"
        ).labels(c)
        # solver
        self.iterations = histogram(
            "kdrsdl_solver_iterations", "Iterations per window refit", ITERATION_BUCKETS
        ).labels(c)
        self.residual = gauge("kdrsdl_solver_residual_ratio", "Stopping criterion at the end of the last refit").labels(
            c
        )
        self.rank = gauge("kdrsdl_solver_rank", "Numerical rank of A after the last refit").labels(c)
        starts = counter("kdrsdl_solver_starts_total", "Window refits by start", ["mode"])
        self.starts = {m: starts.labels(c, m) for m in SOLVER_MODES}
        self.not_converged = counter("kdrsdl_solver_not_converged_total", "Refits that stopped at max_iter").labels(c)
        self.resets = counter(
            "kdrsdl_solver_resets_total", "Resets to a cold start (numerical trouble, shape change)"
        ).labels(c)
        # output
        self.masks_published = counter("kdrsdl_masks_published_total", "Masks published").labels(c)
        self.fg_ratio = gauge("kdrsdl_mask_foreground_ratio", "Foreground fraction of the last mask").labels(c)
        self.light_changes = counter(
            "kdrsdl_light_changes_total", "Changes of light the model absorbed (not reported as motion)"
        ).labels(c)
        zone_fg = gauge(
            "kdrsdl_zone_foreground_ratio", "Foreground fraction of a named zone in the last mask", ["zone"]
        )
        self.zone_fg_ratio = {z: zone_fg.labels(c, z) for z in zones if z != "frame"}
        events = counter(
            "kdrsdl_motion_events_total",
            "Events published, by zone and kind (start, end, light_change, end_of_stream)",
            ["zone", "kind"],
        )
        self.events = {(z, k): events.labels(c, z, k) for z in zones for k in ("start", "end")}
        for kind in ("light_change", "end_of_stream"):  # whole-frame kinds
            self.events["frame", kind] = events.labels(c, "frame", kind)
        snapshots = counter("kdrsdl_snapshots_total", "Event snapshots taken, by trigger (start, peak)", ["trigger"])
        self.snapshots = {t: snapshots.labels(c, t) for t in ("start", "peak")}
        self.snapshot_write_errors = counter(
            "kdrsdl_snapshot_write_errors_total", "Snapshots that could not be written to [events] snapshot_dir"
        ).labels(c)
        self.viewers = gauge("kdrsdl_view_viewers", "Live view streams open now").labels(c)
        # MQTT ([mqtt]; streamer.wire.mqtt), only where it is configured
        if mqtt:
            self.mqtt_connected = gauge("kdrsdl_mqtt_connected", "1 while connected to the MQTT broker, else 0").labels(
                c
            )
            self.mqtt_messages = counter(
                "kdrsdl_mqtt_messages_total", "MQTT messages handed to the client (published + dropped + queued)"
            ).labels(c)
            self.mqtt_published = counter(
                "kdrsdl_mqtt_messages_published_total", "MQTT messages the broker acknowledged"
            ).labels(c)
            self.mqtt_dropped = counter(
                "kdrsdl_mqtt_messages_dropped_total",
                "MQTT messages not delivered: the queue was full, or a newer snapshot replaced a kept one",
            ).labels(c)
            self.mqtt_disconnects = counter(
                "kdrsdl_mqtt_disconnects_total", "Connections to the MQTT broker lost (it reconnects)"
            ).labels(c)

    def progress(self) -> None:
        """The main loop made progress: the gauge, and the /healthz heartbeat."""
        self.last_progress.set(time.time())
        self.beat()


class BrokerMetrics(_ProcessMetrics):
    """The broker's series, on its own registry (``camera`` is the topic's camera).

    Parameters
    ----------
    name : str
        The broker's name in ``kdrsdl_build_info{camera}`` (the configuration's ``camera``).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name, "broker")
        self.messages = self.counter(
            "kdrsdl_broker_messages_total", "Messages forwarded to the subscribers, by camera and kind", ["kind"]
        )
        self.subscriptions = Counter(
            "kdrsdl_broker_subscriptions_total",
            "Subscriptions and unsubscriptions the subscribers sent, by change (subscribe, unsubscribe)",
            ["change"],
            registry=self.registry,
        )
        self.subscribed = {c: self.subscriptions.labels(c) for c in ("subscribe", "unsubscribe")}
        self.handshakes_failed = self.counter(
            "kdrsdl_broker_handshakes_failed_total",
            "CURVE handshakes refused, by side (workers: the broker as their client; subscribers)",
            ["socket"],
        )


def start_http(app: Callable[..., Iterable[bytes]], addr: str, port: int, name: str) -> WSGIServer:
    """Serve the WSGI ``app`` on ``addr:port`` from a daemon thread, a thread per request (quiet log).

    Raises
    ------
    OSError
        If the port is taken or the address cannot be bound.
    """
    try:
        server = make_server(addr, port, app, _Server, handler_class=_Quiet)
    except OSError as exc:  # the bare error does not say which port
        raise OSError(exc.errno, f"cannot serve {name} on {addr}:{port}: {exc.strerror}") from None
    threading.Thread(target=server.serve_forever, daemon=True, name=name).start()
    return server
