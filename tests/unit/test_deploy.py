"""deploy/: the systemd service and timer, and the cron line, for the nightly `provision check`."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner import session
from provisioner.cli import cli

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A small systemd unit parser: sections -> key -> values (repeatable keys kept)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    text = (DEPLOY / name).read_text().replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def provision_args(command_line: str) -> list[str]:
    words = shlex.split(command_line)
    start = next(i for i, w in enumerate(words) if w.endswith("/provision"))
    return words[start + 1 :]


def test_service_runs_check_into_the_textfile_collector() -> None:
    svc = unit("provision-check.service")["Service"]
    (exec_start,) = svc["ExecStart"]
    args = provision_args(exec_start)
    assert args[0] == "check"
    assert args[args.index("--report-dir") + 1] == TEXTFILE_DIR
    assert svc["Type"] == ["oneshot"]
    assert "5" in svc["SuccessExitStatus"][0].split()
    assert TEXTFILE_DIR in svc["ReadWritePaths"]
    assert "PROVISION_STATE_DIR=/var/lib/provision" in svc["Environment"]


def test_service_arguments_parse_as_a_real_check_invocation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    seen: list[session.Settings] = []
    monkeypatch.setattr(session, "execute", lambda s, **_: seen.append(s) or 0)
    args = provision_args(unit("provision-check.service")["Service"]["ExecStart"][0])
    assert CliRunner().invoke(cli, args).exit_code == 0
    (s,) = seen
    assert s.command == "check"
    assert str(s.report_dir) == TEXTFILE_DIR


def test_timer_is_nightly_and_randomized() -> None:
    t = unit("provision-check.timer")
    timer = t["Timer"]
    assert timer["OnCalendar"][0].endswith("02:00:00")
    assert timer["RandomizedDelaySec"] == ["1h"]
    assert timer["Persistent"] == ["true"]
    assert timer["Unit"] == ["provision-check.service"]
    assert t["Install"]["WantedBy"] == ["timers.target"]


def test_units_verify_with_systemd_analyze(tmp_path: Path) -> None:
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    svc = (DEPLOY / "provision-check.service").read_text()
    (tmp_path / "provision-check.service").write_text(
        svc.replace("/opt/provision/venv/bin/provision", shutil.which("true") or "/bin/true")
    )
    shutil.copy(DEPLOY / "provision-check.timer", tmp_path)
    p = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            str(tmp_path / "provision-check.service"),
            str(tmp_path / "provision-check.timer"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr


def test_cron_line_matches_the_service() -> None:
    lines = [
        line
        for line in (DEPLOY / "cron.example").read_text().splitlines()
        if line and not line.startswith("#") and "=" not in line.split()[0]
    ]
    (line,) = lines
    fields = line.split(None, 6)
    assert len(fields) == 7  # m h dom mon dow user command
    assert fields[5] == "provision"
    args = provision_args(fields[6].split(">>")[0])
    assert args[0] == "check"
    assert args[args.index("--report-dir") + 1] == TEXTFILE_DIR
