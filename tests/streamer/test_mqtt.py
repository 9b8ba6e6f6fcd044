"""Motion on MQTT with Home Assistant's discovery (issue 48, in part), against a real Mosquitto.

A real worker fed the generated scene of test_events (a square crossing the zone "door"), its
``[mqtt]`` table pointing at a Mosquitto started here on a free port with a password file (the
password through ``${NAME}``); the test subscribes with paho. The broker down at the worker's
start: the masks flow, and MQTT comes once the broker is up.
"""

import getpass
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import cv2
import numpy as np
import paho.mqtt.client as paho
import pytest
from helpers import free_port, kdrsdl, wait_for
from test_events import CONFIG, DOOR, ENTER, QUIET, ROW, SIDE, SPEED, Run, W

MOSQUITTO = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)
pytestmark = pytest.mark.skipif(
    MOSQUITTO is None or shutil.which("mosquitto_passwd") is None,
    reason="Mosquitto is not installed (Debian package mosquitto; .ci/run installs it)",
)
USER, PASSWORD = "kdrsdl", "s3cret word"
#: The test's own subscriber: a user of its own, so the broker can let it in before the worker.
LISTENER = "listener"


def make_tls(directory):
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl): the paths by name."""
    d = directory
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "ca.key", "-out", d / "ca.crt",
        "-days", "1", "-subj", "/CN=kdrsdl test CA")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "server.key", "-out", d / "server.csr",
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", d / "server.csr", "-CA", d / "ca.crt", "-CAkey", d / "ca.key", "-CAcreateserial",
        "-out", d / "server.crt", "-days", "1", "-extfile", d / "san.ext")  # fmt: skip
    return {name: d / f"{name}" for name in ("ca.crt", "server.crt", "server.key")}


class Mosquitto:
    """A real Mosquitto on 127.0.0.1:``port`` with a password file (and TLS, given the
    :func:`make_tls` files); started and stopped by the test."""

    def __init__(self, tmp_path, port=None, tls=None):
        self.port = port or free_port()
        self.proc = None
        self.passwords = passwords = tmp_path / "passwords"
        subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), LISTENER, PASSWORD], check=True)
        self.allow(USER)
        self.conf = tmp_path / "mosquitto.conf"
        # as root, Mosquitto would switch to its own user, who cannot read pytest's private tmp_path
        user = f"user {getpass.getuser()}\n"
        tls_lines = ""
        if tls:
            tls_lines = f"cafile {tls['ca.crt']}\ncertfile {tls['server.crt']}\nkeyfile {tls['server.key']}\n"
        self.conf.write_text(
            f"{user}listener {self.port} 127.0.0.1\n{tls_lines}allow_anonymous false\npassword_file {passwords}\n"
            "persistence false\n"
        )

    def start(self):
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stderr=subprocess.PIPE)
        wait_for(lambda: _can_connect(self.port), 10, "mosquitto")
        return self

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def allow(self, user):
        """Add ``user`` to the password file; a running broker rereads it (SIGHUP)."""
        subprocess.run(["mosquitto_passwd", "-b", str(self.passwords), user, PASSWORD], check=True)
        self._reload()

    def deny(self, user):
        """Remove ``user`` from the password file: a running broker rereads it (SIGHUP), a stopped one
        reads it at its start; from then on that user's connections are refused."""
        subprocess.run(["mosquitto_passwd", "-D", str(self.passwords), user], check=True)
        self._reload()

    def _reload(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGHUP)


