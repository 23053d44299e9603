"""Lab host personalities: what each presents to OS readers and which repository model it gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lab_shell import APT, enable_repo, ok, sh

VENV_BIN = Path(sys.executable).parent


def test_ubuntu2204_is_ubuntu_2204_to_ansible_and_lsb_release(lab, fleet_factory, tmp_path):
    fleet = fleet_factory(1, ["t4-1"])
    out = ok(fleet, "gpu01", "lsb_release -a; lsb_release -cs; cat /etc/debian_version")
    assert "Description:\tUbuntu 22.04.4 LTS" in out and "\njammy\n" in out
    assert out.rstrip().endswith("bookworm/sid")
    # what Ansible's setup module gathers, over SSH with the fleet's inventory
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_STDOUT_CALLBACK="json")
    res = subprocess.run(
        [
            str(VENV_BIN / "ansible"),
            "-i",
            str(fleet.inventory_path),
            "gpu01",
            "-m",
            "ansible.builtin.setup",
            "-a",
            "gather_subset=min",
            "-o",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    facts = json.loads(res.stdout.split("=>", 1)[1])["ansible_facts"]
    assert facts["ansible_distribution"] == "Ubuntu"
    assert facts["ansible_distribution_version"] == "22.04"
    assert facts["ansible_distribution_release"] == "jammy"
    assert facts["ansible_distribution_major_version"] == "22"
    assert facts["ansible_os_family"] == "Debian"
    # presented, not real: the kernel and the userland underneath are the lab's Debian 12
    assert facts["ansible_kernel"] == os.uname().release
    assert ok(fleet, "gpu01", "python3 -c 'import sys; print(sys.version_info[:2])'").strip() == (
        "(3, 11)"
    )


def test_debian11_needs_contrib_and_installs_debian_style_names(lab, fleet_factory):
    """debian11: Debian's packaging of the driver (P), contrib helpers from Debian's archive (C)."""
    fleet = fleet_factory(1, ["h100-sxm-8"], personality="debian11")
    assert "bullseye" in ok(fleet, "gpu01", "cat /etc/os-release")
    assert ok(fleet, "gpu01", "python3 -c 'import sys; print(sys.version_info[:2])'").strip() == (
        "(3, 9)"
    )
    assert sh(fleet, "gpu01", "test -e /opt/pytorch")[0] == 1  # no torch wheel for 3.9
    enable_repo(fleet, "gpu01")
    rc, out = sh(fleet, "gpu01", f"{APT} install nvidia-driver")
    assert rc == 100 and "nvidia-installer-cleanup but it is not installable" in out
    # no branch-suffixed Ubuntu names here
    assert (
        "Unable to locate package nvidia-driver-535"
        in sh(fleet, "gpu01", f"{APT} install -s nvidia-driver-535")[1]
    )
    ok(
        fleet,
        "gpu01",
        "sed -i 's/ main$/ main contrib/' /etc/apt/sources.list && "
        f"{APT} update && {APT} install linux-headers-$(uname -r)",
    )
    # the branch is chosen by an apt preferences pin on the version
    ok(
        fleet,
        "gpu01",
        "printf 'Package: *nvidia* libcuda1 firmware-nvidia-gsp libnvidia-* xserver-xorg-video-"
        "nvidia cuda-drivers*\\nPin: version 535.104.05-1\\nPin-Priority: 1000\\n' > "
        "/etc/apt/preferences.d/nvidia-535",
    )
    ok(fleet, "gpu01", f"{APT} install nvidia-driver-cuda nvidia-kernel-dkms")
    out = ok(fleet, "gpu01", "dpkg-query -W nvidia-driver-cuda nvidia-kernel-dkms nvidia-smi")
    assert out.split() == [
        "nvidia-driver-cuda",
        "535.104.05-1",
        "nvidia-kernel-dkms",
        "535.104.05-1",
        "nvidia-smi",
        "535.104.05-1",
    ]
    assert "nvidia-current, 535.104.05" in ok(fleet, "gpu01", "dkms status")
    unit = ok(
        fleet,
        "gpu01",
        "systemctl cat nvidia-persistenced; systemctl is-enabled nvidia-persistenced",
    )
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvpd" in unit
    assert unit.rstrip().endswith("enabled")
    fleet.reboot("gpu01")
    rc, out = sh(fleet, "gpu01", "nvidia-smi")
    assert rc == 0 and "Driver Version: 535.104.05" in out
    out = ok(fleet, "gpu01", "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    assert set(out.split()) == {"Enabled"}
    assert "release 12.1" in ok(
        fleet,
        "gpu01",
        f"{APT} install cuda-toolkit-12-1 >/dev/null && /usr/local/cuda-12.1/bin/nvcc --version",
    )


def test_debian12_has_no_cuda_12_1_and_no_535(lab, fleet_factory):
    fleet = fleet_factory(1, ["t4-1"], personality="debian12")
    assert "bookworm" in ok(fleet, "gpu01", "cat /etc/os-release")
    enable_repo(fleet, "gpu01")
    rc, out = sh(
        fleet, "gpu01", "apt-cache policy cuda-toolkit-12-1 cuda-toolkit-12-4 nvidia-driver"
    )
    assert "cuda-toolkit-12-1:" not in out  # not in any source: apt prints nothing for it
    assert "cuda-toolkit-12-4:\n  Installed: (none)\n  Candidate: 12.4.1-1" in out
    assert "Candidate: 550.54.15-1" in out and "535." not in out
    rc, out = sh(fleet, "gpu01", f"{APT} install -s cuda-toolkit-12-1")
    assert rc == 100 and "Unable to locate package cuda-toolkit-12-1" in out
