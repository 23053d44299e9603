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


def test_a100_row_remap_pending_real_capture() -> None:
    """stas00/ml-engineering compute/accelerator/nvidia/debug.md: an R510 A100 after Xid 63, a row
    marked for remapping (Pending: Yes), 177 correctable DRAM errors and no uncorrectable one;
    the poster's "[...]" elisions stay in the tree as empty sections."""
    text = capture("nvidia-smi-q__r510_a100_sxm4_remap_pending_partial.txt")
    (gpu,) = hp.parse_smi_q_health(text)
    assert gpu["bus_id"] == "00000000:10:1C.0"
    assert gpu["remap_pending"] is True and gpu["remap_failure"] is False
    assert gpu["ecc_volatile_uncorrectable"] == 0 and gpu["ecc_aggregate_uncorrectable"] == 0
    assert gpu["retired_pending"] is False  # N/A on Ampere (rows are remapped instead)


def test_remap_pending_and_uncorrectable_ecc_edits_are_seen() -> None:
    """No public capture of uncorrectable DRAM ECC errors in `nvidia-smi -q` was found: the count
    is edited into the real H200 capture (the pending flag too, seen for real just above)."""
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


def test_xid_79_real_dmesg_T_with_its_continuation_lines() -> None:
    """akash-network/support#209: dmesg -T (a date, no seconds since boot), the Xid line and the
    driver's own "GPU has fallen off the bus" line that is not an Xid."""
    (xid,) = hp.parse_xid_lines(capture("dmesg-T-nvrm__r535_xid79_fallen_off_bus.txt"))
    assert (xid["xid"], xid["bus"], xid["ts"]) == (79, "a1:00", None)
    assert xid["detail"].endswith("GPU has fallen off the bus.")
    assert xid["gpu_instance"] is None


def test_xid_43_31_94_real_dmesg_T_three_gpus_of_a_vm() -> None:
    """akash-network/support#244: R535 H100s in a VM (bus 00:05, 00:07, 00:08), Xid 43 twice on
    one GPU, an MMU fault (31) and a contained ECC error (94) with pid '<unknown>'."""
    xids = hp.parse_xid_lines(capture("dmesg-T-nvrm__r535_h100_vm_xid43_31_94_partial.txt"))
    assert [(x["xid"], x["bus"]) for x in xids] == [
        (43, "00:05"),
        (43, "00:05"),
        (31, "00:07"),
        (94, "00:08"),
    ]
    assert "MMU Fault" in xids[2]["detail"]
    assert xids[3]["detail"].startswith("pid='<unknown>'")


def test_xid_48_and_64_in_syslog_keep_the_seconds_after_the_syslog_prefix() -> None:
    """NVIDIA/gpu-operator#1146: /var/log/syslog lines ("Dec  2 11:38:47 worker4 kernel:
    [  219.470994] NVRM: ...") around RmInitAdapter failures of another GPU (not Xids)."""
    xids = hp.parse_xid_lines(capture("syslog-nvrm__xid48_64_dbe_gpu_operator_partial.txt"))
    assert [(x["xid"], x["bus"]) for x in xids] == [(48, "07:00"), (64, "07:00")]
    assert xids[0]["ts"] == pytest.approx(219.470994)
    assert "double bit error" in xids[0]["detail"]


def test_xid_13_and_109_dmesg_ctime_and_a_non_nvrm_line() -> None:
    """leptonai/gpud#46 (README of its Xid component): dmesg --ctime, three Xid 13 lines and an
    Xid 109, after an nvidia-peermem line that is not an Xid."""
    xids = hp.parse_xid_lines(capture("dmesg-ctime-nvrm__xid13_109_gpud_readme.txt"))
    assert [x["xid"] for x in xids] == [13, 13, 13, 109]
    assert {x["bus"] for x in xids} == {"cb:00"}


def test_xid_45_journal_lines_name_the_xid_that_caused_them() -> None:
    """NVIDIA/open-gpu-kernel-modules#1150: journalctl -k lines ("kernel: NVRM: Xid ..."), Xid 45
    on four GPUs "caused by previous Xid 149/145": the parsed id is 45, not the trailing one."""
    xids = hp.parse_xid_lines(capture("journalctl-k-nvrm__xid45_after_xid149_145_partial.txt"))
    assert {x["xid"] for x in xids} == {45}
    assert {x["bus"] for x in xids} == {"dc:00", "ed:00", "ba:00", "97:00"}
    assert xids[0]["detail"].endswith("caused by previous Xid 149")


