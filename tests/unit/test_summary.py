"""Issue 15 item 3 (CLI): what the operator sees at the end of a run, and `provision checks`."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_validation_checks import THR, fragment, per_rank, write
from test_validation_checks import checks as vchecks  # the validation program's merge

from provisioner import catalogue_loader as catalog
from provisioner.cli import cli
from provisioner.exitcodes import SetupError
from provisioner.progress import summary_table, validation_headline
from provisioner.report_model import Check, HostReport, Report

REPO = Path(__file__).resolve().parents[2]


def _validation(tmp_path: Path) -> dict:
    """A node result as the validation program writes it (report.json `validation`)."""
    ranks = per_rank(4, over={3: {"local_samples_per_s": 3000.0}})
    frags = [fragment(r, 4, busbw=1.25, ranks=ranks) for r in range(4)]
    return vchecks.merge(str(write(tmp_path, frags)), "g1", nproc=4, rc=0)


def test_summary_shows_the_validation_headline(tmp_path: Path) -> None:
    v = _validation(tmp_path)
    report = Report(command="run", run_id="r1", hosts={
        "g1": HostReport(status="ok", validation=v),
        "g2": HostReport(status="ok"),
    })
    out = io.StringIO()
    summary_table(report, out)
    lines = [ln for ln in out.getvalue().splitlines() if "validation" in ln]
    assert len(lines) == 1  # g2 ran no validation
    line = lines[0]
    assert line.startswith("g1: validation PASS: ")
    assert f"all-reduce busbw 1.25 GB/s (threshold >= {THR['allreduce_busbw_gbps']:.2f})" in line
    eff = v["ddp"]["summary"]["scaling_efficiency"]
    assert f"DDP scaling efficiency {eff:.2f} (min {THR['ddp_scaling_efficiency']:.2f})" in line
    assert "straggler ratio 0.75 (min 0.70)" in line
    assert "loss 2.300 -> 0.120" in line


def test_validation_headline_of_a_failed_or_partial_result() -> None:
    assert validation_headline(None) is None
    assert validation_headline({}) is None
    line = validation_headline({"status": "fail", "allreduce": None, "ddp": None,
                                "thresholds": {}})
    assert line == "validation FAIL: all-reduce busbw n/a GB/s (not judged)"


def test_check_summary_shows_every_drift_with_expected_and_actual() -> None:
    drifts = [Check(id=f"x.c{i}", status="drift", expected=f"e{i}", actual=f"a{i}")
              for i in range(15)]
    for command, shown in (("check", 15), ("run", 12)):
        out = io.StringIO()
        summary_table(Report(command=command, run_id="r", hosts={
            "g1": HostReport(status="drift", checks=drifts)}), out)
        text = out.getvalue()
        found = re.findall(r"g1: x\.c(\d+) DRIFT: expected 'e\1', actual 'a\1'", text)
        assert len(found) == shown, command
        assert ("3 more in report.json" in text) is (command == "run")


def _produced_check_ids() -> set[str]:
    """Every id the collection can report: the evaluator's self.add("<id>", ...) calls (and the
    per-library ones), the modules' own (lock, first-boot wait), the roles' YAML (validation)."""
    ids: set[str] = set()
    utils = REPO / "plugins" / "module_utils"
    for path in [utils / "evaluate.py", *(utils / "components").glob("*.py")]:
        ids |= set(re.findall(r'\.add\(\s*"([a-z_]+\.[a-z_]+)"', path.read_text()))
    ids |= {f"{lib}.{what}" for lib in ("cudnn", "nccl") for what in ("version", "hold")}
    for path in [*(REPO / "plugins" / "modules").glob("*.py"), *(REPO / "roles").rglob("*.yml")]:
        ids |= set(re.findall(r"\bid\b['\"]?:\s*['\"]?([a-z_]+\.[a-z_]+)", path.read_text()))
    return ids


def test_the_catalogue_covers_every_check_id_of_the_collection_and_the_cli() -> None:
    entries, _ = catalog.load(REPO / "plugins")
    ids = {c.id for c in entries}
    produced = _produced_check_ids()
    assert {"driver.pin", "preflight.lock", "preflight.package_manager", "validation.ddp",
            "cudnn.hold", "env.foreign_paths"} <= produced  # the scan sees every kind of source
    assert produced - ids == set()
    from provisioner.ssh_preflight import SSH_REMEDIATION  # noqa: PLC0415

    assert {f"ssh.{s}" for s in SSH_REMEDIATION} <= ids
    for c in entries:
        assert c.verifies and c.remediation, c.id
    assert next(c for c in entries if c.id == "driver.hold").role == "nvidia_driver"


def test_checks_command_lists_ids_with_what_and_fix() -> None:
    r = CliRunner().invoke(cli, ["checks"], prog_name="provision")
    assert r.exit_code == 0, r.output
    assert "driver.module_loaded  (nvidia_driver)" in r.stdout
    assert "    verifies: the loaded kernel module matches" in r.stdout
    assert "    fix: reboot the host" in r.stdout
    r = CliRunner().invoke(cli, ["checks", "ssh.", "--json"], prog_name="provision")
    rows = json.loads(r.stdout)
    assert {row["id"] for row in rows} >= {"ssh.connect", "ssh.hostkey", "ssh.auth"}
    assert all(row["id"].startswith("ssh.") for row in rows)
    r = CliRunner().invoke(cli, ["checks", "nosuch"], prog_name="provision")
    assert r.exit_code == 2


def test_the_catalogue_is_the_collections(tmp_path: Path) -> None:
    (tmp_path / "module_utils").mkdir()
    (tmp_path / "module_utils" / "check_catalogue.py").write_text(
        "CATALOG = {'driver.hold': {'verifies': 'held (collection)', 'remediation': 'hold it'}}\n"
    )
    entries, source = catalog.load(tmp_path)
    assert source.endswith("module_utils/check_catalogue.py")
    assert entries == [catalog.CheckInfo("driver.hold", "nvidia_driver", "held (collection)",
                                         "hold it")]
    with pytest.raises(SetupError, match="check catalogue is missing"):
        catalog.load(tmp_path / "none")


@pytest.mark.parametrize("cid", ["driver.hold", "validation.ddp", "ssh.hostkey"])
def test_checks_prefix_filters(cid: str) -> None:
    r = CliRunner().invoke(cli, ["checks", cid], prog_name="provision")
    assert r.exit_code == 0
    assert r.stdout.splitlines()[0].startswith(cid)
