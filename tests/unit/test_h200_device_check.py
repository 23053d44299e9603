"""`provision check --local` on a real H200 (bench/device/h200-product.sh, 2026-12-04) found four
verdicts the machine contradicted; each is replayed here from that machine's own captures:

* driver.module_loaded failed (exit 1) for a working driver that no package installed: what a run
  replaces is drift;
* driver.flavor passed although the loaded module was the open one, no module package was
  installed and the stack asked for the proprietary flavour;
* driver.fabricmanager was drift ("cannot tell whether NVSwitch is present without lspci") on a
  single PCIe GPU, which nvidia-smi topo -m shows with no NVLink: no NVSwitch fabric is possible;
* health.fabric said "no NVSwitch on the PCI bus" although lspci was not installed, and
  health.gpu_count printed "lspci 0" for a missing lspci.
"""

from __future__ import annotations

from typing import Any

from conftest import capture
from probe_fakes import FakeHost, judge, stack

VERSION = "580.159.04"


def h200(*, lspci: bool = False) -> FakeHost:
    """The H200 machine as captured: one GPU, driver 580.159.04 with the open module, no driver
    packages (the image's own driver), and (as there) no lspci."""
    h = FakeHost()
    h.binaries |= {"nvidia-smi", "dmesg"}
    if not lspci:
        h.binaries.discard("lspci")
    else:
        line = "00:06.0 3D controller [0302]: NVIDIA Corporation GH100 [H200] [10de:2335] (rev a1)"
        h.commands["lspci -nn"] = (0, line + "\n", "")
    h.commands["nvidia-smi"] = (0, capture("nvidia-smi__r580_1x_h200_device.txt"), "")
    h.commands["nvidia-smi -L"] = (0, capture("nvidia-smi-L__r580_1x_h200_device.txt"), "")
    topo = capture("nvidia-smi-topo-m__r580_1x_h200_device.txt")
    h.commands["nvidia-smi topo -m"] = (0, topo, "")
    h.commands["nvidia-smi -q"] = (0, capture("nvidia-smi-q__r580_1x_h200_device.txt"), "")
    h.commands["dmesg"] = (0, capture("dmesg-nvrm__r580_h200_device_no_xid.txt"), "")
    h.files["/proc/driver/nvidia/version"] = capture(
        "proc-driver-nvidia-version__r580_open_h200_device.txt")
    return h


def checks(h: FakeHost, **over: Any) -> dict[str, dict[str, Any]]:
    desired = stack(**{"driver.branch": "580", **over})
    return judge(h, ["driver", "health"], desired, check_mode=True)["by_id"]


def test_the_open_module_loaded_without_packages_is_not_the_proprietary_flavour() -> None:
    flavor = checks(h200())["driver.flavor"]
    assert flavor["status"] == "drift", flavor
    assert flavor["actual"] == "installed: no kernel module package; loaded: open"
    assert flavor["message"] == (
        "the loaded module is the open one and no proprietary module package is installed")
    # the stack's own flavour loaded: nothing to say about the flavour
    assert checks(h200(), **{"driver.flavor": "open"})["driver.flavor"]["status"] != "drift"


def test_one_gpu_without_nvlink_needs_no_lspci_to_rule_out_nvswitch() -> None:
    by_id = checks(h200())
    fm = by_id["driver.fabricmanager"]
    assert fm["status"] == "pass", fm
    fabric = by_id["health.fabric"]
    assert fabric["status"] == "skip"
    assert fabric["message"] == (
        "no NVLink between the GPUs (nvidia-smi topo -m), so no NVSwitch fabric")
    count = by_id["health.gpu_count"]
    assert count["status"] == "pass"
    assert count["actual"] == "1 GPUs (lspci n/a: not installed, expected not set)"


def test_with_lspci_the_pci_bus_decides() -> None:
    by_id = checks(h200(lspci=True))
    assert by_id["health.fabric"]["message"] == "no NVSwitch on the PCI bus"
    assert by_id["health.gpu_count"]["actual"] == "1 GPUs (lspci 1, expected not set)"


def test_nvlink_without_lspci_stays_unknown() -> None:
    """GPUs joined by NVLink (an HGX board) without lspci and without a Fabric section in
    nvidia-smi -q (A100): NVSwitch presence stays unknown, as before."""
    h = h200()
    topo = capture("nvidia-smi-topo-m__r580_1x_h200_device.txt")
    two = topo.replace("GPU0\t X \t0-15", "GPU0\t X \tNV18\t0-15").replace(
        "[4mGPU0\tCPU", "[4mGPU0\tGPU1\tCPU") + "GPU1\tNV18\t X \t0-15\t0\t\tN/A\n"
    h.commands["nvidia-smi topo -m"] = (0, two, "")
    h.commands["nvidia-smi -q"] = (0, "", "")
    by_id = checks(h)
    assert by_id["driver.fabricmanager"]["status"] == "drift"
    message = by_id["health.fabric"]["message"]
    assert message.startswith("NVSwitch presence unknown: lspci is missing"), message


def test_a_working_driver_no_package_installed_is_drift_not_a_failure() -> None:
    loaded = checks(h200())["driver.module_loaded"]
    assert loaded["status"] == "drift", loaded
    assert loaded["actual"] == VERSION
    assert loaded["message"].startswith("a driver not installed from packages is loaded")
