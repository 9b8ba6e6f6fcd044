"""Prometheus and Grafana pieces, checked by the real tools (issue 5)."""

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request

import pytest
from conftest import ROOT
from helpers import free_port, scrape, start_capture, start_worker, stop, tcp, wait_for, wait_for_metrics

PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "kdrsdl-dashboard.json"


def _need(tool):
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian package prometheus)")
    return path


def test_promtool_checks_config_rules_and_rule_unit_tests():
    promtool = _need("promtool")
    for args in (
        ["check", "config", "prometheus.yml"],
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts_test.yml"],
    ):
        proc = subprocess.run([promtool, *args], cwd=PROM, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "SUCCESS" in proc.stdout + proc.stderr


def _query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(urllib.request.urlopen(url, timeout=5).read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_every_dashboard_query_returns_data_from_a_real_prometheus(tmp_path):
    prometheus = _need("prometheus")
    cport, wport, pport = free_port(), free_port(), free_port()
    frames, masks = tcp(), tcp()
    zones = tmp_path / "zones.toml"  # the zone panels need a named zone
    zones.write_text("[[motion.zones]]\nname = 'left'\npolygon = [[0, 0], [79, 0], [79, 119], [0, 119]]\n")
    worker = start_worker(frames, masks, wport, "--config", zones)
    wait_for_metrics(worker, wport)
    capture = start_capture(frames, "synthetic:160x120", "--fps", 30, "--metrics-port", cport)
    # Issue 27: no static labels and job names of the operator's choosing; every label the
    # dashboard selects on comes from the exporters themselves.
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: cameras
    static_configs: [{{targets: ["127.0.0.1:{cport}", "127.0.0.1:{wport}"]}}]
""")
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{pport}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        dash = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"].replace("$camera", "cam1") for p in dash["panels"] for t in p["targets"]]
        assert len(exprs) >= 23
        # Wait until the refits have run and several scrapes are in (first scrape ~5 s after start).
        wait_for(
            lambda: _safe(lambda: _query(pport, 'kdrsdl_solver_starts_total{camera="cam1",mode="warm"} > 0')),
            90,
            "a warm refit seen by Prometheus",
        )
        empty = []
        for expr in exprs:
            ok = wait_for(lambda e=expr: _safe(lambda: _query(pport, e)), 30, f"data for {expr}")
            if not ok:
                empty.append(expr)
        assert not empty
        # the camera variable's query (label_values) through the series API
        url = f"http://127.0.0.1:{pport}/api/v1/label/camera/values?match[]=kdrsdl_build_info"
        assert "cam1" in json.loads(urllib.request.urlopen(url, timeout=5).read())["data"]
        # every metric the dashboard names exists in what the services export
        exported = {k[0] for k in (scrape(wport) or {})} | {k[0] for k in (scrape(cport) or {})}
        for name in set(re.findall(r"\b(kdrsdl_[a-z_]+|process_[a-z_]+)", " ".join(exprs))):
            assert name in exported or name + "_total" in exported, name
    finally:
        server.terminate()
        server.wait(timeout=20)
        for p in (capture, worker):
            rc, _, err = stop(p)
            assert rc == 0, err[-2000:]


def _safe(f):
    try:
        return f()
    except OSError:
        return None
