"""A host that cannot be reached exits 3 and is named, before Ansible starts (the preflight)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_env

EXE = Path(sys.executable).parent / "provision"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(tmp_path)
    # issue 3's bound: an unreachable host is reported within 30 s (a generous limit that catches
    # a hang or a retry loop, not a performance measurement; speed is for `make bench`)
    return subprocess.run(
        [str(EXE), *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize(
    ("args", "name", "stage"),
    [
        (["--host", "no-such-host.invalid"], "no-such-host.invalid", "ssh.resolve"),
        (["--host", "127.0.0.1", "--port", "1"], "127.0.0.1", "ssh.connect"),
    ],
)
def test_unreachable_host_exits_3_naming_it(
    tmp_path: Path, args: list[str], name: str, stage: str
) -> None:
    p = run(tmp_path, *args, "--report-dir", str(tmp_path / "rep"))
    assert p.returncode == 3, p.stderr
    assert name in p.stderr
    assert "UNREACHABLE" in p.stderr
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    entry = report["hosts"][name]
    assert entry["status"] == "unreachable"
    assert entry["checks"][0]["id"] == stage
    assert report["artifacts"] is None  # Ansible never started


def test_unused_loopback_port_and_check_command(tmp_path: Path) -> None:
    port = _free_port()
    p = run(tmp_path, "check", "--host", f"127.0.0.1:{port}")
    assert p.returncode == 3
    assert f"127.0.0.1:{port}" in p.stderr


def test_preflight_command_alone(tmp_path: Path) -> None:
    p = run(
        tmp_path, "preflight", "--host", "no-such-host.invalid", "--host", "127.0.0.1:1", "--json"
    )
    assert p.returncode == 3
    results = {r["host"]: r for r in json.loads(p.stdout)}
    assert results["no-such-host.invalid"]["stage"] == "resolve"
    assert results["127.0.0.1"]["stage"] == "connect"