def test_xid_63_row_remap_line() -> None:
    """stas00/ml-engineering compute/accelerator/nvidia/debug.md: an A100 VM's Xid 63 (device
    1c, not 00: the device part of the address is kept)."""
    (xid,) = hp.parse_xid_lines(capture("syslog-nvrm__r510_a100_xid63_row_remap.txt"))
    assert (xid["xid"], xid["bus"]) == (63, "10:1c")


def test_xid_on_gb200_keeps_the_pci_domain() -> None:
    """GB200 GPUs sit at bus 01 device 00 of domains 0008/0009/0018/0019: Xids from two of them
    (leptonai/gpud#1174's kmsg lines, kubernetes-sigs/dra-driver-nvidia-gpu#904's dmesg line) must
    not meet on "01:00"; a domain-0000 GPU keeps the short form."""
    xids = hp.parse_xid_lines(capture("kmsg-nvrm__gb200_xid145_149_pci_domains_partial.txt"))
    assert [(x["xid"], x["bus"]) for x in xids] == [
        (149, "0019:01:00"),
        (149, "00:00"),
        (145, "0018:01:00"),
    ]
    (xid,) = hp.parse_xid_lines(capture("dmesg-nvrm__gb200_xid43_pci_domain_0009.txt"))
    assert (xid["xid"], xid["bus"], xid["ts"]) == (43, "0009:01:00", pytest.approx(1231741.378609))
    # nvidia-smi spells the same GPU 00000009:01:00.0: both meet on one key
    assert hp.normalise_bus("00000009:01:00.0") == xid["bus"]


def test_xid_attributed_to_a_mig_instance() -> None:
    """No public capture of a MIG-attributed Xid line was found: these follow the driver's format
    strings ("NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d, pid=%s, name=%s, %s",
    NVIDIA/open-gpu-kernel-modules:src/nvidia/src/kernel/gpu/rc/kernel_rc.c) and the example of
    NVIDIA's A100 memory error management guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/).
    Before this the parser dropped such lines: a MIG host's Xid 94/95 went unseen."""
    text = "\n".join(
        [
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No",
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics Exception",
            "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). "
            "RST: Yes, D-RST: No",
        ]
    )
    xids = hp.parse_xid_lines(text)
    assert [(x["xid"], x["bus"], x["gpu_instance"], x["compute_instance"]) for x in xids] == [
        (94, "01:00", 5, None),
        (13, "3b:00", 1, 2),
        (95, "01:00", None, None),
    ]


@pytest.mark.parametrize(
    ("bus", "short"),
    [
        ("00000000:3B:00.0", "3b:00"),
        ("0000:3b:00", "3b:00"),
        ("3b:00.0", "3b:00"),
        ("00000019:01:00.0", "0019:01:00"),
        ("0018:01:00", "0018:01:00"),
        ("0004:01:00.0", "0004:01:00"),
    ],
)
def test_bus_ids_of_every_tool_meet(bus: str, short: str) -> None:
    assert hp.normalise_bus(bus) == short


def test_nvlink_status_all_links_inactive_a100_pcie() -> None:
    gpus = hp.parse_nvlink_status(capture("nvidia-smi-nvlink-s__a100_pcie_inactive.txt"))
    assert [g["index"] for g in gpus] == [0, 1]
    assert all(g["all_inactive"] and g["active"] == 0 for g in gpus)


def test_nvlink_status_two_links_inactive_v100_with_a_redacted_uuid() -> None:
    """Azure/azhpc-diagnostics#73: a V100 with links 3 and 5 <inactive>; the poster replaced the
    UUID with "...", which the parser used to reject, dropping the GPU and its down links."""
    (gpu,) = hp.parse_nvlink_status(
        capture("nvidia-smi-nvlink-s__v100_sxm2_two_links_inactive_partial.txt")
    )
    assert (gpu["index"], gpu["uuid"], gpu["active"], gpu["inactive"]) == (3, None, 4, [3, 5])


def test_nvlink_status_a100_sxm4_all_12_links_active() -> None:
    """NVIDIA/nccl-tests#228: "\t Link N: 25 GB/s" on an A100 SXM4 (12 links a GPU)."""
    gpus = hp.parse_nvlink_status(
        capture("nvidia-smi-nvlink-s__a100_sxm4_12_links_active_partial.txt")
    )
    assert [(g["index"], g["active"], g["inactive"]) for g in gpus[:2]] == [
        (0, 12, []),
        (1, 12, []),
    ]
    assert gpus[0]["uuid"] == "GPU-ff8a40d4-abc6-08d1-f939-15848b5d4e05"
    assert not any(g["all_inactive"] for g in gpus)


