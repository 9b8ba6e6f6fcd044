"""Motion on MQTT, with Home Assistant's discovery (the worker's ``[mqtt]`` table).

What the worker publishes, ``<prefix>`` being ``[mqtt] topic_prefix`` (``kdrsdl``):

- ``<prefix>/<camera>/motion``: ``ON`` while any event of the camera is in progress (a zone's,
  or the whole frame's without zones), ``OFF`` when the last one ended; retained.
- ``<prefix>/<camera>/<zone>/motion``: the same for each named zone; retained.
- ``<prefix>/events``: each event's JSON, the very header of the ``event/<camera>/`` message.
- ``<prefix>/<camera>/available``: ``online`` once connected, ``offline`` as the client's last
  will (the broker sends it when the worker dies) and at a clean stop; retained.
- Home Assistant's MQTT discovery, retained, at each connection:
  ``<discovery_prefix>/binary_sensor/kdrsdl_<camera>/<object>/config`` for the camera's motion and
  each zone's, device class ``motion``, one device per camera.

paho-mqtt runs the connection on its own thread (``loop_start``): it connects, reconnects with
back-off (1 s doubling to 30 s) and keeps the messages of QoS 1 while the broker is away, up to
``[mqtt] queue``. The frame path only hands it a message when an event happens, and never waits:
a broker that is down or refuses the login costs the frames nothing. What could not be queued is
counted (``kdrsdl_mqtt_messages_dropped_total``), as is what the broker acknowledged
(``kdrsdl_mqtt_messages_published_total``); ``kdrsdl_mqtt_connected`` is 1 while connected.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import paho.mqtt.client as paho

from streamer.motion.events import FRAME, Event

if TYPE_CHECKING:
    from streamer.config import MqttConfig
    from streamer.ops.metrics import WorkerMetrics


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
        self.active: set[str] = set()  # zones with an event in progress
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
        self.client.max_queued_messages_set(cfg.queue)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish

    def start(self) -> None:
        """Connect in the background (paho's thread); the broker may be down: it retries."""
        self.client.connect_async(self.cfg.host or "", self.cfg.port, keepalive=self.cfg.keepalive)
        self.client.loop_start()

    def events(self, events: Sequence[Event], headers: Sequence[bytes]) -> None:
        """Publish a frame's events (their wire headers as the JSON) and the motion states they change."""
        for e, header in zip(events, headers, strict=True):
            self._publish(self.events_topic, header, retain=False)
            if e.event == "start":
                self._set(e.zone, True)
            elif e.event == "end":
                self._set(e.zone, False)

    def stop(self) -> None:
        """Say ``offline``, and disconnect (at the worker's clean stop)."""
        try:
            info = self.client.publish(self.available, "offline", qos=1, retain=True)
            if self.client.is_connected():
                info.wait_for_publish(timeout=2)
        except (RuntimeError, ValueError):  # not connected: the will says it
            pass
        self.client.disconnect()
        self.client.loop_stop()

    def _set(self, zone: str, on: bool) -> None:
        """A zone's motion changed: its topic, and the camera's when it changes too."""
        with self._lock:
            before = bool(self.active)
            (self.active.add if on else self.active.discard)(zone)
            after = bool(self.active)
        if zone != FRAME and zone in self.motion_topic:
            self._publish(self.motion_topic[zone], "ON" if on else "OFF", retain=True)
        if before != after or zone == FRAME:
            self._publish(self.motion_topic[FRAME], "ON" if after else "OFF", retain=True)

    def _publish(self, topic: str, payload: Any, retain: bool) -> None:
        """Hand a message to paho (QoS 1); one it cannot queue is counted as dropped."""
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        if info.rc != paho.MQTT_ERR_SUCCESS and info.rc != paho.MQTT_ERR_NO_CONN:
            self.m.mqtt_dropped.inc()
            self.log.warning("mqtt: %s not queued (%s)", topic, paho.error_string(info.rc))

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            self.log.warning("mqtt: %s:%d refused the connection: %s", self.cfg.host, self.cfg.port, reason)
            return
        self.m.mqtt_connected.set(1)
        self.log.info("mqtt: connected to %s:%d", self.cfg.host, self.cfg.port)
        client.publish(self.available, "online", qos=1, retain=True)
        if self.cfg.discovery:
            for topic, config in self.discovery().items():
                client.publish(topic, json.dumps(config), qos=1, retain=True)
        with self._lock:
            active = set(self.active)
        for zone, topic in self.motion_topic.items():
            on = bool(active) if zone == FRAME else zone in active
            client.publish(topic, "ON" if on else "OFF", qos=1, retain=True)

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.m.mqtt_connected.set(0)
        if reason.is_failure:
            self.m.mqtt_disconnects.inc()
            self.log.warning("mqtt: disconnected (%s); reconnecting", reason)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        self.m.mqtt_published.inc()

    def discovery(self) -> dict[str, dict[str, Any]]:
        """Home Assistant's discovery configs, by topic: the camera's motion sensor and each zone's."""
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
        return out
