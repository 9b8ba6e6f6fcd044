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

import paho.mqtt.client as paho
import pytest
from helpers import free_port, kdrsdl, wait_for
from test_events import CONFIG, ENTER, QUIET, SPEED, Run, W

MOSQUITTO = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)
pytestmark = pytest.mark.skipif(
    MOSQUITTO is None or shutil.which("mosquitto_passwd") is None,
    reason="Mosquitto is not installed (Debian package mosquitto; .ci/run installs it)",
)
USER, PASSWORD = "kdrsdl", "s3cret word"


class Mosquitto:
    """A real Mosquitto on 127.0.0.1:``port`` with a password file; started and stopped by the test."""

    def __init__(self, tmp_path, port=None):
        self.port = port or free_port()
        passwords = tmp_path / "passwords"
        subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), USER, PASSWORD], check=True)
        self.conf = tmp_path / "mosquitto.conf"
        # as root, Mosquitto would switch to its own user, who cannot read pytest's private tmp_path
        user = f"user {getpass.getuser()}\n"
        self.conf.write_text(
            f"{user}listener {self.port} 127.0.0.1\nallow_anonymous false\npassword_file {passwords}\n"
            "persistence false\n"
        )
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stderr=subprocess.PIPE)
        wait_for(lambda: _can_connect(self.port), 10, "mosquitto")
        return self

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def _can_connect(port):
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Listener:
    """A paho client subscribed to everything: the messages in order, the retained ones by topic."""

    def __init__(self, port):
        self.messages = []
        self.lock = threading.Lock()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="test-listener")
        self.client.username_pw_set(USER, PASSWORD)
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, *a: c.subscribe("#", qos=1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, "the listener's connection")
        time.sleep(0.3)  # its subscription

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.messages.append((msg.topic, msg.payload.decode(), msg.retain))

    def on(self, topic):
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
        # Home Assistant's discovery: the camera's motion and the zone's, one device
        configs = {t: json.loads(p) for t, p, _ in listener.messages if t.startswith("homeassistant/")}
        camera = configs["homeassistant/binary_sensor/kdrsdl_cam1/motion/config"]
        door = configs["homeassistant/binary_sensor/kdrsdl_cam1/door_motion/config"]
        assert camera["device_class"] == door["device_class"] == "motion"
        assert camera["state_topic"] == "kdrsdl/cam1/motion" and door["state_topic"] == "kdrsdl/cam1/door/motion"
        assert camera["availability_topic"] == "kdrsdl/cam1/available"
        assert camera["device"]["identifiers"] == door["device"]["identifiers"] == ["kdrsdl_cam1"]
        assert camera["unique_id"] != door["unique_id"]
        for t in range(ENTER + W // SPEED + QUIET + 2):  # the square crosses the door, then quiet
            run.send(t)
        wait_for(lambda: len(listener.on("kdrsdl/events")) >= 2, 10, "the start and end events")
        events = [json.loads(p) for p in listener.on("kdrsdl/events")]
        assert [(e["event"], e["zone"]) for e in events] == [("start", "door"), ("end", "door")]
        assert events[1]["duration_s"] > 0 and events[1]["box"] is not None and events[0]["camera"] == "cam1"
        # ON then OFF, on the camera's topic and the zone's (the first OFF: the state at connection)
        assert listener.on("kdrsdl/cam1/motion") == ["OFF", "ON", "OFF"]
        assert listener.on("kdrsdl/cam1/door/motion") == ["OFF", "ON", "OFF"]
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
