# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""NVIDIA GPU facts from nvidia-smi and lspci: pure parsers plus ``gather(run)``.

Runs on the target (Python 3.8+): standard library only. Every parser is unit-tested on real
captured output (tests/unit/fixtures/captures, each with its public source in SOURCES.md).
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any, Callable, List, Tuple

# run(argv) -> (rc, stdout, stderr); rc 127 = binary missing
Run = Callable[[List[str]], Tuple[int, str, str]]

QUERY_FIELDS = (
    "index,name,uuid,memory.total,pci.bus_id,persistence_mode,"
    "ecc.mode.current,mig.mode.current,driver_version"
)
# The table header: "Driver Version: X   CUDA Version: Y" up to R600; from R610 "KMD Version: X
# CUDA UMD Version: Y" (the driver is the kernel-mode driver, CUDA the user-mode driver's version).
HEADER_RE = re.compile(r"Driver Version:\s*([\d.]+)\s+CUDA Version:\s*([\d.]+)")
HEADER_KMD_RE = re.compile(r"KMD Version:\s*([\d.]+)\s+CUDA UMD Version:\s*([\d.]+)")
NVML_LIB_RE = re.compile(r"NVML library version:\s*([\d.]+)")
SMI_VERSION_RE = re.compile(r"NVIDIA-SMI\s+([\d.]+)")
LSPCI_RE = re.compile(
    r"^(?P<slot>\S+)\s+(?P<cls>[^\[]*)\[(?P<cc>[0-9a-fA-F]{4})\]:\s+(?P<desc>.*?)"
    r"\[10de:(?P<dev>[0-9a-fA-F]{4})\]"
)
# PCI class codes: 0300 VGA, 0302 3D controller (GPUs); 0680 other bridge (NVSwitch).
GPU_CLASSES = ("0300", "0302")
NVSWITCH_CLASS = "0680"
# Turing (TU10x/TU11x) device ids start at 0x1e00; everything below is Volta or older.
TURING_FIRST_DEVICE_ID = 0x1E00
NA_TOKENS = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")
NV_CELL_RE = re.compile(r"^NV(\d+)$")


def _na(value: str) -> str | None:
    """Return None for nvidia-smi's not-available tokens, else the stripped value."""
    value = value.strip()
    return None if value in NA_TOKENS else value


def parse_query_gpu(text: str) -> list[dict[str, Any]]:
    """Parse ``--query-gpu=QUERY_FIELDS --format=csv,noheader,nounits`` output."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 9:
            continue
        try:
            index = int(cols[0])
        except ValueError:
            continue
        memory = _na(cols[3])
        try:
            memory_mib = int(float(memory.split()[0])) if memory else None
        except ValueError:
            memory_mib = None
        gpus.append(
            {
                "index": index,
                "name": cols[1],
                "uuid": cols[2],
                "memory_mib": memory_mib,
                "pci_bus_id": cols[4],
                "persistence_mode": _na(cols[5]),
                "ecc_mode": _na(cols[6]),
                "mig_mode": _na(cols[7]),
                "driver_version": _na(cols[8]),
            }
        )
    return gpus


def parse_list(text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi -L`` lines: GPU N: NAME (UUID: GPU-...)."""
    gpus = []
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$", line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3)})
    return gpus


def parse_header(text: str) -> tuple[str | None, str | None]:
    """Return (driver_version, cuda_driver_version) from the plain nvidia-smi table (both the
    "Driver Version / CUDA Version" header and R610's "KMD Version / CUDA UMD Version")."""
    for regex in (HEADER_RE, HEADER_KMD_RE):
        m = regex.search(text)
        if m:
            return m.group(1), m.group(2)
    return None, None


def parse_nvml_library_version(text: str | None) -> str | None:
    """The "NVML library version: 550.144" line of a driver/library mismatch (newer drivers), or
    None: the userspace major.minor that no longer matches the loaded module."""
    m = NVML_LIB_RE.search(text or "")
    return m.group(1) if m else None


