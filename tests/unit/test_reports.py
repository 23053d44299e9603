"""report.json, junit.xml (validated against a JUnit schema) and provision.prom (parsed)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from conftest import FIXTURES, recorded
from prometheus_client.parser import text_string_to_metric_families

from provisioner import reports
from provisioner.events import RunState
from provisioner.report_model import Check, HostReport, Report


def sample_report() -> Report:
    """A report built from the recorded check run, plus tricky label values."""
    rec = recorded("check")
    st = RunState(check_mode=True)
    for e in rec["events"]:
        st.feed(e)
    st.apply_stats(rec["stats"])
    hosts = {
        name: HostReport(
            status=h.status(check_mode=True),
            checks=[Check.from_dict(c) for c in h.checks],
            facts=h.facts,
            validation=h.validation,
            counts={"ok": h.ok},
            message=h.unreachable_msg,
        )
        for name, h in st.hosts.items()
    }
    hosts['odd"host\\name'] = HostReport(
        status="failed",
        checks=[
            Check(
                id="x.y",
                status="fail",
                expected='a "q"',
                actual="line1\nline2",
                message='bad <xml> & "quotes"',
                remediation="fix it",
            )
        ],
        facts={"gpu_model": 'NVIDIA "H100"\nX', "gpu_count": 8},
    )
    return Report(
        command="check",
        run_id="20261202T000000Z-check-abcdef",
        version="0.1.0",
        started="2026-12-02T00:00:00Z",
        finished_ts=1764633600.5,
        duration_s=12.25,
        exit_code=5,
        hosts=hosts,
    )


def test_junit_validates_against_the_schema(tmp_path: Path) -> None:
    report = sample_report()
    xml = reports.junit_xml(report)
    schema = xmlschema.XMLSchema(str(FIXTURES / "junit.xsd"))
    schema.validate(xml)  # raises on any violation
    root = ET.fromstring(xml)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == list(report.hosts)
    by_host = {s.get("name"): s for s in suites}
    drift = by_host["h-drift"]
    assert drift.get("failures") == "1"
    fail = drift.find("testcase[@name='demo.version']/failure")
    assert fail is not None
    assert fail.get("type") == "drift"
    assert "actual: 0.9" in (fail.text or "")
    assert drift.find("testcase[@name='demo.skipped']/skipped") is not None
    ok = by_host["h-ok"]
    assert ok.get("failures") == "0"
    assert ok.get("tests") == "2"
    total = sum(int(s.get("tests", 0)) for s in suites)
    assert root.get("tests") == str(total)
    odd = by_host['odd"host\\name'].find("testcase/failure")
    assert odd is not None
    assert odd.get("message") == 'bad <xml> & "quotes"'


def test_schema_rejects_what_it_should() -> None:
    schema = xmlschema.XMLSchema(str(FIXTURES / "junit.xsd"))
    assert not schema.is_valid(
        '<testsuites><testsuite name="h" tests="x" failures="0" '
        'errors="0" skipped="0" time="1"/></testsuites>'
    )
    assert not schema.is_valid(
        '<testsuites><testsuite name="h" tests="1" failures="0" '
        'errors="0" skipped="0" time="1"><testcase name="a"/>'
        "</testsuite></testsuites>"
    )


def test_unreachable_host_is_an_error_testcase() -> None:
    hosts = {"gone": HostReport(status="unreachable", message="no route")}
    xml = reports.junit_xml(Report(command="run", run_id="r", hosts=hosts, duration_s=1))
    xmlschema.XMLSchema(str(FIXTURES / "junit.xsd")).validate(xml)
    err = ET.fromstring(xml).find("testsuite/testcase/error")
    assert err is not None
    assert err.get("message") == "no route"


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_prom_parses_and_carries_status_versions_and_timing() -> None:
    report = sample_report()
    fam = families(reports.prom_text(report))
    assert set(fam) >= {
        "provision_check_status",
        "provision_host_status",
        "provision_host_info",
        "provision_host_gpu_count",
        "provision_run_timestamp_seconds",
        "provision_run_duration_seconds",
        "provision_run_exit_code",
        "provision_build_info",
    }
    checks = {
        (s.labels["host"], s.labels["check"], s.labels["status"]): s.value
        for s in fam["provision_check_status"].samples
    }
    assert checks[("h-drift", "demo.version", "drift")] == 1
    assert checks[("h-drift", "demo.version", "pass")] == 0
    assert checks[("h-ok", "demo.version", "pass")] == 1
    hs = {
        (s.labels["host"], s.labels["status"]): s.value
        for s in fam["provision_host_status"].samples
    }
    assert hs[("h-drift", "drift")] == 1
    assert sum(v for (h, _), v in hs.items() if h == "h-ok") == 1
    info = {s.labels["host"]: s.labels for s in fam["provision_host_info"].samples}
    assert info["h-ok"]["driver_version"] == "535.129.03"
    assert info["h-ok"]["cuda_version"] == "12.1"
    assert info['odd"host\\name']["gpu_model"] == 'NVIDIA "H100"\nX'  # escaping round-trips
    ts = fam["provision_run_timestamp_seconds"].samples[0]
    assert ts.value == pytest.approx(1764633600.5)
    assert ts.labels == {"command": "check"}
    assert fam["provision_run_duration_seconds"].samples[0].value == pytest.approx(12.25)
    assert fam["provision_run_exit_code"].samples[0].value == 5
    gpus = {s.labels["host"]: s.value for s in fam["provision_host_gpu_count"].samples}
    assert gpus["h-ok"] == 2
    assert gpus['odd"host\\name'] == 8


def test_write_all_is_atomic_and_complete(tmp_path: Path) -> None:
    report = sample_report()
    out = tmp_path / "textfile_collector"
    paths = reports.write_all(report, out)
    assert sorted(p.name for p in paths) == ["junit.xml", "provision.prom", "report.json"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)  # no temp left
    data = json.loads((out / "report.json").read_text())
    assert data["hosts"]["h-drift"]["status"] == "drift"
    assert set(data["hosts"]["h-ok"]["facts"]) >= set(reports.FACT_KEYS)
    # rewriting replaces the files in place
    report.exit_code = 0
    reports.write_all(report, out)
    assert (
        families((out / "provision.prom").read_text())["provision_run_exit_code"].samples[0].value
        == 0
    )


def test_unreachable_counts_once() -> None:
    pre = Check(id="ssh.connect", status="fail", expected="reachable", actual="refused",
                message="refused")
    ok = Check(id="driver.version", status="pass", expected="1", actual="1")
    hosts = {
        "a": HostReport(
            status="unreachable",
            checks=[pre],
            preflight={"status": "unreachable", "stage": "connect"},
        ),
        "b": HostReport(
            status="unreachable",
            checks=[ok],
            message="lost mid-run",
            preflight={"status": "ok"},
        ),
    }
    root = ET.fromstring(
        reports.junit_xml(Report(command="run", run_id="r", hosts=hosts, duration_s=1))
    )
    a, b = root.findall("testsuite")
    assert [c.get("name") for c in a.findall("testcase")] == ["ssh.connect"]
    # unreachable in the SSH preflight: an <error> (as docs/cli.md says), not a <failure>
    assert (a.get("failures"), a.get("errors")) == ("0", "1")
    err = a.find("testcase/error")
    assert err is not None and err.get("type") == "unreachable" and err.get("message") == "refused"
    assert [c.get("name") for c in b.findall("testcase")] == ["driver.version", "provision.host"]
    assert (b.get("failures"), b.get("errors")) == ("0", "1")
