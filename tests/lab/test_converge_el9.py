"""The converge scenario (tests/lab/converge.py) on the el9 personality, on branch 580: Debian's
dnf/rpm presented as Rocky Linux 9.3, NVIDIA's rhel9 repository model (the nvidia-driver module with
its <B>-dkms streams, epoch-3 driver rpms, the unversioned nvidia-fabricmanager / libnvidia-nscq
from 580 and nvidia-fabric-manager below, libnccl/libcudnn8 rpms), dkms from the lab's
EPEL (nvidia_repo_el_epel_*_url in the fleet's inventory), CRB enabled by the role
(`dnf config-manager --set-enabled crb`, the lab serves an empty CRB), versionlock for the holds.

What differs from the apt personalities, from NVIDIA's own repository tooling: a -dkms stream
carries every version of the branch's userspace but only the newest kmod-nvidia-latest-dkms
(NVIDIA/cuda-repo-management:genmodules.py), so on EL the pinned version is the branch's newest
one, and an older pin is refused by dnf before anything changes (the first step below).
The "driver changed under the loaded module" drift is an admin's `dnf module switch-to` to the 550
stream (the version lock lifted), the way NVIDIA documents switching streams; the branch change goes
from 580 down to 550 (the fabric manager's name changes with it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from converge import GUIDE, Personality, Scenario
from test_roles_helpers import run_playbook

from lab.repo import rpm_tools_missing

OLD = "580.95.05"  # the newest 580: the only one whose kmod the 580-dkms stream carries
OLDER = "580.82.07"  # in the repository, but its kmod is not in the stream
DRIFT = f"""
set -e
# a versionlock removed by hand
dnf versionlock delete libnccl
# the profile script edited by hand, and the classic guide's profile script
echo 'export PATH=/usr/local/cuda-11.3/bin:$PATH' >> /etc/profile.d/cuda.sh
cat > /etc/profile.d/zz-cuda-guide.sh <<'GUIDE_END'
{GUIDE}GUIDE_END
# /usr/local/cuda taken away
update-alternatives --remove cuda /usr/local/cuda-12.1
# the driver switched to the 550 stream under the loaded 580 module (the version locks lifted)
dnf versionlock delete $(sed -n 's/^\\([a-z].*\\)-[0-9]*:.*/\\1/p' \\
  /etc/dnf/plugins/versionlock.list | grep -v -e '^libcudnn' -e '^libnccl')
# (down from 580: cuda-drivers-580 needs nvidia-driver >= 580, so dnf must erase it)
dnf -y module switch-to --allowerasing nvidia-driver:550-dkms
"""

EL9 = Personality(
    name="el9",
    old=OLD,
    new="550.54.15",
    other_version="550.54.15",
    torch=True,
    drift_script=DRIFT,
    expected_drift={
        "nccl.hold": ("drift", "libnccl"),
        "env.path": ("drift", "edited"),
        "env.foreign_paths": ("drift", "cuda-11.3"),
        "env.ld_library_path": ("drift", "/usr/local/cuda-11.3/lib64"),
        "cuda.symlink": ("drift", "missing"),
        "driver.branch": ("drift", "550.54.15"),
        "driver.version": ("drift", "550.54.15"),
        "driver.module_loaded": ("fail", "mismatch"),
    },
    held_after_converge=("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms",
                         "nvidia-persistenced", "nvidia-fabricmanager", "libcudnn8",
                         "libcudnn8-devel", "libnccl", "libnccl-devel"),
    # the open flavour's kmod and the floating toolkit metas
    never_installed=("kmod-nvidia-open-dkms", "cuda", "cuda-12-1"),
    driver_package="nvidia-driver",
    package_manager="dnf",
    branch="580",
    other_branch="550",
)


def older_pin_is_refused_before_anything_changes(s: Scenario) -> None:
    """An older 580 pinned: its kmod is not in the 580-dkms stream, so dnf refuses the driver
    transaction as a whole (no driver package installed) and the run fails in the driver role."""
    res = run_playbook(s.fleet, "site.yml", s.ev(gpu_stack_driver_version=OLDER),
                       tmp=s.work / "older-pin", skip_tags=s.skip_tags)
    s.log.append("older-pin")
    assert res.rc != 0, res.output[-4000:]
    task = res.checks(s.host).get("nvidia_driver.task") or {}
    assert task.get("status") == "fail", res.output[-4000:]
    assert task.get("actual") == "failed: Install the driver stream (one transaction per step)"
    # dnf's own words, in the task's result
    assert (f"kmod-nvidia-latest-dkms-{OLDER} All matches were filtered out by modular filtering"
            in res.output), res.output[-4000:]
    assert not s.versions().keys() & {"nvidia-driver", "kmod-nvidia-latest-dkms"}


def test_converge_scenario_on_el9(lab: Any, tmp_path: Path) -> None:
    missing = rpm_tools_missing()
    if missing:
        pytest.skip(f"el9 needs {', '.join(missing)} (apt-get install rpm createrepo-c)")
    fleet = lab.create_fleet(1, ["h100-sxm-8"], personality="el9")
    try:
        s = Scenario(EL9, fleet, tmp_path)
        s.fresh_check_is_read_only()
        older_pin_is_refused_before_anything_changes(s)
        s.converges_with_an_older_version_pinned()
        s.second_run_changes_nothing()
        s.check_is_clean_and_read_only()
        s.drift_is_found_read_only()
        s.site_repairs_the_drift()
        s.branch_change_moves_holds_and_reboots_once()
        s.no_reboot_defers_and_the_next_run_reboots_once()
    finally:
        fleet.destroy()