def _can_connect(port):
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Listener:
    """A paho client subscribed to everything: the messages in order, the retained ones by topic."""

    def __init__(self, port, ca=None):
        self.messages = []
        self.lock = threading.Lock()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="test-listener")
        self.client.username_pw_set(LISTENER, PASSWORD)
        if ca is not None:
            self.client.tls_set(ca_certs=str(ca))
        self.subscribed = threading.Event()  # the broker's SUBACK: from then on nothing is missed
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, *a: c.subscribe("#", qos=1)
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        wait_for(self.subscribed.is_set, 10, "the listener's subscription")

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.messages.append((msg.topic, msg.payload, msg.retain))

    def on(self, topic):
        """The payloads on ``topic`` as text."""
        return [p.decode() for p in self.raw(topic)]

    def raw(self, topic):
        """The payloads on ``topic`` as bytes (a snapshot's JPEG)."""
        with self.lock:
            return [p for t, p, _ in self.messages if t == topic]

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def _config(port):
    return CONFIG + f'[mqtt]\nhost = "127.0.0.1"\nport = {port}\nusername = "{USER}"\npassword = "${{MQTT_PASSWORD}}"\n'


def test_motion_events_discovery_and_availability_reach_mqtt(tmp_path, monkeypatch):
    monkeypatch.setenv("MQTT_PASSWORD", PASSWORD)
    broker = Mosquitto(tmp_path).start()
    listener = Listener(broker.port)
    run = Run(tmp_path, config=_config(broker.port))
    try:
        wait_for(lambda: listener.on("kdrsdl/cam1/available"), 20, "the worker's 'online'")
        assert listener.on("kdrsdl/cam1/available")[-1] == "online"
        # Home Assistant's discovery: the camera's motion and the zone's, one device (published
        # right after "online": waited for, not read at once)
        wait_for(
            lambda: sum(t.startswith("homeassistant/binary_sensor/") for t, _, _ in listener.messages) >= 2,
            10,
            "the discovery configs",
        )
        configs = {t: json.loads(p) for t, p, _ in listener.messages if t.startswith("homeassistant/")}
        camera = configs["homeassistant/binary_sensor/kdrsdl_cam1/motion/config"]
        door = configs["homeassistant/binary_sensor/kdrsdl_cam1/door_motion/config"]
        assert camera["device_class"] == door["device_class"] == "motion"
        assert camera["state_topic"] == "kdrsdl/cam1/motion" and door["state_topic"] == "kdrsdl/cam1/door/motion"
        assert camera["availability_topic"] == "kdrsdl/cam1/available"
        assert camera["device"]["identifiers"] == door["device"]["identifiers"] == ["kdrsdl_cam1"]
        assert camera["unique_id"] != door["unique_id"]
        picture = configs["homeassistant/camera/kdrsdl_cam1/snapshot/config"]  # Home Assistant's MQTT camera
        assert picture["topic"] == "kdrsdl/cam1/snapshot" and picture["device"] == camera["device"]
        for t in range(ENTER + W // SPEED + QUIET + 2):  # the square crosses the door, then quiet
            run.send(t)
        wait_for(lambda: len(listener.on("kdrsdl/events")) >= 2, 10, "the start and end events")
        events = [json.loads(p) for p in listener.on("kdrsdl/events")]
        assert [(e["event"], e["zone"]) for e in events] == [("start", "door"), ("end", "door")]
        assert events[1]["duration_s"] > 0 and events[1]["box"] is not None and events[0]["camera"] == "cam1"
        # ON then OFF, on the camera's topic and the zone's (the first OFF: the state at connection)
        assert listener.on("kdrsdl/cam1/motion") == ["OFF", "ON", "OFF"]
        assert listener.on("kdrsdl/cam1/door/motion") == ["OFF", "ON", "OFF"]
        # the snapshots, the start's then the peak's: JPEGs of the frame with the door's box drawn
        # around the square (test_snapshots checks the pictures themselves)
        wait_for(lambda: len(listener.raw("kdrsdl/cam1/snapshot")) >= 2, 10, "the two snapshots")
        for jpeg, event in zip(listener.raw("kdrsdl/cam1/snapshot"), events, strict=True):
            image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
            x, y, w, h = event["box"] if event["event"] == "start" else (DOOR[0][0], ROW, SIDE, SIDE)
            assert image.shape == (120, W, 3)
            assert image[y + h // 2, x + w // 2].min() > 240  # the white square inside the box
            b, g, r = (int(v) for v in image[y, x + w // 2])  # the box's top edge, drawn red
            assert r - max(g, b) > 80, (b, g, r)
        # the worker dies: the broker publishes its last will
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait(10)
        wait_for(lambda: listener.on("kdrsdl/cam1/available")[-1] == "offline", 60, "the last will's 'offline'")
    finally:
        listener.close()
        broker.kill()


def test_a_broker_down_at_start_holds_nothing_back(tmp_path, monkeypatch):
    """No broker when the worker starts: every frame gets its mask; the broker comes up, MQTT follows."""
    monkeypatch.setenv("MQTT_PASSWORD", PASSWORD)
    broker = Mosquitto(tmp_path)
    run = Run(tmp_path, config=_config(broker.port))
    listener = None
    try:
        t0 = time.monotonic()
        for t in range(ENTER):  # quiet frames, lock-step: each waits for its mask
            run.send(t)
        assert time.monotonic() - t0 < 30
        broker.start()
        listener = Listener(broker.port)
        # paho's back-off is at most 30 s; the retained 'online' reaches a later subscriber too
        wait_for(lambda: listener.on("kdrsdl/cam1/available") == ["online"], 45, "the worker's 'online'")
        for t in range(ENTER, ENTER + W // SPEED + QUIET + 2):
            run.send(t)
        wait_for(lambda: len(listener.on("kdrsdl/events")) >= 2, 10, "the events")
        run.close()
        wait_for(lambda: listener.on("kdrsdl/cam1/available")[-1] == "offline", 10, "the clean stop's 'offline'")
    finally:
        if listener is not None:
            listener.close()
        if broker.proc is not None:
            broker.kill()


@pytest.mark.parametrize(
    "table, says",
    [
        ('[mqtt]\nhost = "127.0.0.1"\nport = "eighteen"\n', "mqtt.port"),
        ('[mqtt]\nhost = "127.0.0.1"\nqos = 2\n', "mqtt.qos: unknown key"),
        ('[mqtt]\nhost = "127.0.0.1"\ntls_ca_file = "/nonexistent/ca.crt"\n', "mqtt.tls_ca_file"),
    ],
)
def test_a_broken_mqtt_table_is_a_configuration_error(tmp_path, table, says):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(table)
    proc = kdrsdl("worker", "--config", cfg)
    _, err = proc.communicate(timeout=60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 78 and len(lines) == 1 and says in lines[0], (proc.returncode, lines)


#: [mqtt] queue in the restart test: the events kept while the broker is away.
QUEUE = 1
#: What the restart test's worker drops while the broker is away: its 2 events less the QUEUE kept,
#: and the start's snapshot, replaced by the peak's (the latest snapshot is kept).
DROPPED_AWAY = 2 - QUEUE + 1


def test_a_broker_killed_and_restarted_gets_the_current_state_and_the_count_is_exact(tmp_path, monkeypatch):
    """The broker dies mid-run (SIGKILL) and comes back on its port: the masks never stop; while it
    is away the door's event starts and ends (2 events, a queue of 1: the older dropped, counted;
    2 snapshots, the latest kept); back, it gets the current state (OFF), the kept event and
    snapshot, and every message handed to the client is acknowledged or counted as dropped."""
    from helpers import metric, scrape

    monkeypatch.setenv("MQTT_PASSWORD", PASSWORD)
    broker = Mosquitto(tmp_path).start()
    run = Run(tmp_path, config=_config(broker.port) + f"queue = {QUEUE}\n")
    listener = None
    try:
        wait_for(lambda: metric(scrape(run.port), "kdrsdl_mqtt_connected", camera="cam1") == 1, 20, "MQTT up")
        broker.kill()
        wait_for(lambda: metric(scrape(run.port), "kdrsdl_mqtt_connected", camera="cam1") == 0, 20, "MQTT down")
        before = scrape(run.port)
        for t in range(ENTER + W // SPEED + QUIET + 2):  # the whole crossing while the broker is away
            run.send(t)
        during = scrape(run.port)
        assert metric(during, "kdrsdl_mqtt_messages_dropped_total", camera="cam1") == DROPPED_AWAY
        assert metric(during, "kdrsdl_mqtt_messages_total", camera="cam1") == metric(
            before, "kdrsdl_mqtt_messages_total", camera="cam1"
        )  # nothing handed to paho while away
        # The kept event is not retained: the listener must be subscribed before the worker is let in
        # (else the worker's retry can come first and the event goes to no one).
        broker.deny(USER)
        broker.start()
        listener = Listener(broker.port)
        broker.allow(USER)
        # the worker's next retry: its back-off doubles from 1 s up to 30 s (streamer/wire/mqtt.py)
        wait_for(lambda: listener.on("kdrsdl/events"), 45, "the kept event after the reconnection")
        assert [json.loads(p)["event"] for p in listener.on("kdrsdl/events")] == ["end"]  # the newest kept
        wait_for(lambda: listener.on("kdrsdl/cam1/motion"), 10, "the state")
        assert listener.on("kdrsdl/cam1/motion")[-1] == "OFF" and listener.on("kdrsdl/cam1/door/motion")[-1] == "OFF"
        wait_for(lambda: listener.raw("kdrsdl/cam1/snapshot"), 10, "the kept snapshot")
        assert len(listener.raw("kdrsdl/cam1/snapshot")) == 1  # the peak's

        def settled():
            m = scrape(run.port)
            handed = metric(m, "kdrsdl_mqtt_messages_total", camera="cam1")
            done = metric(m, "kdrsdl_mqtt_messages_published_total", camera="cam1")
            dropped_by_paho = metric(m, "kdrsdl_mqtt_messages_dropped_total", camera="cam1") - DROPPED_AWAY
            return handed == done + dropped_by_paho and dropped_by_paho == 0

        wait_for(settled, 20, "every message handed over acknowledged")
        run.close()
    finally:
        if listener is not None:
            listener.close()
        broker.kill()


def test_tls_with_the_ca_file_and_a_foreign_ca_refused(tmp_path, monkeypatch):
    """A broker with TLS (a certificate for 127.0.0.1 signed by a test CA): a worker given that CA
    connects and says it is online; one given another CA never connects, and its frames still
    get their masks."""
    from helpers import metric, scrape

    monkeypatch.setenv("MQTT_PASSWORD", PASSWORD)
    (tmp_path / "ours").mkdir()
    (tmp_path / "foreign").mkdir()
    tls, foreign = make_tls(tmp_path / "ours"), make_tls(tmp_path / "foreign")
    broker = Mosquitto(tmp_path, tls=tls).start()
    listener = Listener(broker.port, ca=tls["ca.crt"])
    good = Run(tmp_path, config=_config(broker.port) + f'tls_ca_file = "{tls["ca.crt"]}"\n')
    try:
        wait_for(lambda: listener.on("kdrsdl/cam1/available") == ["online"], 20, "online over TLS")
        # the discovery configs follow "online" on the same connection: wait for them too (read at
        # once after "online", they were missing in a CI run on a loaded machine)
        wait_for(
            lambda: any(t.startswith("homeassistant/") for t, _, _ in listener.messages), 10, "the discovery over TLS"
        )
        good.close()
        (tmp_path / "bad").mkdir()
        bad = Run(tmp_path / "bad", config=_config(broker.port) + f'tls_ca_file = "{foreign["ca.crt"]}"\n')
        for t in range(10):  # the frames get their masks while the TLS handshake fails
            bad.send(t)
        time.sleep(2)
        assert metric(scrape(bad.port), "kdrsdl_mqtt_connected", camera="cam1") == 0
        bad.close()
    finally:
        listener.close()
        broker.kill()