def test_nvlink_status_b200_all_links_inactive() -> None:
    """leptonai/gpud#1085: a B200 whose links are all down prints the NVML message under its GPU
    line (its UUID redacted "GPU-xxx" by the poster)."""
    (gpu,) = hp.parse_nvlink_status(
        capture("nvidia-smi-nvlink-s__b200_all_links_inactive_partial.txt")
    )
    assert (gpu["index"], gpu["all_inactive"], gpu["active"]) == (2, True, 0)


def test_nvlink_status_h100_with_elided_links() -> None:
    """stas00/ml-engineering compute/accelerator/nvidia/debug.md: H100 links at 26.562 GB/s, the
    middle of the list elided ("[...]", not a link line)."""
    (gpu,) = hp.parse_nvlink_status(capture("nvidia-smi-nvlink-s__h100_sxm_26g_partial.txt"))
    assert (gpu["active"], gpu["inactive"]) == (2, [])


def test_nvlink_error_counters_real_h100_all_zero() -> None:
    """stas00/ml-engineering compute/accelerator/nvidia/debug.md: `nvidia-smi nvlink -e` on an
    H100, blank lines between links and an elided middle."""
    counters = hp.parse_nvlink_errors(
        capture("nvidia-smi-nvlink-e__h100_sxm_zero_counters_partial.txt")
    )
    assert counters == {0: {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}}


def test_nvlink_error_counters_summed_per_gpu() -> None:
    """No public capture of `nvidia-smi nvlink -e` with non-zero counters was found: these lines
    follow the real H100 layout above ("Link N: Replay Errors: 0") with counts written in."""
    text = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-31515c3d-1414-7c2c-004a-f86a898946ac)\n"
        "\t Link 0: Replay Errors: 0\n\t Link 0: Recovery Errors: 0\n\t Link 0: CRC Errors: 3\n"
        "\t Link 1: Replay Errors: 1\n\t Link 1: Recovery Errors: 0\n\t Link 1: CRC Errors: 2\n"
    )
    assert hp.parse_nvlink_errors(text) == {
        0: {"Replay Errors": 1, "Recovery Errors": 0, "CRC Errors": 5}
    }


@pytest.mark.parametrize(
    ("name", "links"),
    [
        # janhq/jan#183: an RTX 4090 on a riser, Gen1 speed, width ok
        (
            "lspci-vv-grep-lnk__rtx4090_riser_gen1_downgraded.txt",
            [("cap", 16.0, 16), ("sta", 2.5, 16)],
        ),
        # noonghunna/club-3090#1028: GPU then its upstream bridge; "Width x16" with no marker
        (
            "lspci-vvv-s__rtx3090_gen1_idle_width_no_marker_partial.txt",
            [("cap", 16.0, 16), ("sta", 2.5, 16), ("cap", 16.0, 16), ("sta", 2.5, 16)],
        ),
        # geerlingguy/raspberry-pi-pcie-devices#480: a Quadro RTX 8000 trained at x1
        ("lspci-vvvv__quadro_rtx8000_x1_downgraded_partial.txt", [("sta", 5.0, 1)]),
    ],
)
def test_lspci_link_lines_of_real_gpus(name: str, links: list[tuple[str, float, int]]) -> None:
    """Real LnkCap/LnkSta lines: tab or space indented, with "(ok)", "(downgraded)" or no marker;
    LnkCtl, LnkSta2 and the flag lines around them are not link lines."""
    parsed = [hp.parse_lnk_line(line) for line in capture(name).splitlines()]
    assert [p for p in parsed if p] == links


def test_lspci_links_need_the_device_line() -> None:
    """The grep'd captures above have no "bus:dev.fn class: vendor" line: nothing is attributed
    to a made-up slot (the probe reads full `lspci -vv` output, where every block has one)."""
    assert (
        hp.parse_lspci_links(capture("lspci-vv-grep-lnk__rtx4090_riser_gen1_downgraded.txt")) == {}
    )


def test_lspci_link_capability_and_status() -> None:
    """No public capture of a whole `lspci -vv` block of a GPU with its LnkSta was found (the
    posted blocks are cut before it, e.g. open-mpi/hwloc#653's A100): the device line and the
    real lines of janhq/jan#183 and geerlingguy/raspberry-pi-pcie-devices#480 put together, an
    x1 link on an x16 slot; the domain-prefixed slot is geerlingguy#677's spelling."""
    text = (
        "0004:01:00.0 VGA compatible controller: NVIDIA Corporation Device 25b2 (rev a1)\n"
        "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <16us\n"
        "\t\tLnkSta:\tSpeed 5GT/s (downgraded), Width x1 (downgraded)\n"
    )
    assert hp.parse_lspci_links(text) == {
        "0004:01:00.0": {"cap_speed": 16.0, "cap_width": 16, "sta_speed": 5.0, "sta_width": 1}
    }
