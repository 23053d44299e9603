"""Issue 20 item 6: driver.flavor judges the kernel module flavour really installed (the module
packages) and loaded (/proc/driver/nvidia/version: "Open Kernel Module" for the open one, as in
the real H200 capture), fails clearly when apt chose the other flavour's DKMS package, and refuses
NVIDIA's documented open-module steps on Ubuntu with the reason (they need dpkg --force-overwrite
and leave apt free to pull the proprietary nvidia-dkms-<B>)."""

from __future__ import annotations

import conftest
import probe_fakes as pf
from ansible_collections.provision.gpu.plugins.module_utils import evaluate as ev
from probe_fakes import FakeHost, judge, stack

OPEN_580 = conftest.capture("proc-driver-nvidia-version__r580_open_h200_device.txt")
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n"
)
V = "535.129.03"
UBUNTU_535 = {
    "cuda-drivers-535": f"{V}-1",
    "nvidia-driver-535": f"{V}-0ubuntu1",
    "nvidia-dkms-535": f"{V}-0ubuntu1",
    "nvidia-kernel-source-535": f"{V}-0ubuntu1",
    "nvidia-kernel-common-535": f"{V}-0ubuntu1",
}


def test_the_loaded_flavour_is_read_from_the_real_capture() -> None:
    assert ev.loaded_module_flavour(OPEN_580) == "open"
    assert ev.loaded_module_flavour(PROPRIETARY) == "proprietary"
    assert ev.loaded_module_flavour("") == ""
    assert ev.kernel_module_flavour("nvidia-dkms-535") == "proprietary"
    assert ev.kernel_module_flavour("nvidia-dkms-535-open") == "open"
    assert ev.kernel_module_flavour("nvidia-kernel-open-535") == "open"
    assert ev.kernel_module_flavour("linux-modules-nvidia-535-server-5.15.0-91-generic") == (
        "proprietary"
    )
    assert ev.kernel_module_flavour("linux-modules-nvidia-535-open-5.15.0-91-generic") == "open"
    assert ev.kernel_module_flavour("nvidia-driver-535") == ""


def test_proprietary_installed_and_loaded_passes() -> None:
    h = FakeHost().gpus(V).dpkg(UBUNTU_535)
    h.files["/proc/driver/nvidia/version"] = PROPRIETARY
    check = judge(h, ["driver"])["by_id"]["driver.flavor"]
    assert check["status"] == "pass", check
    assert "installed: proprietary (nvidia-dkms-535 nvidia-kernel-source-535)" in check["actual"]
    assert "loaded: proprietary" in check["actual"]


def test_apt_choosing_the_other_flavours_dkms_package_fails_clearly() -> None:
    """Debian: the stack says open, and nvidia-kernel-dkms (proprietary) is what got installed."""
    h = FakeHost(pf.DEBIAN_11).gpus(V).dpkg(
        {"nvidia-driver-cuda": f"{V}-1", "nvidia-kernel-dkms": f"{V}-1"}
    )
    for check_mode, status in ((True, "drift"), (False, "fail")):
        check = judge(h, ["driver"], stack(**{"driver.flavor": "open"}), check_mode=check_mode)[
            "by_id"
        ]["driver.flavor"]
        assert check["status"] == status, check
        assert check["message"] == (
            "the proprietary flavour's module package is installed: nvidia-kernel-dkms "
            "(apt chose it)"
        )
        assert check["remediation"].startswith("remove nvidia-kernel-dkms, then run `provision")


def test_open_module_loaded_under_a_proprietary_stack_is_named() -> None:
    h = FakeHost().gpus(V).dpkg(UBUNTU_535)
    h.files["/proc/driver/nvidia/version"] = OPEN_580.replace("580.159.04", V)
    check = judge(h, ["driver"])["by_id"]["driver.flavor"]
    assert check["status"] == "fail", check
    assert "loaded: open" in check["actual"]


def test_open_flavour_through_nvidias_ubuntu_steps_is_refused_with_the_reason() -> None:
    r = judge(FakeHost().gpus(), ["driver"], stack(**{"driver.flavor": "open"}))
    check = r["by_id"]["driver.flavor"]
    assert check["status"] == "fail", check
    assert "nvidia-dkms-535 is the proprietary module" in check["message"]
    assert "--force-overwrite" in check["message"]
    assert "nvidia-driver-535-open" in check["remediation"]
