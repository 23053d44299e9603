"""A broken install (a dependency that cannot be imported) exits 4 with a message, not a traceback
and exit 1, so a scheduler does not count it as 'a host failed'."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CODE = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import name` now raises ImportError
from provisioner.cli import main
main({argv!r})
"""


def _run(tmp_path: Path, blocked: list[str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PROVISION_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run(
        [sys.executable, "-c", CODE.format(blocked=blocked, argv=argv)],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )


def test_missing_ansible_runner_exits_4(tmp_path: Path) -> None:
    proc = _run(tmp_path, ["ansible_runner"], ["check", "--host", "127.0.0.1:1", "--no-preflight"])
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "setup error: cannot import ansible_runner" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_ansible_exits_4_with_an_inventory(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    # templated: Ansible's inventory manager reads it in process (a plain inventory needs no
    # Ansible in process; ansible-playbook's own absence is found by find_ansible_playbook)
    inv.write_text(
        'all:\n  hosts:\n    gpu01: {ansible_host: 127.0.0.1, ansible_port: "{{ 1 }}"}\n')
    proc = _run(tmp_path, ["ansible", "ansible.inventory", "ansible.inventory.manager"],
                ["check", "-i", str(inv), "--no-preflight"])
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "setup error: cannot import ansible" in proc.stderr


def test_unwritable_report_dir_is_found_before_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = _run(tmp_path, [], ["check", "--host", "127.0.0.1:1", "--report-dir",
                               str(blocker / "reports")])
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--report-dir" in proc.stderr and "not writable" in proc.stderr
    assert "UNREACHABLE" not in proc.stderr  # no host was contacted
