"""The health tier's parsers on real captured outputs (issue 19 item 4).

Real captures: the H200 device captures (driver 580.159.04) and the public nvidia-smi -q outputs
of tests/unit/fixtures/captures (sources in SOURCES.md). Formats with no capture there are named
in the test that uses them, with the documentation the line is written from.
"""

from __future__ import annotations

import re

import pytest
from ansible_collections.provision.gpu.plugins.module_utils import health_parsers as hp
from conftest import capture

H200_Q = "nvidia-smi-q__r580_1x_h200_device.txt"


def test_h200_full_q_gives_every_health_figure() -> None:
    (gpu,) = hp.parse_smi_q_health(capture(H200_Q))
    assert gpu["index"] == 0
    assert gpu["bus_id"] == "00000000:00:06.0"
    assert gpu["uuid"] == "GPU-8ccb2915-70e3-aed3-20ab-7fa39a42542c"
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["ecc_volatile_uncorrectable"] == 0
    assert gpu["ecc_aggregate_uncorrectable"] == 0
    assert gpu["remap_pending"] is False and gpu["remap_failure"] is False
    assert (gpu["pcie_width_current"], gpu["pcie_width_max"]) == (16, 16)
    assert (gpu["pcie_gen_current"], gpu["pcie_gen_max"]) == (5, 5)
    assert gpu["throttle_active"] == []  # Idle is active: ignored
    assert gpu["fabric_state"] is None  # "N/A" outside an NVSwitch fabric


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("nvidia-smi-q-d-ecc__r580_1x_h200_device.txt", "ecc_volatile_uncorrectable", 0),
        ("nvidia-smi-q-d-row_remapper__r580_1x_h200_device.txt", "remap_pending", False),
        ("nvidia-smi-q-d-row_remapper__r580_1x_h200_device.txt", "remap_uncorrectable", 0),
        ("nvidia-smi-q-d-performance__r580_1x_h200_device.txt", "throttle_active", []),
        ("nvidia-smi-q-d-page_retirement__r580_1x_h200_device.txt", "retired_pending", False),
    ],
)
def test_h200_single_sections_parse_alone(name: str, key: str, value: object) -> None:
    (gpu,) = hp.parse_smi_q_health(capture(name))
    assert gpu["bus_id"] == "00000000:00:06.0"
    assert gpu[key] == value


def test_8x_h100_sxm_fabric_completed_for_every_gpu() -> None:
    gpus = hp.parse_smi_q_health(capture("nvidia-smi-q__r565_8x_h100_sxm_fabric_completed.txt"))
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["fabric_state"] for g in gpus} == {"Completed"}
    assert {g["fabric_status"] for g in gpus} == {"Success"}
    assert len({g["uuid"] for g in gpus}) == 8


def test_a100_correctable_errors_are_not_uncorrectable() -> None:
    """The r555 A100 capture has 353 correctable DRAM errors on a GPU and no uncorrectable one."""
    text = capture("nvidia-smi-q__r555_4x_a100_sxm4_fabric_na.txt")
    assert "DRAM Correctable              : 353" in text
    gpus = hp.parse_smi_q_health(text)
    assert len(gpus) == 4
    assert all(g["ecc_volatile_uncorrectable"] == 0 for g in gpus)


def test_geforce_without_remapper_or_ecc_gives_none_not_false() -> None:
    """Remapped Rows : N/A (GeForce) is unknown, not "no remap pending"; an idle link at gen 1
    of 3 is by design (the generation is not judged)."""
    (gpu,) = hp.parse_smi_q_health(capture("nvidia-smi-q__r610_deprecated_driver_version.txt"))
    assert gpu["remap_pending"] is None and gpu["remap_failure"] is None
    assert gpu["ecc_volatile_uncorrectable"] is None
    assert (gpu["pcie_gen_current"], gpu["pcie_gen_max"]) == (1, 3)


def test_hw_slowdown_active_is_read_from_the_performance_section() -> None:
    """Fault derived from the real H200 capture by one edit (no public capture of an active
    HW slowdown): the nested HW Thermal Slowdown line keeps its place in the tree."""
    text = capture("nvidia-smi-q-d-performance__r580_1x_h200_device.txt")
    faulty = re.sub(r"(HW (Thermal )?Slowdown +): Not Active", r"\1: Active", text, count=2)
    assert faulty != text
    (gpu,) = hp.parse_smi_q_health(faulty)
    assert gpu["throttle_active"] == ["HW Slowdown", "HW Thermal Slowdown"]


def test_remap_pending_and_uncorrectable_ecc_edits_are_seen() -> None:
    text = capture(H200_Q)
    faulty = re.sub(r"(\n {8}Pending +): No", r"\1: Yes", text, count=1)
    faulty = re.sub(r"(DRAM Uncorrectable +): 0", r"\1: 2", faulty, count=1)
    assert faulty.count(": Yes") > text.count(": Yes")
    (gpu,) = hp.parse_smi_q_health(faulty)
    assert gpu["remap_pending"] is True
    assert gpu["ecc_volatile_uncorrectable"] == 2


