"""`vagrant validate` of the Vagrantfile (Debian's vagrant package; `make host-packages-test`).

`--ignore-provider`: no VirtualBox or libvirt here; the provider-independent configuration (the
box, the Ansible provisioner and its settings) is validated, and the libvirt block's Ruby still
runs when PROVISION_GPU_PCI is set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from conftest import REPO
from required import require_tool


def validate(cwd: Path, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    vagrant = require_tool("vagrant", "vagrant")
    full_env = {
        **os.environ,
        "VAGRANT_HOME": str(tmp / "vagrant.d"),  # not ~/.vagrant.d
        "VAGRANT_DOTFILE_PATH": str(tmp / "dotfile"),  # not .vagrant/ in the checkout
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        **env,
    }
    return subprocess.run(
        [vagrant, "validate", "--ignore-provider"],
        cwd=cwd, env=full_env, capture_output=True, text=True, check=False, timeout=120,
    )


def test_the_vagrantfile_validates(tmp_path: Path) -> None:
    proc = validate(REPO, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Vagrantfile validated successfully" in proc.stdout
    assert not (REPO / ".vagrant").exists()


def test_the_vagrantfile_validates_with_a_gpu_passed_through(tmp_path: Path) -> None:
    proc = validate(REPO, tmp_path, PROVISION_GPU_PCI="0000:65:00.0")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_validate_catches_a_misspelled_provisioner_setting(tmp_path: Path) -> None:
    copy = tmp_path / "project"
    copy.mkdir()
    shutil.copytree(REPO / "playbooks", copy / "playbooks", symlinks=True)
    text = (REPO / "Vagrantfile").read_text(encoding="utf-8")
    assert "ansible.become = true" in text
    (copy / "Vagrantfile").write_text(
        text.replace("ansible.become = true", "ansible.becomes = true"), encoding="utf-8"
    )
    proc = validate(copy, tmp_path)
    assert proc.returncode != 0
    assert "becomes" in proc.stdout + proc.stderr
