"""Issue 14: bad inputs and faults the CLI must survive (each row of docs/reliability.md that is
not proven elsewhere). Every test here failed on the code before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.model import Report
from provisioner.state import StateDir


def run_cli(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), prog_name="provision")


# ---------------------------------------------------------------- 7: corrupt history files


def _good(sd: StateDir, run_id: str) -> None:
    sd.save_report(Report.from_dict({
        "run_id": run_id, "command": "check", "exit_code": 0,
        "hosts": {"g1": {"status": "ok", "checks": [{"id": "driver.hold", "status": "pass"}]}},
    }))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("[1, 2]", "expected a mapping, got list"),
        ('{"run_id": "x", "hosts": {"g1": ', "invalid or truncated JSON"),
        ("not json at all", "invalid or truncated JSON"),
        ('{"hosts": {"g1": "ok"}}', "host g1: expected a mapping"),
        ('{"hosts": {"g1": {"checks": [{"status": "pass"}]}}}', "check without an id"),
    ],
)
def test_history_diff_and_show_name_a_corrupt_file_and_exit_2(
    state_dir: Path, content: str, reason: str
) -> None:
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    bad = sd.history / "20260102T000000.000Z-check-bbbbbb.json"
    bad.write_text(content)
    for args in (("history", "diff", "previous", "latest"), ("history", "show", "latest"),
                 ("history", "diff", str(bad))):
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert str(bad) in r.output
        assert reason in r.output
        assert "Traceback" not in r.output


def test_history_list_skips_a_corrupt_file_with_a_warning(state_dir: Path) -> None:
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    (sd.history / "20260102T000000.000Z-check-bbbbbb.json").write_bytes(b"\xff\xfe garbage")
    (sd.history / "20260103T000000.000Z-check-cccccc.json").write_text("[]")
    r = run_cli("history", "list")
    assert r.exit_code == 0, r.output
    assert "20260101T000000.000Z-check-aaaaaa" in r.stdout
    assert "bbbbbb" not in r.stdout
    assert "warning: skipped" in r.stderr
    assert "bbbbbb.json: not a provision report (not UTF-8 text" in r.stderr
    assert "cccccc.json: not a provision report (report: expected a mapping" in r.stderr


def test_previous_check_skips_a_corrupt_file_with_a_warning(state_dir: Path) -> None:
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    (sd.history / "20260102T000000.000Z-check-bbbbbb.json").write_text('{"hosts": [')
    warnings: list[str] = []
    prev = sd.previous_report("check", "20260103", {"g1"}, warn=warnings.append)
    assert prev is not None
    assert prev.run_id == "20260101T000000.000Z-check-aaaaaa"
    assert len(warnings) == 1
    assert "bbbbbb.json" in warnings[0]
