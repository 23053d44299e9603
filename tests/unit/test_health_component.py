"""The health component (issue 19 quick tier): collected from real captures, judged per fault.

Each fault is the real capture with one edit (the edit is in the test); every finding must name
the GPU (index, bus id, UUID) and an action of the ladder; a health failure is `fail` in check mode
too (never drift).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from ansible_collections.provision.gpu.plugins.module_utils import check_catalogue as catalog
from ansible_collections.provision.gpu.plugins.module_utils import evaluate as ev
from ansible_collections.provision.gpu.plugins.module_utils.components import REGISTRY, health
from ansible_collections.provision.gpu.plugins.module_utils.components.base import ACTIONS
from conftest import capture
from probe_fakes import FakeHost, judge, stack

Q_8X_H100 = capture("nvidia-smi-q__r565_8x_h100_sxm_fabric_completed.txt")
PROC_VERSION = capture("proc-driver-nvidia-version__r580_open_h200_device.txt")
DMESG = capture("dmesg-nvrm__r580_h200_device_no_xid.txt")
UUID_0 = "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
FM_ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
PERSISTENCED = {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}


def host(q: str = Q_8X_H100, kernel_log: str = DMESG, fm: dict[str, str] | None = None,
         version: str = "580.159.04") -> FakeHost:
    """8x H100 SXM (NVSwitch): the R535 table and topology captures, the R565 -q capture."""
    h = FakeHost().gpus(version=version).units(PERSISTENCED, fm or FM_ACTIVE)
    h.binaries.add("dmesg")
    # lspci in the format of the fakes' assembled listing, at the bus ids of the -q capture
    lspci = "\n".join(
        f"{bus}:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] "
        "[10de:2330] (rev a1)"
        for bus in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
    ) + "\n" + "\n".join(
        f"{5 + i:02x}:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)"
        for i in range(4)
    )
    h.commands["lspci -nn"] = (0, lspci + "\n", "")
    h.commands["nvidia-smi -q"] = (0, q, "")
    h.commands["nvidia-smi nvlink -s"] = (0, "", "")
    h.commands["nvidia-smi nvlink -e"] = (0, "", "")
    h.commands["dmesg"] = (0, kernel_log, "")
    h.files["/proc/driver/nvidia/version"] = PROC_VERSION.replace("580.159.04", version)
    return h


def run(h: FakeHost, check_mode: bool = True, **over: Any) -> dict[str, Any]:
    desired = stack(**over)
    return judge(h, ["health"], desired, check_mode=check_mode)


def health_checks(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in result["by_id"].items() if k.startswith("health.")}


def test_healthy_8x_h100_has_no_finding() -> None:
    checks = health_checks(run(host()))
    assert set(checks) == {spec.id for spec in health.CHECKS}
    bad = {k: v["message"] for k, v in checks.items() if v["status"] not in ("pass", "skip")}
    assert bad == {}
    assert checks["health.fabric"]["status"] == "pass"
    assert checks["health.gpu_count"]["actual"].startswith("8 GPUs")


def test_the_probe_stays_read_only_and_passive() -> None:
    """No nvidia-smi -pm/-r/-rac, no counter reset, no dmesg -c: only reads."""
    h = host()
    run(h)
    smi = [a for a in h.ran if a[0] == "nvidia-smi"]
    assert ["nvidia-smi", "-q"] in smi
    for argv in h.ran:
        assert not {"-pm", "-r", "-rac", "-c", "--clear", "-C", "--gpu-reset"} & set(argv), argv


def _only_bad(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in health_checks(result).items() if v["status"] == "fail"}


def _gpu0(edit: str, new: str, text: str = Q_8X_H100, count: int = 1) -> str:
    out = re.sub(edit, new, text, count=count)
    assert out != text, edit
    return out


@pytest.mark.parametrize(
    ("cid", "action", "q"),
    [
        ("health.ecc", "reset_gpu", _gpu0(r"(DRAM Uncorrectable +): 0", r"\1: 2")),
        ("health.row_remap", "reset_gpu", _gpu0(r"(\n {8}Pending +): No", r"\1: Yes")),
        (
            "health.row_remap",
            "service",
            _gpu0(r"(Remapping Failure Occurred +): No", r"\1: Yes"),
        ),
        ("health.pcie_link", "drain", _gpu0(r"(\n {16}Current +): 16x", r"\1: 8x")),
        ("health.throttle", "drain", _gpu0(r"(\n {8}HW Slowdown +): Not Active", r"\1: Active")),
        ("health.fabric", "drain", _gpu0(r"(\n {8}State +): Completed", r"\1: In Progress")),
    ],
)
def test_each_nvidia_smi_fault_fails_naming_gpu0_and_action(cid: str, action: str, q: str) -> None:
    result = run(host(q=q), check_mode=True)
    bad = _only_bad(result)
    assert list(bad) == [cid]
    check = bad[cid]
    assert check["status"] == "fail"  # not drift, even in check mode
    assert check["action"] == action and action in ACTIONS
    (finding,) = check["findings"]
    assert finding["gpu"] == {"index": 0, "bus_id": "00000000:18:00.0", "uuid": UUID_0}
    assert finding["threshold"] and finding["figure"]
    assert UUID_0 in check["message"] and action in check["message"]
    assert result["report"]["health_action"] == action


def test_gpu_on_the_bus_but_gone_from_nvidia_smi_names_the_bus_id() -> None:
    # GPU 7 (the last block of -q) fell off: drop its block from -q and its line of the query
    blocks = Q_8X_H100.split("\nGPU 00000000:")
    q = "\nGPU 00000000:".join(blocks[:-1]) + "\n"
    h = host(q=q)
    query = h.commands["nvidia-smi --query-gpu=index,name"]
    h.commands["nvidia-smi --query-gpu=index,name"] = (
        0, "\n".join(query[1].strip().splitlines()[:7]) + "\n", "")
    check = _only_bad(run(h))["health.gpu_count"]
    assert check["action"] == "reboot"
    (finding,) = check["findings"]
    assert finding["gpu"]["bus_id"] == "db:00"
    assert "db:00" in check["message"]


def test_expected_count_from_the_stack() -> None:
    result = run(host(), **{"health.expected_gpus": 16})
    check = result["by_id"]["health.gpu_count"]
    assert check["status"] == "fail" and "16 expected" in check["message"]


@pytest.mark.parametrize(("xid", "action"), [(79, "reboot"), (48, "reset_gpu"), (13, "monitor")])
def test_xid_lines_map_to_the_catalogue_action(xid: int, action: str) -> None:
    """Xid lines in the format of NVIDIA's Xid documentation (no public capture in the fixtures)."""
    log = DMESG + f"[ 99.000000] NVRM: Xid (PCI:0000:18:00): {xid}, pid=1, name=python3, x\n"
    check = run(host(kernel_log=log))["by_id"]["health.xid"]
    assert check["action"] == action
    assert check["status"] == ("pass" if action == "monitor" else "fail")
    assert check["findings"][0]["gpu"]["uuid"] == UUID_0


def test_dead_fabric_manager_on_nvswitch_fails() -> None:
    fm = {"LoadState": "loaded", "ActiveState": "failed", "UnitFileState": "enabled"}
    check = _only_bad(run(host(fm=fm)))["health.fabric"]
    assert "failed" in check["message"] and check["action"] == "drain"


def test_module_userspace_mismatch_is_one_verdict() -> None:
    h = host()
    h.commands["nvidia-smi"] = (18, capture("nvidia-smi__nvml_mismatch_550.txt"), "")
    check = _only_bad(run(h))["health.driver_coherence"]
    assert check["action"] == "reboot"
    assert "580.159.04" in check["message"]


def test_no_gpu_host_skips_every_health_check() -> None:
    result = judge(FakeHost(), ["health"], stack(), check_mode=True)
    assert {c["status"] for c in health_checks(result).values()} == {"skip"}


def test_registry_catalogue_and_evaluator_agree() -> None:
    assert REGISTRY["health"] is health
    assert "health" in ev.COMPONENTS and ev.SECTIONS["health"] == health.SECTIONS
    for spec in health.CHECKS:
        assert catalog.CATALOG[spec.id]["action"] == spec.action
        assert spec.action in ACTIONS
