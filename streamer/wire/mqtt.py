"""Motion on MQTT, with Home Assistant's discovery (the worker's ``[mqtt]`` table).

What the worker publishes, ``<prefix>`` being ``[mqtt] topic_prefix`` (``kdrsdl``):

- ``<prefix>/<camera>/motion``: ``ON`` while any event of the camera is in progress (a zone's,
  or the whole frame's without zones), ``OFF`` when the last one ended; retained.
- ``<prefix>/<camera>/<zone>/motion``: the same for each named zone; retained.
- ``<prefix>/events``: each event's JSON, the very header of the ``event/<camera>/`` message.
- ``<prefix>/<camera>/snapshot``: the latest event snapshot, the JPEG's bytes
  (:mod:`streamer.motion.snapshots`); retained, so a client that comes later sees the last one.
- ``<prefix>/<camera>/available``: ``online`` once connected, ``offline`` as the client's last
  will (the broker sends it when the worker dies) and at a clean stop; retained.
- Home Assistant's MQTT discovery, retained, at each connection:
  ``<discovery_prefix>/binary_sensor/kdrsdl_<camera>/<object>/config`` for the camera's motion and
  each zone's, device class ``motion``, and ``<discovery_prefix>/camera/kdrsdl_<camera>/snapshot/config``
  for the snapshots (Home Assistant's MQTT camera); one device per camera.

paho-mqtt runs the connection on its own thread (``loop_start``): it connects and reconnects with
back-off (1 s doubling to 30 s). The frame path only hands it a message when an event happens,
and never waits: a broker that is down or refuses the login costs the frames nothing. While the
broker is away, the events' JSON wait here, the newest ``[mqtt] queue`` of them (an older one is
dropped, counted), and the motion states are only remembered: each connection publishes the
current states, the latest snapshot (one kept: a newer one replaces it, the older counted as
dropped), then the events that waited, oldest first. Everything handed to paho
(``kdrsdl_mqtt_messages_total``, QoS 1) ends acknowledged by the broker
(``kdrsdl_mqtt_messages_published_total``) or dropped (``kdrsdl_mqtt_messages_dropped_total``,
with the events dropped here); ``kdrsdl_mqtt_connected`` is 1 while connected.
"""

from __future__ import annotations

import collections
import json
import logging
import ssl
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import paho.mqtt.client as paho

from streamer.motion.events import FRAME, Event

if TYPE_CHECKING:
    from streamer.config import MqttConfig
    from streamer.ops.metrics import WorkerMetrics

#: Seconds between two log lines about failed connection attempts (paho retries every 1-30 s).
FAIL_LOG_EVERY_S = 300.0


