"""`provision check` end to end on the demo content: drift exit code, history diff, failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import CONTENT, cli_env

EXE = Path(sys.executable).parent / "provision"


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(tmp_path)
    return subprocess.run(
        [str(EXE), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_check_exit_codes_and_history_diff(tmp_path: Path) -> None:
    inv = str(CONTENT / "inventory.yml")
    first = run(tmp_path, "check", "-i", inv, "--limit", "h-ok,h-drift")
    assert first.returncode == 5, first.stderr
    assert "h-drift" in first.stdout
    first_id = first.stdout.splitlines()[-2].split()[1].rstrip(":")
    second = run(
        tmp_path,
        "check",
        "-i",
        inv,
        "--limit",
        "h-ok,h-drift",
        "-e",
        "demo_check_status=pass",
        "--json",
    )
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["summary"]["drift"] == 0
    assert report["changes"]["since"].endswith(first_id)
    (change,) = report["changes"]["hosts"]
    assert change["host"] == "h-drift"
    assert change["resolved"] == ["demo.version: drift -> pass"]
    assert "changes since" in second.stderr  # with --json the human text goes to stderr
    assert "resolved: demo.version: drift -> pass" in second.stderr
    failed = run(tmp_path, "check", "-i", inv, "--limit", "h-fail,h-drift")
    assert failed.returncode == 1
    unreachable = run(tmp_path, "check", "-i", inv, "--limit", "h-ok,h-unreachable")
    assert unreachable.returncode == 3
    assert "h-unreachable" in unreachable.stderr
    listing = run(tmp_path, "history", "list")
    assert len(listing.stdout.splitlines()) == 4
    assert all("  check  " in line for line in listing.stdout.splitlines())
