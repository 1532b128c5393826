"""The Grafana dashboard and the Prometheus alert rules shipped in deploy/ load, and every
metric they query is one a running `perdure serve` exports (its real /metrics, after jobs that
succeed and fail have given it per-job series)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from serve_harness import Server, spec

ROOT = Path(__file__).parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "perdure.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
METRIC = re.compile(r"\b(perdure_[a-z_]+)\b")
# Prometheus's own series for every scrape target, not perdure's
PROMETHEUS_OWN = {"up"}


def exported(server: Server) -> set[str]:
    """Every series name /metrics has once jobs have run: samples and their families."""
    with server.client() as c:
        ok = server.submit(c, spec("dash-ok", "import sys; from perdure.runtime import goodput\n"
                                   "with goodput.step(1): pass\ngoodput.flush(); sys.exit(0)"))
        bad = server.submit(c, spec("dash-bad", "import sys; sys.exit(3)",
                                    restart={"max_replica_restarts": 1, "max_job_retries": 0}))
        server.wait_state(c, ok, {"SUCCEEDED"})
        server.wait_state(c, bad, {"FAILED"})
        text = c.get("/metrics").text
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] == "perdure" and doc["panels"]
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    assert len(exprs) >= len(doc["panels"])
    return exprs


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for group in doc["groups"] for r in group["rules"]]
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
        assert r["alert"].startswith("Perdure") and r["labels"]["severity"] in (
            "warning", "critical") and r["annotations"]["summary"], r
    return rules


def test_every_queried_metric_is_exported(server: Server) -> None:
    names = exported(server)
    assert "perdure_replica_restarts_total" in names and "perdure_job_goodput_ratio" in names
    queries = dashboard_queries() + [str(r["expr"]) for r in alert_rules()]
    used = {m for q in queries for m in METRIC.findall(q)}
    assert len(used) >= 8, used
    assert not used - names, f"queried but not exported: {sorted(used - names)}"
    others = {w for q in queries for w in re.findall(r"\b([a-z_]+)\{", q)} - used
    assert others <= PROMETHEUS_OWN, others


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian's prometheus package; .ci/run "
                           "installs it)")
def test_promtool_accepts_the_rules() -> None:
    r = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS: 8 rules found" in r.stdout, r.stdout + r.stderr
