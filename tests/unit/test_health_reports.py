"""Health findings in report.json, JUnit, the Prometheus textfile, the summary and the history
(issue 19): each names the GPU, the figure, the threshold and the action."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

from provisioner import history, reports
from provisioner.events import normalize_check
from provisioner.exitcodes import exit_code_for
from provisioner.progress import problem_lines
from provisioner.report_model import Check, HostReport, Report

GPU = {"index": 3, "bus_id": "00000000:5D:00.0", "uuid": "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"}
FINDING = {
    "gpu": GPU,
    "figure": "remap pending",
    "threshold": "none pending",
    "action": "reset_gpu",
    "message": "GPU 3: a row remap is pending",
}


def health_check(findings: list[dict[str, object]] | None = None) -> Check:
    findings = [FINDING] if findings is None else findings
    return Check(
        id="health.row_remap",
        status="fail" if findings else "pass",
        expected="none",
        actual="remap pending" if findings else "none",
        message="GPU 3: a row remap is pending (action: reset_gpu)" if findings else "",
        remediation="drain and reset the GPU" if findings else "",
        role="health",
        action="reset_gpu" if findings else "none",
        findings=findings,
    )


def report(check: Check, status: str = "failed", run_id: str = "r2") -> Report:
    host = HostReport(status=status, checks=[check], facts={"gpu_count": 8})
    return Report(command="check", run_id=run_id, hosts={"gpu01": host}, check_mode=True)


def test_probe_record_keeps_action_and_findings() -> None:
    raw = health_check().to_dict()
    c = normalize_check(raw, "health")
    assert c is not None
    assert c["action"] == "reset_gpu" and c["findings"] == [FINDING]
    again = Check.from_dict(c)
    assert again.findings == [FINDING] and again.action == "reset_gpu"


def test_report_json_round_trip_and_old_reports_still_load() -> None:
    rep = report(health_check())
    back = Report.from_dict(rep.to_dict())
    assert back.hosts["gpu01"].checks[0].findings == [FINDING]
    plain = Check(id="driver.hold", status="pass").to_dict()
    assert "action" not in plain and "findings" not in plain  # other ids: format unchanged


def test_junit_names_gpu_and_action() -> None:
    root = ET.fromstring(reports.junit_xml(report(health_check())))
    text = ET.tostring(root, encoding="unicode")
    assert "action: reset_gpu" in text
    assert "GPU 3 00000000:5D:00.0 GPU-b42dd28e" in text


def test_prometheus_finding_has_an_action_label() -> None:
    text = reports.prom_text(report(health_check()))
    samples = [
        s
        for fam in text_string_to_metric_families(text)
        if fam.name == "provision_health_finding"
        for s in fam.samples
    ]
    assert len(samples) == 1
    labels = samples[0].labels
    assert labels["action"] == "reset_gpu" and labels["gpu"] == "3"
    assert labels["uuid"] == GPU["uuid"] and labels["check"] == "health.row_remap"


def test_terminal_summary_prints_the_action() -> None:
    lines = problem_lines(report(health_check()).hosts)
    assert any("action: reset_gpu" in ln for ln in lines)


def test_health_failure_is_exit_1_not_drift() -> None:
    assert exit_code_for({"gpu01": "failed"}, drift_is_error=True) == 1
    assert exit_code_for({"gpu01": "drift"}, drift_is_error=True) == 5


def test_history_diff_shows_new_and_resolved_findings() -> None:
    old, new = report(health_check([]), "ok", "r1"), report(health_check())
    (d,) = history.diff_reports(old, new)
    assert any("health finding: health.row_remap GPU-b42dd28e" in x for x in d.new_problems)
    (back,) = history.diff_reports(new, old)
    assert any("health finding: health.row_remap" in x for x in back.resolved)


def test_expected_gpu_count_is_the_last_passing_report() -> None:
    failing = report(health_check(), "failed", "r3")
    failing.hosts["gpu01"].facts["gpu_count"] = 7
    passing = report(health_check([]), "ok", "r2")
    assert history.expected_gpu_counts([failing, passing]) == {"gpu01": 8}


def test_expected_gpu_counts_stop_reading_once_every_host_has_one() -> None:
    passing = report(health_check([]), "ok", "r2")
    read: list[str] = []

    def newest_first() -> Iterator[history.Report]:
        for name in ("r2", "r1", "r0"):
            read.append(name)
            yield passing

    assert history.expected_gpu_counts(newest_first(), ["gpu01"]) == {"gpu01": 8}
    assert read == ["r2"]  # one report read, not the thirty the run would otherwise open
    read.clear()
    assert history.expected_gpu_counts(newest_first(), ["gpu01", "gpu99"]) == {"gpu01": 8}
    assert read == ["r2", "r1", "r0"]  # gpu99 has no passing report: every one is read
