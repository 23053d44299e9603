"""Issue 20 item 1 in the lab: the driver and the fabric manager from one origin.

Two NVSwitch hosts (h100-sxm-8) of the Ubuntu 22.04 personality, each with jammy-updates enabled
as a cloud image has it (lab/repos/ubuntu-jammy-updates.yml: Canonical's own non-server
535.288.01-0ubuntu0.22.04.1, newer than every 535 in NVIDIA's repository model, under the same
names). NVIDIA's cuda-keyring brings its cuda-repository-pin-600 (lab/repos/ubuntu2204-x86_64.yml).

* `old`: the driver pin as the roles wrote it before the fix (version only, no origin record),
  then NVIDIA's documented install (`cuda-drivers-535`, then the fabric manager): apt takes the
  driver from Canonical (the pin at 1001 matches both origins, the newest wins over pin-600) and the
  fabric manager from NVIDIA at its newest 535, another version; `driver.fabricmanager` fails and
  names both versions.
* `new`: a provision run writes the product's pin (Canonical's builds at -1 first): driver and
  fabric manager both from NVIDIA at one version, every driver check passes.

On the code before the fix (no `o=Ubuntu` record) the `new` host ends like the `old` one and the
test fails there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab_shell import enable_repo, ok
from test_roles_helpers import run_playbook, stack_vars

APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0"
CANONICAL = "535.288.01"  # jammy-updates (canonical/nvidia-graphics-drivers 535-jammy changelog)
CANONICAL_DEB = CANONICAL + "-0ubuntu0.22.04.1"
NVIDIA = "535.154.05"  # the newest 535 in NVIDIA's ubuntu2204 repository model
PIN = "/etc/apt/preferences.d/provision-nvidia-driver"
# The roles' pin before the fix (main before the origin record): the version only
PRE_FIX_PIN = (
    "# Managed by provision (nvidia_driver role): the NVIDIA driver branch 535\n"
    "Package: /^(cuda-drivers(-fabricmanager)?-535|nvidia-.*-535(-open)?|libnvidia-.*-535|"
    "xserver-xorg-video-nvidia-535|nvidia-firmware-535-.*|nvidia-modprobe|nvidia-settings|"
    "libxnvctrl0)$/\n"
    "Pin: version 535.*\n"
    "Pin-Priority: 1001\n"
)
DRIVER_PKGS = ("nvidia-driver-535", "libnvidia-compute-535", "nvidia-utils-535")
FM_PKGS = ("nvidia-fabricmanager-535", "libnvidia-nscq-535")


def enable_jammy_updates(fleet: Any, host: str) -> None:
    """The jammy-updates pocket beside the lab's jammy line, as Ubuntu's cloud images have it."""
    line = ok(fleet, host, "grep -m1 '^deb .* jammy ' /etc/apt/sources.list").strip()
    url = line.split()[1]
    ok(
        fleet,
        host,
        f"echo 'deb {url} jammy-updates main restricted universe multiverse' "
        f">> /etc/apt/sources.list && {APT} update",
    )


def versions(fleet: Any, host: str, names: tuple[str, ...]) -> dict[str, str]:
    out = ok(fleet, host, "dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(names))
    return dict(ln.split() for ln in out.splitlines() if ln.strip())


def test_driver_and_fabric_manager_come_from_one_origin(fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory(2, ["h100-sxm-8", "h100-sxm-8"])
    old, new = (h.name for h in fleet.hosts)
    for host in (old, new):
        enable_jammy_updates(fleet, host)

    # ---- old: the version-only pin, NVIDIA's documented order of installs
    enable_repo(fleet, old)
    assert ok(fleet, old, "dpkg -S /etc/apt/preferences.d/cuda-repository-pin-600").startswith(
        "cuda-keyring:"
    )
    ok(fleet, old, f"cat > {PIN} <<'PIN_END'\n{PRE_FIX_PIN}PIN_END")
    ok(fleet, old, f"{APT} install linux-headers-$(uname -r)")  # NVIDIA's guide: headers first
    ok(fleet, old, f"{APT} install cuda-drivers-535", timeout=900)
    ok(fleet, old, f"{APT} install {' '.join(FM_PKGS)}")
    got = versions(fleet, old, DRIVER_PKGS + FM_PKGS)
    assert {n: got[n] for n in DRIVER_PKGS} == dict.fromkeys(DRIVER_PKGS, CANONICAL_DEB), got
    assert {n: got[n] for n in FM_PKGS} == dict.fromkeys(FM_PKGS, f"{NVIDIA}-1"), got
    check = run_playbook(
        fleet,
        "check.yml",
        stack_vars(fleet.stack_path, gpu_stack_driver_branch="535"),
        check=True,
        tmp=tmp_path / "old-check",
        limit=old,
    )
    fm = check.checks(old)["driver.fabricmanager"]
    assert fm["status"] == "fail", fm
    assert CANONICAL in str(fm["expected"]) and NVIDIA in str(fm["actual"]), fm

    # ---- new: the product's pin, written by a provision run
    run = run_playbook(
        fleet,
        "site.yml",
        stack_vars(fleet.stack_path, gpu_stack_driver_branch="535"),
        tmp=tmp_path / "new-run",
        limit=new,
        tags="preflight,nvidia_repo,nvidia_driver",
    )
    got = versions(fleet, new, DRIVER_PKGS + FM_PKGS)
    assert {n: got[n] for n in DRIVER_PKGS} == dict.fromkeys(DRIVER_PKGS, f"{NVIDIA}-0ubuntu1"), got
    assert {n: got[n] for n in FM_PKGS} == dict.fromkeys(FM_PKGS, f"{NVIDIA}-1"), got
    assert run.rc == 0, run.output[-6000:]
    checks = run.checks(new)
    for cid in ("driver.fabricmanager", "driver.version", "driver.pin", "driver.hold"):
        assert checks[cid]["status"] == "pass", checks[cid]
    pin = ok(fleet, new, f"cat {PIN}")
    assert "Pin: release o=Ubuntu\nPin-Priority: -1" in pin, pin
    # Canonical's newer build is there all the same, only never a candidate
    policy = ok(fleet, new, "apt-cache policy nvidia-driver-535")
    assert f"{CANONICAL_DEB} -1" in policy, policy
    assert f"Candidate: {NVIDIA}-0ubuntu1" in policy, policy
