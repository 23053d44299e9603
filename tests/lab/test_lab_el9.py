"""The el9 personality: Debian's dnf/rpm under a presented Rocky Linux 9.3, NVIDIA's rhel9 model
with its nvidia-driver module streams, and Ansible's dnf module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lab_shell import ok, sh

from lab.repo import rpm_tools_missing

VENV_BIN = Path(sys.executable).parent


def ansible(fleet, *args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json")
    res = subprocess.run(
        [str(VENV_BIN / "ansible"), "-i", str(fleet.inventory_path), "gpu01", "-o", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    return res.returncode, res.stdout + res.stderr


def test_el9_dnf_module_streams_and_ansible_dnf(lab, fleet_factory):
    missing = rpm_tools_missing()
    if missing:
        pytest.skip(f"el9 needs {', '.join(missing)} (apt-get install rpm createrepo-c)")
    fleet = fleet_factory(1, ["h100-sxm-8"], personality="el9")
    repo_file = fleet.repo_file_url
    # what NVIDIA's instructions do: the .repo file, then the module stream (DKMS from EPEL)
    ok(
        fleet,
        "gpu01",
        'python3 -c "import urllib.request as u; '
        f"u.urlretrieve('{repo_file}', '/etc/yum.repos.d/cuda-rhel9.repo')\"",
    )
    out = ok(fleet, "gpu01", "dnf -q module list nvidia-driver")
    assert "latest-dkms [d]" in out and "535-dkms" in out and "535-open" in out
    # without EPEL there is no dkms: the -dkms stream cannot install
    rc, out = sh(fleet, "gpu01", "dnf -y module install nvidia-driver:535-dkms")
    assert rc != 0 and "dkms" in out
    ok(fleet, "gpu01", f"dnf -y install {lab.repo.epel_release_url} kernel-devel-$(uname -r)")
    ok(fleet, "gpu01", "dnf -y module install nvidia-driver:535-dkms")
    out = ok(fleet, "gpu01", "dnf -q module list --installed nvidia-driver")
    assert "535-dkms [e]" in out and "[i]" in out
    out = ok(fleet, "gpu01", "rpm -q nvidia-driver nvidia-persistenced kmod-nvidia-latest-dkms")
    assert "nvidia-driver-535.154.05-1.el9" in out  # the stream locks the branch, not the version
    # EL's persistenced unit: [Install], no --no-persistence-mode, disabled without a preset (P)
    assert ok(fleet, "gpu01", "systemctl is-enabled nvidia-persistenced || true").strip() == (
        "disabled"
    )
    fleet.reboot("gpu01")
    rc, out = sh(fleet, "gpu01", "nvidia-smi")
    assert rc == 0 and "Driver Version: 535.154.05" in out

    # Ansible sees Rocky 9 and its dnf module works (python3-dnf under /usr/bin/python3)
    rc, out = ansible(fleet, "-m", "ansible.builtin.setup", "-a", "gather_subset=min")
    assert rc == 0, out
    facts = json.JSONDecoder().raw_decode(out.split("=>", 1)[1].strip())[0]["ansible_facts"]
    assert facts["ansible_distribution"] == "Rocky"
    assert facts["ansible_distribution_major_version"] == "9"
    assert facts["ansible_os_family"] == "RedHat"
    assert facts["ansible_pkg_mgr"] == "dnf"
    rc, out = ansible(
        fleet, "-m", "ansible.builtin.dnf", "-a", "name=cuda-toolkit-12-1 state=present"
    )
    assert rc == 0 and '"changed": true' in out, out
    assert "release 12.1" in ok(fleet, "gpu01", "/usr/local/cuda-12.1/bin/nvcc --version")
    rc, out = ansible(
        fleet, "-m", "ansible.builtin.dnf", "-a", "name=cuda-toolkit-12-1 state=present"
    )
    assert rc == 0 and '"changed": false' in out, out
    # versionlock (Debian's dnf-plugins-core in the layer) writes the real line format
    ok(
        fleet,
        "gpu01",
        "dnf versionlock add libnccl-2.18.3-1+cuda12.1 || dnf -y install "
        "python3-dnf-plugin-versionlock && dnf -y install libnccl-2.18.3-1+cuda12.1 && "
        "dnf versionlock add libnccl",
    )
    assert "libnccl-0:2.18.3-1+cuda12.1.*" in ok(
        fleet, "gpu01", "cat /etc/dnf/plugins/versionlock.list"
    )
