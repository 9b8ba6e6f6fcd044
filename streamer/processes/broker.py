"""The broker: one endpoint for every camera's masks and events (``kdrsdl broker``).

ZeroMQ's own proxy (``zmq.proxy_steerable``) between an XSUB socket connected to every worker's
masks endpoint and an XPUB socket bound for subscribers: a consumer subscribes once, to one
endpoint, for every camera (``mask/``, ``event/``, or one camera's topics), and the workers do not
know it is there. Subscriptions travel upstream, so a worker still sends only what someone wants.

A slow subscriber: ZeroMQ's XPUB keeps a queue per subscriber, bounded by ``[broker] sndhwm``
messages; beyond it, that subscriber's messages are dropped (it sees them as gaps in ``seq``),
and neither the workers nor the other subscribers wait (tests/streamer/test_broker.py). A
worker that restarts is reconnected by ZeroMQ, and its new epoch starts its counters again.

A copy of every message goes to an in-process socket (the proxy's capture) that a thread counts by
camera and kind for Prometheus (:class:`streamer.ops.metrics.BrokerMetrics`); that socket drops
rather than waits, so counting never slows the proxy. SIGTERM stops the proxy through its control
socket.

CURVE (``[broker] curve_*``, docs/operations.md): toward the workers the broker is a CURVE client
with its own key pair and the workers' public key (each worker's ``curve_authorized_keys`` holds
the broker's public key); toward the subscribers it is a CURVE server with the same pair, admitting
the public keys in its own ``curve_authorized_keys``. Either side may stay plain. A refused
handshake on either side is logged and counted (``kdrsdl_broker_handshakes_failed_total{socket}``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import zmq

from streamer.config import Config
from streamer.ops.metrics import BrokerMetrics
from streamer.wire import security
from streamer.wire.protocol import kind_of

_CAPTURE = "inproc://kdrsdl-broker-capture"
_CONTROL = "inproc://kdrsdl-broker-control"
#: The in-process endpoints of the two sides' handshake monitors (CURVE only), by socket name.
_MONITORS = {
    "workers": "inproc://kdrsdl-broker-monitor-workers",
    "subscribers": "inproc://kdrsdl-broker-monitor-subscribers",
}


def run_broker(
    cfg: Config, stop: threading.Event, log: logging.Logger, notify: Callable[[str], None] | None = None
) -> int:
    """Forward every worker's masks and events to the subscribers until ``stop`` is set.

    The proxy runs on a thread of its own, with its sockets; this thread waits for ``stop`` (a
    signal handler runs here, never inside the proxy's C loop), beats for /healthz and the systemd
    watchdog, and stops the proxy through its control socket.

    Parameters
    ----------
    cfg : streamer.config.Config
        Its ``[broker]`` table: the workers' endpoints, the endpoint to bind, the per-subscriber
        high-water mark, the metrics port.
    stop : threading.Event
    log : logging.Logger
    notify : callable, optional
        sd_notify: ``READY=1`` once the sockets are up, ``WATCHDOG=1`` every second after.

    Returns
    -------
    int
        Exit status: 0.

    Raises
    ------
    zmq.ZMQError
        If an endpoint is malformed or the endpoint to bind is taken.
    """
    b = cfg.broker
    ctx: zmq.Context = zmq.Context.instance()
    m = BrokerMetrics(cfg.camera)
    m.serve(b.metrics_port, b.metrics_address)
    auth = security.start_authenticator(ctx, b.curve_authorized_keys) if b.curve_authorized_keys else None
    proxy = _Proxy(ctx, cfg)
    proxy.start()
    if not proxy.ready.wait(30) or proxy.error is not None:
        stop.set()
        proxy.join(5)
        if auth is not None:
            auth.stop()
        raise proxy.error or RuntimeError("the broker's proxy did not start within 30 s")
    counter = threading.Thread(target=_count, args=(ctx, m, stop), name="count", daemon=True)
    counter.start()
    monitors = {}
    for name in proxy.monitored:
        monitors[name] = ctx.socket(zmq.PAIR)
        monitors[name].connect(_MONITORS[name])
        m.handshakes_failed.labels(cfg.camera, name)  # the series exists at 0
    curve = ", ".join(f"CURVE toward the {n}" for n in proxy.monitored)
    log.info("%d worker(s) -> %s%s", len(b.workers), b.endpoint, f" ({curve})" if curve else "")
    if notify:
        notify("READY=1")
    while not stop.wait(1.0) and proxy.is_alive():
        for name, mon in monitors.items():
            for event in security.failed_handshakes(mon):
                m.handshakes_failed.labels(cfg.camera, name).inc()
                log.warning("%s side: refused a peer (%s)", name, event)
        m.beat()
        if notify:
            notify("WATCHDOG=1")
    stop.set()
    for mon in monitors.values():
        mon.close(linger=0)
    control = ctx.socket(zmq.PAIR)
    control.connect(_CONTROL)
    control.send(b"TERMINATE")
    proxy.join(5)
    control.close(linger=0)
    counter.join(2)
    if auth is not None:
        auth.stop()
    if proxy.error is not None:
        raise proxy.error
    return 0


class _Proxy(threading.Thread):
    """ZeroMQ's steerable proxy, XSUB (every worker) -> XPUB (subscribers), on its own thread and
    sockets; ``ready`` is set once they are bound and connected (``error`` holds a failure)."""

    def __init__(self, ctx: zmq.Context, cfg: Config) -> None:
        super().__init__(name="proxy", daemon=True)
        self.ctx, self.b = ctx, cfg.broker
        self.ready = threading.Event()
        self.error: Exception | None = None
        #: The sides with CURVE, whose handshakes are monitored ("workers", "subscribers").
        self.monitored = [
            n for n, on in (("workers", self.b.curve_server_key), ("subscribers", self.b.curve_authorized_keys)) if on
        ]

    def run(self) -> None:
        b, ctx = self.b, self.ctx
        socks = []
        try:
            xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
            capture = ctx.socket(zmq.PUB)  # drops when the counter lags: counting never slows the proxy
            control = ctx.socket(zmq.PAIR)
            socks = [xsub, xpub, capture, control]
            for sock in socks:
                sock.setsockopt(zmq.LINGER, 0)
            xpub.setsockopt(zmq.SNDHWM, b.sndhwm)
            xsub.setsockopt(zmq.RCVHWM, b.sndhwm)
            if b.curve_server_key:  # (the configuration checked that the secret key goes with it)
                security.make_client(xsub, b.curve_secret_key or "", b.curve_server_key)
            if b.curve_authorized_keys:
                security.make_server(xpub, b.curve_secret_key or "")
            for name, sock in (("workers", xsub), ("subscribers", xpub)):
                if name in self.monitored:
                    sock.monitor(_MONITORS[name], security.FAILED_HANDSHAKE_MASK)
            xpub.bind(b.endpoint)
            for endpoint in b.workers:
                xsub.connect(endpoint)
            capture.bind(_CAPTURE)
            control.bind(_CONTROL)
        except Exception as exc:  # a malformed endpoint, a taken port: the caller raises it
            self.error = exc
            self.ready.set()
            for sock in socks:
                sock.close()
            return
        self.ready.set()
        try:
            zmq.proxy_steerable(xsub, xpub, capture, control)
        except zmq.ZMQError as exc:
            self.error = exc
        finally:
            for sock in socks:
                sock.close()


def _count(ctx: zmq.Context, m: BrokerMetrics, stop: threading.Event) -> None:
    """Count the proxy's traffic by camera and kind, and the subscribers' (un)subscriptions."""
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.RCVHWM, 10000)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(_CAPTURE)
    try:
        while not stop.is_set():
            if not sock.poll(500):
                continue
            while sock.poll(0):
                parts = sock.recv_multipart(copy=False)
                first = parts[0].bytes
                if first[:1] in (b"\x00", b"\x01") and len(parts) == 1:  # a subscriber's (un)subscription
                    m.subscribed["subscribe" if first[:1] == b"\x01" else "unsubscribe"].inc()
                    continue
                kind = kind_of(parts)
                if kind is None:
                    continue
                camera = first.decode("utf-8", "replace").split("/")[1][:64]
                m.messages.labels(camera, kind).inc()
    finally:
        sock.close()