def parse_topology(text: str) -> dict[str, Any]:
    """Summarise ``nvidia-smi topo -m``: interconnect nvlink|pcie|none and NV# link count."""
    gpu_rows = [ln for ln in text.splitlines() if re.match(r"^GPU\d+\s", ln)]
    nv_counts = []
    pcie_cells = set()
    for row in gpu_rows:
        for cell in row.split()[1:]:
            m = NV_CELL_RE.match(cell)
            if m:
                nv_counts.append(int(m.group(1)))
            elif cell in ("SYS", "NODE", "PHB", "PXB", "PIX"):
                pcie_cells.add(cell)
    if nv_counts:
        link = "nvlink"
    elif pcie_cells:
        link = "pcie"
    else:
        link = "none"
    return {
        "interconnect": link,
        "nvlink_max": max(nv_counts) if nv_counts else 0,
        "nvlink_min": min(nv_counts) if nv_counts else 0,
        "pcie_paths": sorted(pcie_cells),
        "gpus": len(gpu_rows),
    }


def parse_lspci(text: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Return (gpus, nvswitches) as lists of {slot, device_id, description} from lspci -nn."""
    gpus, switches = [], []
    for line in text.splitlines():
        m = LSPCI_RE.match(line.strip())
        if not m:
            continue
        entry = {
            "slot": m.group("slot"),
            "device_id": m.group("dev").lower(),
            "description": (m.group("cls") + m.group("desc")).strip(),
        }
        if m.group("cc") in GPU_CLASSES:
            gpus.append(entry)
        elif m.group("cc") == NVSWITCH_CLASS or "nvswitch" in line.lower():
            switches.append(entry)
    return gpus, switches


def parse_fabric(text: str) -> str | None:
    """Return the Fabric State from ``nvidia-smi -q`` (Hopper+), or None. GPUs outside an NVSwitch
    fabric (PCIe, or NVLink bridges as on H100 NVL) print ``State : N/A``: that is None too."""
    in_fabric = False
    for line in text.splitlines():
        if re.match(r"^\s*Fabric\s*$", line):
            in_fabric = True
            continue
        if in_fabric:
            m = re.match(r"^\s*State\s*:\s*(.+?)\s*$", line)
            if m:
                return _na(m.group(1))
            if re.match(r"^\s{0,4}\S", line):
                in_fabric = False
    return None


def _compute_caps(run: Run) -> dict[int, float]:
    """compute_cap per GPU index (drivers >= 510); {} when the field is unsupported."""
    rc, out, _err = run(
        ["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader,nounits"]
    )
    caps: dict[int, float] = {}
    if rc != 0:
        return caps
    for line in out.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 2 and cols[0].isdigit():
            try:
                caps[int(cols[0])] = float(cols[1])
            except ValueError:
                continue
    return caps


def gather(run: Run) -> dict[str, Any]:
    """Collect GPU facts. ``run(argv) -> (rc, stdout, stderr)``; rc 127 = binary missing."""
    facts: dict[str, Any] = {
        "state": "ok",
        "message": "",
        "gpus": [],
        "gpu_count": 0,
        "driver_version": None,
        "cuda_driver_version": None,
        "nvidia_smi_rc": None,
        "nvml_library_version": None,
        "nvswitch_present": False,
        "nvswitch_count": 0,
        "fabric_state": None,
        "topology": {
            "interconnect": "none",
            "nvlink_max": 0,
            "nvlink_min": 0,
            "pcie_paths": [],
            "gpus": 0,
        },
        "pci_gpus": [],
        "pci_nvswitches": [],
        "lspci_available": False,
        "turing_or_newer": None,
        "gpu_model": None,
    }

    rc, out, _err = run(["lspci", "-nn"])
    if rc == 0:
        facts["lspci_available"] = True
        facts["pci_gpus"], facts["pci_nvswitches"] = parse_lspci(out)
        facts["nvswitch_count"] = len(facts["pci_nvswitches"])

    rc, out, err = run(["nvidia-smi"])
    facts["nvidia_smi_rc"] = rc
    text = (out or "") + "\n" + (err or "")
    if rc == 0:
        facts["driver_version"], facts["cuda_driver_version"] = parse_header(out)
    elif rc == 127:
        facts["state"] = "not_installed"
        facts["message"] = "nvidia-smi not found: no NVIDIA driver userspace installed"
    elif rc == 9:
        facts["state"] = "driver_not_loaded"
        facts["message"] = "nvidia-smi exit 9: NVIDIA kernel driver not loaded"
    elif rc == 18 or "version mismatch" in text.lower():
        facts["state"] = "version_mismatch"
        facts["message"] = "nvidia-smi exit 18: driver/library version mismatch (reboot needed)"
        facts["nvml_library_version"] = parse_nvml_library_version(text)
    elif rc == 6 or "no devices were found" in text.lower():
        facts["state"] = "no_device"
        facts["message"] = "nvidia-smi: no devices were found"
    else:
        facts["state"] = "error"
        facts["message"] = "nvidia-smi exit %s: %s" % (rc, text.strip()[:300])

    if facts["state"] == "ok":
        rc, out, _err = run(
            ["nvidia-smi", "--query-gpu=" + QUERY_FIELDS, "--format=csv,noheader,nounits"]
        )
        gpus = parse_query_gpu(out) if rc == 0 else []
        if not gpus:
            rc, out, _err = run(["nvidia-smi", "-L"])
            gpus = parse_list(out) if rc == 0 else []
        caps = _compute_caps(run)
        for gpu in gpus:
            gpu["compute_cap"] = caps.get(gpu["index"])
        facts["gpus"] = gpus
        if gpus and facts["driver_version"] is None:
            facts["driver_version"] = gpus[0].get("driver_version")
        if not gpus:
            facts["state"] = "no_device"
            facts["message"] = "nvidia-smi reports no GPUs"
        rc, out, _err = run(["nvidia-smi", "topo", "-m"])
        if rc == 0:
            facts["topology"] = parse_topology(out)
        if facts["nvswitch_count"] == 0 and facts["topology"]["interconnect"] == "nvlink":
            rc, out, _err = run(["nvidia-smi", "-q"])
            if rc == 0:
                facts["fabric_state"] = parse_fabric(out)

    if facts["state"] == "not_installed" and facts["lspci_available"] and not facts["pci_gpus"]:
        facts["state"] = "no_device"
        facts["message"] = "no NVIDIA GPU on the PCI bus (lspci -nn) and no driver installed"
    if (
        facts["state"] == "ok"
        and facts["lspci_available"]
        and not facts["pci_gpus"]
        and not facts["gpus"]
    ):
        facts["state"] = "no_device"

    facts["nvswitch_present"] = facts["nvswitch_count"] > 0 or facts["fabric_state"] is not None
    # without lspci, GPUs that nvidia-smi sees with no NVLink between them (topo -m) are on no
    # NVSwitch fabric either (NVSwitch joins GPUs through NVLink): a single PCIe GPU, say
    facts["nvlink_ruled_out"] = (
        facts["state"] == "ok"
        and bool(facts["gpus"])
        and facts["topology"]["interconnect"] != "nvlink"
    )
    facts["gpu_count"] = len(facts["gpus"]) or len(facts["pci_gpus"])
    if facts["gpus"]:
        facts["gpu_model"] = facts["gpus"][0]["name"]
    elif facts["pci_gpus"]:
        facts["gpu_model"] = facts["pci_gpus"][0]["description"]
    facts["turing_or_newer"] = _turing_or_newer(facts)
    return facts


def _turing_or_newer(facts: dict[str, Any]) -> bool | None:
    """True if every GPU is Turing or newer (compute capability >= 7.5); None if unknown."""
    caps = [g.get("compute_cap") for g in facts["gpus"]]
    if caps and all(c is not None for c in caps):
        return all(c >= 7.5 for c in caps)
    if facts["pci_gpus"]:
        return all(int(g["device_id"], 16) >= TURING_FIRST_DEVICE_ID for g in facts["pci_gpus"])
    return None
