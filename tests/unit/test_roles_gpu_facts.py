# ruff: noqa: E501  (captured nvidia-smi/lspci output is kept verbatim)
"""Unit tests for plugins/module_utils/gpu.py (pure gather/parse functions) on assembled formats;
test_probe_captures.py runs the same parsers on real captured outputs."""

from __future__ import annotations

from collections.abc import Callable

import conftest  # noqa: F401 - puts the collection on sys.path
import pytest
from ansible_collections.provision.gpu.plugins.module_utils import gpu as ngf

# Real formats (header line and topo legend verbatim, as in the captures of
# tests/unit/fixtures/captures/nvidia-smi__*.txt and nvidia-smi-topo-m__*.txt).
HEADER_535 = """Tue Dec  2 18:00:00 2026
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.154.05             Driver Version: 535.154.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
"""
QUERY_H100 = "\n".join(
    f"{i}, NVIDIA H100 80GB HBM3, GPU-55748b5b-32df-bbd9-d0f6-f50980c12a{i:02d}, 81559, "
    f"00000000:{0x18 + i:02X}:00.0, Enabled, Enabled, Disabled, 535.154.05"
    for i in range(8)
) + "\n"
QUERY_4090 = "\n".join(
    f"{i}, NVIDIA GeForce RTX 4090, GPU-1f1b65b3-0000-0000-0000-00000000000{i}, 24564, "
    f"00000000:{0x41 + i:02X}:00.0, Disabled, [N/A], [N/A], 535.154.05"
    for i in range(4)
) + "\n"
LIST_A100 = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-55748b5b-32df-bbd9-d0f6-f50980c12af8)\n"
TOPO_H100 = """\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tPIX\t0-47,96-143\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tSYS\t0-47,96-143\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tSYS\t48-95\t1\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
TOPO_PCIE = """\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPHB\t0-31\t0
GPU1\tPHB\t X \t0-31\t0

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""
LSPCI_H100 = """00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 04)
18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
05:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)
06:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)
"""
LSPCI_V100 = "3b:00.0 3D controller [0302]: NVIDIA Corporation GV100GL [Tesla V100 SXM2 16GB] [10de:1db1] (rev a1)\n"
LSPCI_NONE = "00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 04)\n"
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n")
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\n"

Result = tuple[int, str, str]


def fake_run(table: dict[str, Result]) -> Callable[[list[str]], Result]:
    """A run() that answers by the joined argv; unknown commands are 'not found' (127)."""
    calls: list[str] = []

    def run(argv: list[str]) -> Result:
        key = " ".join(argv)
        calls.append(key)
        if key in table:
            return table[key]
        if argv[0] in {k.split()[0] for k in table}:
            return 2, "", "unsupported"
        return 127, "", f"{argv[0]}: command not found"

    run.calls = calls  # type: ignore[attr-defined]
    return run


def h100_table(caps: bool = True) -> dict[str, Result]:
    table: dict[str, Result] = {
        "lspci -nn": (0, LSPCI_H100, ""),
        "nvidia-smi": (0, HEADER_535, ""),
        f"nvidia-smi --query-gpu={ngf.QUERY_FIELDS} --format=csv,noheader,nounits": (0, QUERY_H100, ""),
        "nvidia-smi topo -m": (0, TOPO_H100, ""),
    }
    if caps:
        table["nvidia-smi --query-gpu=index,compute_cap --format=csv,noheader,nounits"] = (
            0, "".join(f"{i}, 9.0\n" for i in range(8)), "")
    return table


def test_h100_full_facts() -> None:
    facts = ngf.gather(fake_run(h100_table()))
    assert facts["state"] == "ok"
    assert facts["gpu_count"] == 8
    assert facts["driver_version"] == "535.154.05"
    assert facts["cuda_driver_version"] == "12.2"
    assert facts["gpu_model"] == "NVIDIA H100 80GB HBM3"
    g0 = facts["gpus"][0]
    assert g0["memory_mib"] == 81559
    assert g0["pci_bus_id"] == "00000000:18:00.0"
    assert g0["persistence_mode"] == "Enabled"
    assert g0["ecc_mode"] == "Enabled"
    assert g0["mig_mode"] == "Disabled"
    assert g0["uuid"].startswith("GPU-55748b5b")
    assert g0["compute_cap"] == 9.0
    assert facts["nvswitch_present"] is True
    assert facts["nvswitch_count"] == 2
    assert facts["topology"]["interconnect"] == "nvlink"
    assert facts["topology"]["nvlink_max"] == 18
    assert facts["turing_or_newer"] is True


