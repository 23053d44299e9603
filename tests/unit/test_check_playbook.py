"""playbooks/check.yml is read-only by construction: without --check it stops before any role."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _play(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", "ansible_become=false", "-e", f"ansible_python_interpreter={sys.executable}",
         str(REPO / "playbooks" / "check.yml"), *extra],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )


def test_check_playbook_refuses_to_run_without_check_mode(tmp_path: Path) -> None:
    proc = _play(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Refuse to run without --check" in out
    assert "run it with --check" in out
    # nothing after the guard ran: no role task started
    assert "TASK [preflight" not in out and "TASK [nvidia_repo" not in out, out[-3000:]


def test_tags_cannot_skip_the_guard(tmp_path: Path) -> None:
    proc = _play(tmp_path, "--tags", "nvidia_repo")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "run it with --check" in out
    assert "TASK [nvidia_repo" not in out, out[-3000:]


def test_docs_give_the_plays_task_count(tmp_path: Path) -> None:
    """README and docs/cli.md say how many tasks a check runs per host: the play's task list is
    the role's argument check, the guard, the probe, the deep tier and validation (the last two
    skipped unless asked). A task added to check.yml must update the docs."""
    proc = _play(tmp_path, "--list-tasks")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    listed = [ln for ln in proc.stdout.splitlines() if "TAGS: [" in ln and "play #" not in ln]
    assert len(listed) == 5, listed
    assert any("Deep health tier" in ln for ln in listed)
    for doc in ("README.md", "docs/cli.md"):
        text = " ".join((REPO / doc).read_text(encoding="utf-8").split())
        assert "five tasks per host, three of them run" in text, doc
