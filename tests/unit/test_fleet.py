"""Issue 19 item 3 (stretch): a host whose validation all-reduce busbw is more than a set
percentage below the median of the hosts with the same GPU model (`provision history fleet`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from provisioner import fleet
from provisioner import state as st
from provisioner.cli import cli
from provisioner.report_model import Report

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def host(model: str | None, busbw: float | None, *, old_format: bool = False) -> dict[str, Any]:
    validation: dict[str, Any] | None
    if busbw is None:
        validation = None
    elif old_format:
        validation = {"allreduce_busbw_gbps": busbw}
    else:
        validation = {"allreduce": {"judged_busbw_gbps": busbw}, "passed": True}
    return {"status": "ok", "facts": {"gpu_model": model}, "validation": validation}


def report(run_id: str, hosts: dict[str, dict[str, Any]], command: str = "validate") -> Report:
    return Report.from_dict({"run_id": run_id, "command": command, "hosts": hosts})


FLEET = {
    "h1": host(H100, 452.1),
    "h2": host(H100, 448.0),
    "h3": host(H100, 455.3),
    "h4": host(H100, 395.0),  # 12.2 % below the median 450.05: flagged at 10 %
    "a1": host(A100, 230.0),
    "a2": host(A100, 190.0),  # a group of two: listed, not judged
    "x1": host(H100, None),  # no validation in this run
}


def test_the_slow_host_of_a_model_is_flagged_and_only_it() -> None:
    rows = {r.host: r for r in fleet.busbw_rows(report("r1", FLEET))}
    assert set(rows) == {"h1", "h2", "h3", "h4", "a1", "a2"}
    assert rows["h4"].flagged and rows["h4"].median_gbps == pytest.approx(450.05)
    assert rows["h4"].below_pct == pytest.approx(12.2, abs=0.1)
    assert [h for h, r in rows.items() if r.flagged] == ["h4"]
    # the A100 pair is 17 % apart, but two hosts make no median
    assert rows["a2"].median_gbps is None and not rows["a2"].flagged


def test_the_percentage_is_a_setting() -> None:
    rows = fleet.busbw_rows(report("r1", FLEET), below_pct=15.0)
    assert not any(r.flagged for r in rows)
    assert fleet.BUSBW_BELOW_MEDIAN_PCT == 10.0


def test_models_are_compared_only_with_themselves() -> None:
    """Three A100s at half an H100's busbw are not outliers of the fleet."""
    hosts = {
        "h1": host(H100, 450.0),
        "h2": host(H100, 452.0),
        "h3": host(H100, 449.0),
        "a1": host(A100, 230.0),
        "a2": host(A100, 231.0),
        "a3": host(A100, 229.0),
    }
    assert not any(r.flagged for r in fleet.busbw_rows(report("r1", hosts)))


def test_older_reports_and_unusable_values() -> None:
    hosts = {
        "h1": host(H100, 450.0, old_format=True),
        "h2": host(H100, 0.0),
        "h3": {
            "status": "ok",
            "facts": {},
            "validation": {"allreduce": {"judged_busbw_gbps": True}},
        },
        "h4": host(None, 300.0),
    }
    rows = fleet.busbw_rows(report("r1", hosts))
    assert [(r.host, r.gpu_model) for r in rows] == [("h1", H100), ("h4", "unknown")]


def test_terminal_lines_name_the_flagged_host() -> None:
    lines = fleet.format_rows(fleet.busbw_rows(report("r1", FLEET)), 10.0)
    assert f"{H100}: 4 hosts, median 450.05 GB/s, flag below 90 % of it" in lines
    assert any(ln.strip().startswith("FLAG h4") and "12.2 % below median" in ln for ln in lines)
    assert any("median not judged" in ln and A100 in ln for ln in lines)


def test_cli_uses_the_newest_run_with_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROVISION_STATE_DIR", str(tmp_path))
    sd = st.StateDir(tmp_path)
    sd.save_report(report("20261201T000000Z-validate-000001", FLEET))
    sd.save_report(report("20261202T000000Z-check-000002", {"h1": host(H100, None)}, "check"))
    out = CliRunner().invoke(cli, ["history", "fleet", "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["run_id"] == "20261201T000000Z-validate-000001"
    assert doc["busbw_below_median_pct"] == 10.0
    assert [h["host"] for h in doc["hosts"] if h["flagged"]] == ["h4"]
    text = CliRunner().invoke(cli, ["history", "fleet", "--busbw-below", "20"]).output
    assert "FLAG" not in text and "flag below 80 % of it" in text