def test_geforce_na_tokens_and_pcie_topology() -> None:
    table = {
        "lspci -nn": (0, "41:00.0 VGA compatible controller [0300]: NVIDIA Corporation AD102 "
                         "[GeForce RTX 4090] [10de:2684] (rev a1)\n", ""),
        "nvidia-smi": (0, HEADER_535, ""),
        f"nvidia-smi --query-gpu={ngf.QUERY_FIELDS} --format=csv,noheader,nounits": (0, QUERY_4090, ""),
        "nvidia-smi topo -m": (0, TOPO_PCIE, ""),
    }
    facts = ngf.gather(fake_run(table))
    assert facts["gpu_count"] == 4
    assert facts["gpus"][0]["ecc_mode"] is None
    assert facts["gpus"][0]["mig_mode"] is None
    assert facts["nvswitch_present"] is False
    assert facts["topology"] == {"interconnect": "pcie", "nvlink_max": 0, "nvlink_min": 0,
                                 "pcie_paths": ["PHB"], "gpus": 2}
    # compute_cap unsupported -> falls back to the PCI device id (AD102 0x2684 >= Turing)
    assert facts["turing_or_newer"] is True


def test_not_installed_with_gpu_on_bus() -> None:
    facts = ngf.gather(fake_run({"lspci -nn": (0, LSPCI_H100, "")}))
    assert facts["state"] == "not_installed"
    assert facts["gpu_count"] == 2
    assert facts["nvswitch_present"] is True
    assert facts["driver_version"] is None


def test_no_device_when_bus_has_no_nvidia() -> None:
    facts = ngf.gather(fake_run({"lspci -nn": (0, LSPCI_NONE, "")}))
    assert facts["state"] == "no_device"
    assert facts["gpu_count"] == 0
    assert "no NVIDIA GPU" in facts["message"]


def test_driver_not_loaded_exit_9() -> None:
    facts = ngf.gather(fake_run({"lspci -nn": (0, LSPCI_H100, ""), "nvidia-smi": (9, NO_DRIVER, "")}))
    assert facts["state"] == "driver_not_loaded"
    assert facts["nvidia_smi_rc"] == 9


def test_version_mismatch_exit_18() -> None:
    facts = ngf.gather(fake_run({"lspci -nn": (0, LSPCI_H100, ""), "nvidia-smi": (18, MISMATCH, "")}))
    assert facts["state"] == "version_mismatch"
    assert "reboot" in facts["message"]


def test_pre_turing_bus_blocks_open_modules() -> None:
    facts = ngf.gather(fake_run({"lspci -nn": (0, LSPCI_V100, "")}))
    assert facts["turing_or_newer"] is False


def test_list_fallback_when_query_fails() -> None:
    table: dict[str, Result] = {
        "lspci -nn": (0, LSPCI_V100, ""),
        "nvidia-smi": (0, HEADER_535, ""),
        "nvidia-smi -L": (0, LIST_A100, ""),
    }
    facts = ngf.gather(fake_run(table))
    assert facts["gpus"] == [{"index": 0, "name": "NVIDIA A100-SXM4-80GB",
                              "uuid": "GPU-55748b5b-32df-bbd9-d0f6-f50980c12af8",
                              "compute_cap": None}]


def test_fabric_state_from_query_without_lspci() -> None:
    table = h100_table()
    del table["lspci -nn"]
    table["nvidia-smi -q"] = (0, "GPU 00000000:18:00.0\n    Fabric\n        State    : Completed\n"
                                 "        Status   : Success\n    Processes : None\n", "")
    facts = ngf.gather(fake_run(table))
    assert facts["lspci_available"] is False
    assert facts["fabric_state"] == "Completed"
    assert facts["nvswitch_present"] is True


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4  |", ("550.54.15", "12.4")),
        ("garbage", (None, None)),
    ],
)
def test_parse_header(line: str, expected: tuple[str | None, str | None]) -> None:
    assert ngf.parse_header(line) == expected


def test_fabric_state_na_is_not_an_nvswitch() -> None:
    """H100 NVL pairs (NVLink bridge, no NVSwitch) print `State : N/A` in the Fabric section."""
    table = h100_table()
    del table["lspci -nn"]
    table["nvidia-smi -q"] = (0, "GPU 00000000:18:00.0\n    Fabric\n        State    : N/A\n"
                                 "        Status   : N/A\n    Processes : None\n", "")
    facts = ngf.gather(fake_run(table))
    assert facts["fabric_state"] is None
    assert facts["nvswitch_present"] is False