class MqttPublisher:
    """A camera's motion, events and availability on MQTT (see the module's text).

    Parameters
    ----------
    cfg : streamer.config.MqttConfig
        The ``[mqtt]`` table (``host`` set).
    camera : str
    zones : sequence of str
        The named zones (empty without any).
    metrics : streamer.ops.metrics.WorkerMetrics
        Its ``mqtt_*`` series are counted here.
    log : logging.Logger
    """

    def __init__(
        self, cfg: MqttConfig, camera: str, zones: Sequence[str], metrics: WorkerMetrics, log: logging.Logger
    ) -> None:
        self.cfg, self.camera, self.zones, self.m, self.log = cfg, camera, list(zones), metrics, log
        base = f"{cfg.topic_prefix}/{camera}"
        self.available = f"{base}/available"
        self.motion_topic = {FRAME: f"{base}/motion", **{z: f"{base}/{z}/motion" for z in self.zones}}
        self.events_topic = f"{cfg.topic_prefix}/events"
        self.snapshot_topic = f"{base}/snapshot"
        self.pending_snapshot: bytes | None = None  # the latest snapshot while the broker is away
        self._fails, self._fail_logged = 0, 0.0  # failed connection attempts in a row, and when last logged
        self.active: set[str] = set()  # zones with an event in progress
        self.pending: collections.deque[bytes] = collections.deque()  # events while the broker is away
        self._lock = threading.Lock()
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, client_id=cfg.client_id or f"kdrsdl-{camera}", clean_session=True
        )
        if cfg.username is not None:
            self.client.username_pw_set(cfg.username, cfg.password)
        if cfg.tls_ca_file is not None:
            self.client.tls_set(ca_certs=cfg.tls_ca_file, tls_version=ssl.PROTOCOL_TLS_CLIENT)
        self.client.will_set(self.available, "offline", qos=1, retain=True)
        self.client.reconnect_delay_set(1, 30)
        # paho's own queue holds what is in flight; what waits for a broker that is away is ours
        self.client.max_queued_messages_set(cfg.queue + 64)
        self.client.on_connect = self._on_connect
        self.client.on_connect_fail = self._on_connect_fail
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish

    def start(self) -> None:
        """Connect in the background (paho's thread); the broker may be down: it retries."""
        self.client.connect_async(self.cfg.host or "", self.cfg.port, keepalive=self.cfg.keepalive)
        self.client.loop_start()

    def events(self, events: Sequence[Event], headers: Sequence[bytes]) -> None:
        """Publish a frame's events (their wire headers as the JSON) and the motion states they change."""
        for e, header in zip(events, headers, strict=True):
            self._event(header)
            if e.event == "start":
                self._set(e.zone, True)
            elif e.event == "end":
                self._set(e.zone, False)

    def snapshot(self, jpeg: bytes) -> None:
        """Publish an event's snapshot (retained); while the broker is away, keep the latest only."""
        with self._lock:
            if not self.client.is_connected():
                if self.pending_snapshot is not None:
                    self.m.mqtt_dropped.inc()
                self.pending_snapshot = jpeg
                return
        self._publish(self.snapshot_topic, jpeg, retain=True)

    def stop(self) -> None:
        """Say ``offline``, and disconnect (at the worker's clean stop)."""
        if self.client.is_connected():
            info = self._publish(self.available, "offline", retain=True)
            try:
                info.wait_for_publish(timeout=2)
            except (RuntimeError, ValueError):  # the connection went meanwhile: the will says it
                pass
        self.client.disconnect()
        self.client.loop_stop()

    def _set(self, zone: str, on: bool) -> None:
        """A zone's motion changed: its topic, and the camera's when it changes too. While the
        broker is away only the state is kept: the connection publishes the current one."""
        with self._lock:
            before = bool(self.active)
            (self.active.add if on else self.active.discard)(zone)
            after = bool(self.active)
        if not self.client.is_connected():
            return
        if zone != FRAME and zone in self.motion_topic:
            self._publish(self.motion_topic[zone], "ON" if on else "OFF", retain=True)
        if before != after or zone == FRAME:
            self._publish(self.motion_topic[FRAME], "ON" if after else "OFF", retain=True)

    def _event(self, header: bytes) -> None:
        """An event's JSON: published now, or kept (the newest ``[mqtt] queue``) until the broker is back."""
        with self._lock:
            if not self.client.is_connected():
                if len(self.pending) >= self.cfg.queue:
                    self.pending.popleft()
                    self.m.mqtt_dropped.inc()
                self.pending.append(header)
                return
        self._publish(self.events_topic, header, retain=False)

    def _publish(self, topic: str, payload: Any, retain: bool) -> paho.MQTTMessageInfo:
        """Hand a message to paho (QoS 1), counted: each ends acknowledged by the broker
        (``kdrsdl_mqtt_messages_published_total``) or dropped (``..._dropped_total``)."""
        self.m.mqtt_messages.inc()
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        if info.rc != paho.MQTT_ERR_SUCCESS and info.rc != paho.MQTT_ERR_NO_CONN:
            self.m.mqtt_dropped.inc()
            self.log.warning("mqtt: %s not queued (%s)", topic, paho.error_string(info.rc))
        return info

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            self.log.warning("mqtt: %s:%d refused the connection: %s", self.cfg.host, self.cfg.port, reason)
            return
        self.m.mqtt_connected.set(1)
        self._fails = 0
        self.log.info("mqtt: connected to %s:%d", self.cfg.host, self.cfg.port)
        self._publish(self.available, "online", retain=True)
        if self.cfg.discovery:
            for topic, config in self.discovery().items():
                self._publish(topic, json.dumps(config), retain=True)
        with self._lock:
            active, pending = set(self.active), list(self.pending)
            snapshot, self.pending_snapshot = self.pending_snapshot, None
            self.pending.clear()
        for zone, topic in self.motion_topic.items():
            on = bool(active) if zone == FRAME else zone in active
            self._publish(topic, "ON" if on else "OFF", retain=True)
        if snapshot is not None:
            self._publish(self.snapshot_topic, snapshot, retain=True)
        for header in pending:  # the events of the time away, oldest first
            self._publish(self.events_topic, header, retain=False)

    def _on_connect_fail(self, client: paho.Client, userdata: Any) -> None:
        """A failed attempt: logged at the first, then at most every :data:`FAIL_LOG_EVERY_S` with the count."""
        self._fails += 1
        now = time.monotonic()
        if self._fails == 1 or now - self._fail_logged >= FAIL_LOG_EVERY_S:
            self._fail_logged = now
            self.log.warning(
                "mqtt: cannot connect to %s:%d (down, or TLS refused); %d attempts so far, retrying",
                self.cfg.host,
                self.cfg.port,
                self._fails,
            )

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.m.mqtt_connected.set(0)
        if reason.is_failure:
            self.m.mqtt_disconnects.inc()
            self.log.warning("mqtt: disconnected (%s); reconnecting", reason)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        self.m.mqtt_published.inc()

    def discovery(self) -> dict[str, dict[str, Any]]:
        """Home Assistant's discovery configs, by topic: the camera's motion sensor, each zone's, and
        the snapshots' camera."""
        cfg, camera = self.cfg, self.camera
        device = {
            "identifiers": [f"kdrsdl_{camera}"],
            "name": f"kdrsdl {camera}",
            "manufacturer": "kdrsdl-stream",
            "model": "KDRSDL background subtraction",
        }
        out = {}
        for zone, state in self.motion_topic.items():
            object_id = "motion" if zone == FRAME else f"{zone}_motion"
            topic = f"{cfg.discovery_prefix}/binary_sensor/kdrsdl_{camera}/{object_id}/config".replace(".", "_")
            out[topic] = {
                "name": "Motion" if zone == FRAME else f"{zone} motion",
                "unique_id": f"kdrsdl_{camera}_{object_id}",
                "state_topic": state,
                "payload_on": "ON",
                "payload_off": "OFF",
                "device_class": "motion",
                "availability_topic": self.available,
                "payload_available": "online",
                "payload_not_available": "offline",
                "device": device,
            }
        topic = f"{cfg.discovery_prefix}/camera/kdrsdl_{camera}/snapshot/config".replace(".", "_")
        out[topic] = {
            "name": "Snapshot",
            "unique_id": f"kdrsdl_{camera}_snapshot",
            "topic": self.snapshot_topic,
            "availability_topic": self.available,
            "payload_available": "online",
            "payload_not_available": "offline",
            "device": device,
        }
        return out