def test_query_gpu_health_fields_csv() -> None:
    (row,) = hp.parse_query_csv(capture("nvidia-smi-query-gpu__r580_h200_health_fields_device.txt"))
    assert row["pci.bus_id"] == "00000000:00:06.0"
    assert row["pcie.link.width.current"] == "16"
    assert row["ecc.errors.uncorrected.volatile.total"] == "0"
    assert row["clocks_event_reasons.hw_slowdown"] == "Not Active"
    assert row["retired_pages.pending"] is None  # [N/A] on Hopper (row remapping instead)
    assert row["power.draw"] == "79.46 W"


def test_proc_driver_version_open_module() -> None:
    text = capture("proc-driver-nvidia-version__r580_open_h200_device.txt")
    assert hp.parse_proc_version(text) == "580.159.04"
    assert hp.parse_proc_version("") is None


def test_dmesg_nvrm_lines_without_xid_give_none() -> None:
    text = capture("dmesg-nvrm__r580_h200_device_no_xid.txt")
    assert "NVRM" in text
    assert hp.parse_xid_lines(text) == []


def test_xid_lines_in_dmesg_and_journal_formats() -> None:
    """No public capture of an Xid line is in the fixtures: these lines follow the format NVIDIA's
    Xid documentation gives (docs.nvidia.com/deploy/xid-errors/: "NVRM: Xid (PCI:0000:3b:00): 79,
    pid=..., GPU has fallen off the bus."), with dmesg's and journalctl -o short-monotonic's
    prefixes."""
    text = "\n".join(
        [
            "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.",
            "[ 2000.000001] myhost kernel: NVRM: Xid (PCI:0000:00:06): 48, pid=1, name=python3, "
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
            "[    3.467222] NVRM: Persistence mode is deprecated",
        ]
    )
    xids = hp.parse_xid_lines(text)
    assert [(x["xid"], x["bus"]) for x in xids] == [(79, "3b:00"), (48, "00:06")]
    assert xids[0]["ts"] == pytest.approx(1234.56789)
    assert "fallen off the bus" in xids[0]["detail"]


@pytest.mark.parametrize(
    ("bus", "short"),
    [("00000000:3B:00.0", "3b:00"), ("0000:3b:00", "3b:00"), ("3b:00.0", "3b:00")],
)
def test_bus_ids_of_every_tool_meet(bus: str, short: str) -> None:
    assert hp.normalise_bus(bus) == short


def test_nvlink_status_all_links_inactive_a100_pcie() -> None:
    gpus = hp.parse_nvlink_status(capture("nvidia-smi-nvlink-s__a100_pcie_inactive.txt"))
    assert [g["index"] for g in gpus] == [0, 1]
    assert all(g["all_inactive"] and g["active"] == 0 for g in gpus)


def test_nvlink_status_per_link_lines() -> None:
    """No public capture of a per-link status with a down link is in the fixtures: the lines follow
    the format of `nvidia-smi nvlink -s` ("Link N: 26.562 GB/s", "Link N: <inactive>")."""
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1)\n"
        "\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n\t Link 2: 26.562 GB/s\n"
    )
    (gpu,) = hp.parse_nvlink_status(text)
    assert gpu["active"] == 2 and gpu["inactive"] == [1]


def test_nvlink_error_counters_summed_per_gpu() -> None:
    """No public capture of `nvidia-smi nvlink -e` is in the fixtures: the lines follow its
    documented per-link counters ("Link N: Replay Errors: 0")."""
    text = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-31515c3d-1414-7c2c-004a-f86a898946ac)\n"
        "\t Link 0: Replay Errors: 0\n\t Link 0: Recovery Errors: 0\n\t Link 0: CRC Errors: 3\n"
        "\t Link 1: Replay Errors: 1\n\t Link 1: Recovery Errors: 0\n\t Link 1: CRC Errors: 2\n"
    )
    assert hp.parse_nvlink_errors(text) == {
        0: {"Replay Errors": 1, "Recovery Errors": 0, "CRC Errors": 5}
    }


def test_lspci_link_capability_and_status() -> None:
    """No public capture of `lspci -vv` for a GPU is in the fixtures: the lines follow pciutils'
    format (LnkCap/LnkSta "Speed 32GT/s, Width x16"); an x8 link on an x16 slot."""
    text = (
        "3b:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
        "\t\tLnkSta:\tSpeed 32GT/s, Width x8 (downgraded)\n"
    )
    assert hp.parse_lspci_links(text) == {
        "3b:00.0": {"cap_speed": 32.0, "cap_width": 16, "sta_speed": 32.0, "sta_width": 8}
    }
