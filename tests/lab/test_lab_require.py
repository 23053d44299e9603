"""PROVISION_REQUIRE_LAB=1 turns a skipped lab test into a failure (what CI relies on)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")
INNER_TEST = """
import pytest

def test_needs_the_lab():
    pytest.skip("lab unavailable: pretend this machine has no systemd-nspawn")
"""


def _run_inner(tmp_path: Path, require: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    env = {k: v for k, v in os.environ.items() if k != "PROVISION_REQUIRE_LAB"}
    if require:
        env["PROVISION_REQUIRE_LAB"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )


def test_skip_is_a_skip_without_the_variable(tmp_path):
    res = _run_inner(tmp_path, require=False)
    assert res.returncode == 0, res.stdout
    assert "1 skipped" in res.stdout


def test_skip_fails_with_provision_require_lab(tmp_path):
    res = _run_inner(tmp_path, require=True)
    assert res.returncode == 1, res.stdout
    assert "1 failed" in res.stdout
    assert "PROVISION_REQUIRE_LAB=1 forbids skips" in res.stdout
    assert "pretend this machine has no systemd-nspawn" in res.stdout
