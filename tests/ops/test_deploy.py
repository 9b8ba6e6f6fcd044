"""Kubernetes manifests validate against the schemas; the Dockerfile installs as docs/operations.md says."""

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from conftest import ROOT
from helpers import free_port


def test_kubernetes_manifests_validate_against_schemas():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    import yaml

    files = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
    assert {f.name for f in files} >= {"statefulset.yaml", "service.yaml", "configmap.yaml"}
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            kv.validate(doc, kv.latest_version(), strict=True)


def test_both_containers_are_scraped_and_the_image_is_tagged():
    """Issue 27 (part): a PodMonitor for both metrics ports; images with a registry and a tag."""
    import yaml

    pod = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "statefulset.yaml").read_text())["spec"]["template"]
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    monitor = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "prometheus-operator" / "podmonitor.yaml").read_text())
    assert monitor["kind"] == "PodMonitor"
    assert monitor["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    assert scraped == {"capture-metrics", "worker-metrics"} and scraped <= set(ports)
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["worker-metrics"])
    for c in pod["spec"]["containers"]:
        registry, _, rest = c["image"].partition("/")
        assert "." in registry and re.fullmatch(r"[\w.-]+:\d+\.\d+\.\d+", rest), c["image"]
    policy = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "networkpolicy.yaml").read_text())
    admitted = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert admitted == {5560, ports["capture-metrics"], ports["worker-metrics"]}


def test_dockerfile_runs_the_documented_install_step():
    docker = (ROOT / "deploy" / "Dockerfile").read_text()
    readme = (ROOT / "docs" / "operations.md").read_text()
    runs = [cmd for cmd in re.findall(r"^RUN (.+)$", docker, re.M) if "pip install" in cmd]
    assert runs and all(cmd.replace("--no-cache-dir ", "") in readme for cmd in runs), runs


def test_dockerfile_has_a_healthcheck_on_healthz_and_exposes_its_ports():
    """Issue 27 (part): the image checks /healthz itself, with the port the container sets."""
    docker = (ROOT / "deploy" / "Dockerfile").read_text()
    check = re.search(r"^HEALTHCHECK .*\\\n\s+CMD (.+)$", docker, re.M)
    assert check and "/healthz" in check.group(1) and "KDRSDL_HEALTH_PORT" in check.group(1)
    assert re.search(r"^EXPOSE 9101 9102 5560$", docker, re.M)
    # the command it runs is valid Python that reaches a real /healthz
    from streamer.ops import metrics

    port = free_port()
    server = metrics.WorkerMetrics("docker-health").serve(port)
    try:
        cmd = re.search(r'python3 -c "(.+)"', check.group(1)).group(1)
        proc = subprocess.run(
            [sys.executable, "-c", cmd], env={**os.environ, "KDRSDL_HEALTH_PORT": str(port)}, timeout=30
        )
        assert proc.returncode == 0
    finally:
        server.shutdown()
        server.server_close()


def test_healthz_reports_a_stuck_main_loop():
    from streamer.ops import metrics

    assert metrics.health(0.5) == ("200 OK", "ok: last progress 0.5 s ago\n")
    assert metrics.health(metrics.STALE_AFTER_S + 1)[0] == "503 Service Unavailable"  # no progress for 31 s
    assert metrics.health(9.9, stale_after_s=10)[0] == "200 OK" and metrics.health(10, stale_after_s=10)[0][:3] == "503"
    port = free_port()
    server = metrics.WorkerMetrics("health-test").serve(port)  # a live main loop: it just beat
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200 and r.read().startswith(b"ok: last progress")
    finally:
        server.shutdown()
        server.server_close()


def test_shipped_camera_configs_load(tmp_path):
    # the systemd example and every camera file in the ConfigMap pass the same strict validation as the CLI
    import yaml

    from streamer.config import load

    texts = {"kdrsdl.example.toml": (ROOT / "systemd" / "kdrsdl.example.toml").read_text()}
    texts.update(yaml.safe_load((ROOT / "deploy" / "kubernetes" / "configmap.yaml").read_text())["data"])
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
        cfg = load(str(tmp_path / name))
        assert cfg.worker.state_dir == "/var/lib/kdrsdl", name


@pytest.fixture(scope="module")
def compose_schema(tmp_path_factory):
    """The Compose specification's JSON schema, as docker-compose 1.29.2 (its last Python release)
    ships it in compose/config/compose_spec.json; fetched from PyPI, never committed."""
    jsonschema = pytest.importorskip("jsonschema", reason="pip install '.[test]'")
    import json
    import zipfile

    d = tmp_path_factory.mktemp("compose-spec")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(d), "docker-compose==1.29.2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    wheels = list(d.glob("docker_compose-*.whl"))
    if proc.returncode != 0 or not wheels:
        pytest.skip(f"the Compose schema could not be fetched from PyPI: {proc.stderr.strip()[-300:]}")
    with zipfile.ZipFile(wheels[0]) as z:
        return jsonschema, json.loads(z.read("compose/config/compose_spec.json"))


def test_compose_file_follows_the_compose_specification(compose_schema):
    """Issue 27 (part): `docker compose up` for one camera; no image can be pulled here, so the
    file is checked against the specification's schema and against our own files."""
    import yaml

    jsonschema, schema = compose_schema
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "compose.yaml").read_text())
    validator = jsonschema.Draft201909Validator(schema)  # the draft its $schema names
    validator.validate(compose)
    with pytest.raises(jsonschema.ValidationError):  # the schema does refuse what is not Compose
        validator.validate({**compose, "servces": {}})
    services = compose["services"]
    assert set(services) == {"capture", "worker", "prometheus", "grafana"}
    assert "${KDRSDL_SOURCE:?" in " ".join(services["capture"]["command"])  # the camera from the environment
    for name in ("prometheus", "grafana"):  # pinned images with a tag
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", services[name]["image"])
    for service in services.values():  # every file mounted exists in the repository
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / "deploy" / "compose" / source).resolve().exists(), source
    # the Home Assistant override: Mosquitto beside them, the worker's [mqtt] from a file that loads
    override = yaml.safe_load((ROOT / "deploy" / "compose" / "home-assistant.yaml").read_text())
    merged = {**compose, "services": {**services, **override["services"]}}
    validator.validate(merged)
    assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", override["services"]["mosquitto"]["image"])
    worker = override["services"]["worker"]
    assert "./mqtt.toml:/etc/kdrsdl/mqtt.toml:ro" in worker["volumes"]
    from streamer.config import load

    assert load(str(ROOT / "deploy" / "compose" / "mqtt.toml")).mqtt.host == "127.0.0.1"
    # the ports the services are told match what Prometheus scrapes
    scraped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in scraped["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    for name, port in (("capture", "9101"), ("worker", "9102")):
        command = services[name]["command"]
        assert command[command.index("--metrics-port") + 1] == port and f"127.0.0.1:{port}" in targets
