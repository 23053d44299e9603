"""contrib/prometheus (alert and recording rules) and contrib/grafana (dashboard): promtool checks
and unit-tests the rules; every metric and label they use is one provision.prom really has."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO
from prometheus_client.parser import text_string_to_metric_families
from required import require_tool
from test_reports import sample_report

from provisioner import reports
from provisioner.report_model import Check

RULES = REPO / "contrib" / "prometheus" / "provision.rules.yml"
RULE_TESTS = REPO / "contrib" / "prometheus" / "provision.rules.test.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "provision-fleet.json"
SCREENSHOT = REPO / "docs" / "grafana-provision-fleet.png"
SCRAPE_LABELS = {"instance", "job"}  # added by Prometheus when it scrapes node_exporter


def prom_labels() -> dict[str, set[str]]:
    """Metric name -> label names, from a provision.prom written by the real writer."""
    out: dict[str, set[str]] = {}
    report = sample_report()
    # a GPU health finding (issue 19), so that provision_health_finding has its labels
    next(iter(report.hosts.values())).checks.append(Check(
        id="health.row_remap", status="fail", action="service", findings=[{
            "gpu": {"index": 3, "bus_id": "00000000:5D:00.0", "uuid": "GPU-2"},
            "figure": "remapping failure occurred", "threshold": "no failure",
            "action": "service"}]))
    for family in text_string_to_metric_families(reports.prom_text(report)):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text(encoding="utf-8")))


def data_panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in data_panels() for t in p["targets"]]


def used_labels(expr: str) -> list[tuple[str, str]]:
    """(metric, label) pairs an expression relies on: matchers and by/without clauses."""
    pairs = []
    metrics = re.findall(r"\b(provision_[a-z_]+)\b", expr)
    for metric, matchers in re.findall(r"\b(provision_[a-z_]+)\{([^}]*)\}", expr):
        pairs += [(metric, label) for label in re.findall(r"(\w+)\s*[=!]~?", matchers)]
    for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        for label in (x.strip() for x in clause.split(",")):
            pairs += [(m, label) for m in metrics]
    return pairs


def test_rules_and_dashboard_use_only_what_provision_prom_has() -> None:
    have = prom_labels()
    exprs = rule_exprs() + dashboard_exprs()
    assert len(exprs) > 20
    for expr in exprs:
        metrics = re.findall(r"\b(provision_[a-z_]+)\b", expr)
        assert metrics, expr
        for metric in metrics:
            assert metric in have, f"{metric} is not in provision.prom: {expr}"
        for metric, label in used_labels(expr):
            # a `by` clause may name a label of another metric of the same expression
            if not any(label in have[m] | SCRAPE_LABELS for m in metrics):
                pytest.fail(f"label {label!r} of {metric} is not in provision.prom: {expr}")


def test_the_label_check_catches_a_renamed_label() -> None:
    have = prom_labels()
    assert ("provision_host_status", "hostname") in used_labels(
        'provision_host_status{hostname="x"}'
    )
    assert "hostname" not in have["provision_host_status"]


def test_the_alerts_cover_non_compliance_failing_checks_and_a_stale_run() -> None:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    alerts = {r["alert"]: r["expr"] for g in groups for r in g["rules"] if "alert" in r}
    assert 'provision_host_status{status="drift"}' in alerts["ProvisionHostDrift"]
    assert 'provision_host_status{status="failed"}' in alerts["ProvisionHostFailed"]
    assert 'status=~"fail|drift"' in alerts["ProvisionCheckNotPassing"]
    assert "provision_run_timestamp_seconds" in alerts["ProvisionNightlyCheckStale"]
    assert alerts["ProvisionNightlyCheckMissing"].startswith("absent(")
    # one alert per action of the health ladder (components/base.py ACTIONS, less "none")
    for action in ("monitor", "drain", "reset_gpu", "reboot", "service"):
        assert [a for a, e in alerts.items()
                if f'provision_health_finding{{action="{action}"}}' in e], action
    for rule in (r for g in groups for r in g["rules"] if "alert" in r):
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_promtool_checks_the_rules_and_their_unit_tests_pass() -> None:
    promtool = require_tool("promtool", "prometheus")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in check.stdout
    unit = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                          capture_output=True, text=True, check=False)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert "SUCCESS" in unit.stdout


def test_promtool_unit_tests_can_fail(tmp_path: Path) -> None:
    """The rule tests are not vacuous: a stale threshold of 20 h breaks them."""
    promtool = require_tool("promtool", "prometheus")
    text = RULES.read_text(encoding="utf-8")
    assert "> 28 * 3600" in text
    (tmp_path / RULES.name).write_text(text.replace("> 28 * 3600", "> 20 * 3600"),
                                       encoding="utf-8")
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text(encoding="utf-8"),
                                            encoding="utf-8")
    unit = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert unit.returncode != 0
    assert "ProvisionNightlyCheckStale" in unit.stdout + unit.stderr


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "prometheus")
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel_{i}", "expr": expr.replace("$instance", ".*")}
        for i, expr in enumerate(dashboard_exprs())
    ]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    check = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": "sum by (host (provision_host_status)"}]}]}), encoding="utf-8")
    assert subprocess.run([promtool, "check", "rules", str(bad)], capture_output=True,
                          check=False).returncode != 0


def test_dashboard_is_a_grafana_dashboard_with_a_laid_out_grid() -> None:
    dash = dashboard()
    assert dash["uid"] == "provision-fleet" and dash["schemaVersion"] >= 36
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names == ["datasource", "instance"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
    for p in data_panels():
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["description"], p["title"]
        assert len(p["targets"]) == 1
        assert 'instance=~"$instance"' in p["targets"][0]["expr"], p["title"]
    titles = {p["title"] for p in data_panels()}
    assert {"Fleet compliance", "Checks not passing", "Validation passing",
            "Since the last nightly check"} <= titles


def test_the_docs_screenshot_exists_and_says_how_it_was_made() -> None:
    png = SCREENSHOT.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    script = (REPO / "contrib" / "grafana" / "render_screenshot.py").read_text(encoding="utf-8")
    assert "queries evaluated by Prometheus" in script and "rendered without Grafana" in script
