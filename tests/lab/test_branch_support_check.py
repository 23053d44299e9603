"""driver.branch_support end to end (issue 20 item 3): `provision check` on a lab host whose
stack is on branch 535 (NVIDIA's end of support June 2026, the matrix's driver.branches) shows the
warning in the terminal summary, report.json, junit.xml and provision.prom; the check's status
stays pass, so the warning alone never changes the exit code (a fresh host's check drifts for
other reasons)."""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from test_roles_helpers import fleet_args, provision_cli

from provisioner import stack as stk


def test_provision_check_shows_the_end_of_support_warning(
    fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(1, ["t4-1"])
    host = fleet.hosts[0].name
    end = stk.resolve(None).to_extravars()["gpu_stack_driver_support"]["535"]["end_of_support"]
    past = datetime.date.today().strftime("%Y-%m") > end
    # the lab's stack on branch 535 (its default is 580, a supported branch)
    text = fleet.stack_path.read_text(encoding="utf-8")
    assert 'branch: "580"' in text, text
    on_535 = tmp_path / "stack-535.yml"
    on_535.write_text(text.replace('branch: "580"', 'branch: "535"'), encoding="utf-8")
    args = [str(on_535) if a == str(fleet.stack_path) else a for a in fleet_args(fleet)]

    proc, data = provision_cli(tmp_path, "check", *args, report="check")
    assert proc.returncode == 5, (proc.stdout + proc.stderr)[-4000:]  # drift: nothing installed
    record = next(c for c in data["hosts"][host]["checks"] if c["id"] == "driver.branch_support")
    assert record["status"] == "pass", record
    junit = ET.parse(tmp_path / "check" / "junit.xml").getroot()
    case = junit.find(f"testsuite[@name='{host}']/testcase[@name='driver.branch_support']")
    assert case is not None and case.find("failure") is None
    prom = (tmp_path / "check" / "provision.prom").read_text(encoding="utf-8")
    fams = {f.name: f for f in text_string_to_metric_families(prom)}
    warned = [s.labels for s in fams["provision_check_warning"].samples]
    if not past:
        assert "warning" not in record and case.find("system-out") is None and not warned
        return
    assert record["warning"].startswith("driver branch 535 is past NVIDIA's end of support"), record
    assert f"support ended {end}" in record["warning"]
    assert "580 (LTSB, supported until" in record["warning"]
    out = case.find("system-out")
    assert out is not None and out.text == "warning: " + record["warning"]
    assert warned == [{"host": host, "check": "driver.branch_support"}]
    assert f"{host}: driver.branch_support WARNING: driver branch 535" in proc.stdout + proc.stderr
