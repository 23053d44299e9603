"""driver.branch_support (issue 20 item 3): a driver branch past NVIDIA's end of support is a
visible warning in the check and the run's reports (summary, report.json, junit.xml,
provision.prom), never a failure: the status stays pass and the exit code with it."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from typing import Any

import xmlschema
from conftest import FIXTURES
from probe_fakes import FakeHost, judge, stack
from prometheus_client.parser import text_string_to_metric_families

from provisioner import progress, reports
from provisioner import stack as stk
from provisioner.events import normalize_check
from provisioner.exitcodes import ExitCode, exit_code_for
from provisioner.report_model import Check, HostReport, Report

DOCS = "https://docs.nvidia.com/datacenter/tesla/drivers/620/supported-drivers-and-cuda-toolkit-versions.html"


def branch_support(today: str, **over: Any) -> dict[str, Any]:
    desired = stack(today=today, **over)
    checks = judge(FakeHost().gpus(), ["driver"], desired)["checks"]
    return next(c for c in checks if c["id"] == "driver.branch_support")


def test_the_role_default_carries_every_branch_of_the_matrix_with_its_source() -> None:
    table = stk.resolve(None).to_extravars()["gpu_stack_driver_support"]
    assert table["535"] == {"kind": "LTSB", "end_of_support": "2026-06",
                            "source": DOCS + " (R535 Long Term Support Branch, EOL June 2026)"}
    assert table["580"]["end_of_support"] == "2028-06"


def test_a_branch_past_its_end_of_support_passes_with_a_warning_naming_date_source_and_choices(
) -> None:
    c = branch_support("2026-07-01")
    assert c["status"] == "pass"
    assert c["actual"] == "past end of support (LTSB, ended 2026-06)"
    w = c["warning"]
    assert w.startswith("driver branch 535 is past NVIDIA's end of support (LTSB, support ended "
                        "2026-06: " + DOCS), w
    assert "580 (LTSB, supported until 2028-06)" in w and "620 (LTSB, supported until 2029-09)" in w
    assert "set driver.branch to a supported branch" in w


def test_a_supported_branch_passes_without_a_warning_and_an_unknown_one_is_skipped() -> None:
    ok = branch_support("2026-06-30")
    assert ok["status"] == "pass" and "warning" not in ok, ok
    assert ok["actual"] == "supported (LTSB, until 2026-06)"
    later = branch_support("2026-07", **{"driver.branch": "580"})
    assert later["status"] == "pass" and "warning" not in later, later
    unknown = branch_support("2026-07", **{"driver.branch": "470"})
    assert unknown["status"] == "skip", unknown
    assert "not in the matrix's driver.branches" in unknown["message"]


def warned_report() -> Report:
    raw = normalize_check(
        {"id": "driver.branch_support", "status": "pass", "expected": "branch 535 supported",
         "actual": "past end of support (LTSB, ended 2026-06)", "message": "m",
         "warning": "driver branch 535 is past NVIDIA's end of support"},
        "gpu_stack",
    )
    assert raw is not None and raw["warning"].startswith("driver branch 535"), raw
    check = Check.from_dict(raw)
    assert check.to_dict()["warning"] == raw["warning"] and not check.bad
    other = Check(id="driver.version", status="pass")
    assert "warning" not in other.to_dict()  # additive: absent when there is none
    return Report(
        command="check", run_id="r", duration_s=1.0, exit_code=0,
        hosts={"gpu01": HostReport(status="ok", checks=[check, other])},
    )


def test_the_warning_shows_in_junit_prom_and_the_summary_and_keeps_the_exit_code() -> None:
    report = warned_report()
    assert exit_code_for({"gpu01": "ok"}, drift_is_error=True) == ExitCode.OK
    xml = reports.junit_xml(report)
    xmlschema.XMLSchema(str(FIXTURES / "junit.xsd")).validate(xml)
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    case = suite.find("testcase[@name='driver.branch_support']")
    assert case is not None and case.find("failure") is None
    out = case.find("system-out")
    assert out is not None and out.text == (
        "warning: driver branch 535 is past NVIDIA's end of support"
    )
    assert suite.find("testcase[@name='driver.version']/system-out") is None
    fams = {f.name: f for f in text_string_to_metric_families(reports.prom_text(report))}
    samples = fams["provision_check_warning"].samples
    assert [(s.labels, s.value) for s in samples] == [
        ({"host": "gpu01", "check": "driver.branch_support"}, 1.0)
    ]
    stream = io.StringIO()
    progress.summary_table(report, stream)
    assert ("gpu01: driver.branch_support WARNING: driver branch 535 is past NVIDIA's end of "
            "support") in stream.getvalue()
