#!/usr/bin/python3
"""Fake `nvidia-smi` for the provision lab (shipped by the fake nvidia-utils-<branch> package).

Reads the host's GPU description (/etc/fake-nvidia/gpus.json, or $FAKE_NVIDIA_CONFIG) and the
simulated kernel-module state (/run/fake-nvidia/loaded, or $FAKE_NVIDIA_LOADED) and answers in the
formats of the real tool: the default table, -L, --query-gpu with --format=csv[,noheader][,nounits],
topo -m, -q, nvlink -s/-e, -pm, --version. Failure modes: no description, no GPU or module not
loaded -> exit 9 with the real message; loaded module version != this userspace version -> NVML
mismatch, exit 18. Health faults (issue 19) come from the description's "faults" (see FAULTS_DOC).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

USERSPACE_VERSION = "@DRIVER_VERSION@"
if USERSPACE_VERSION.startswith("@"):  # running from the source tree (tests)
    USERSPACE_VERSION = os.environ.get("FAKE_NVIDIA_DRIVER_VERSION", "580.95.05")
CONFIG = Path(os.environ.get("FAKE_NVIDIA_CONFIG", "/etc/fake-nvidia/gpus.json"))
LOADED = Path(os.environ.get("FAKE_NVIDIA_LOADED", "/run/fake-nvidia/loaded"))
STATE = Path(os.environ.get("FAKE_NVIDIA_STATE", "/run/fake-nvidia"))
PERSISTENCED_PID = Path("/run/nvidia-persistenced/nvidia-persistenced.pid")

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {v}\n"
EXIT_NO_DRIVER = 9
EXIT_MISMATCH = 18
EXIT_BAD_ARG = 2

SYS_LINE = "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes"
NODE_LINE = (
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges"
)
LEGEND = f"""Legend:

  X    = Self
{SYS_LINE} (e.g., QPI/UPI)
{NODE_LINE} within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


FAULTS_DOC = """description["faults"], every key optional, GPU indices as on the bus (0-based):
  gone: [i]                   on the PCI bus (lspci) but not answering nvidia-smi (Xid 79's state)
  ecc_uncorrectable: {i: n}   n volatile and aggregate uncorrectable DRAM ECC errors
  remap: {i: pending|failure} a row remap pending, or a remapping failure
  pcie_width: {i: w}          the link trained at xW (maximum x16)
  hw_slowdown: [i]            HW Slowdown and HW Thermal Slowdown active
  nvlink_down: {i: [link]}    these NVLinks inactive
  xid: [{gpu: i, xid: n}]     NVRM Xid lines in the kernel log (the fake dmesg prints them)
Formats of the added -q sections: the real H200 capture (tests/unit/fixtures/captures/
nvidia-smi-q__r580_1x_h200_device.txt)."""
PCIE_GEN = {"Hopper": 5, "Blackwell": 5, "Ampere": 4, "Ada Lovelace": 4, "Turing": 3}
NVLINK_GBPS = {"Hopper": "26.562", "Ampere": "25.000"}


def faults(desc: dict[str, Any]) -> dict[str, Any]:
    value = desc.get("faults")
    return value if isinstance(value, dict) else {}


def per_gpu(desc: dict[str, Any], key: str, bus_index: int) -> Any:  # noqa: ANN401 - JSON value
    """The fault `key` of the GPU at this bus position: a member of a list, or a mapping value."""
    value = faults(desc).get(key)
    if isinstance(value, list):
        return bus_index in value
    if isinstance(value, dict):
        return value.get(str(bus_index))
    return None


class Gpu:
    """One simulated GPU of the description."""

    def __init__(self, desc: dict[str, Any], index: int) -> None:
        spec: dict[str, Any] = desc["gpu"]
        self.index = index
        self.name: str = spec["name"]
        self.memory: int = int(spec["memory_total_mib"])
        self.ecc: str = spec.get("ecc", "Enabled")
        self.mig: str = spec.get("mig", "[N/A]")
        self.compute_cap: str = spec.get("compute_cap", "9.0")
        self.power_limit: int = int(spec.get("power_limit_w", 300))
        self.vbios: str = spec.get("vbios", "96.00.00.00.01")
        self.architecture: str = spec.get("architecture", "Hopper")
        self.fan: str = spec.get("fan", "N/A")
        self.pci_device_id: str = spec["pci_id"].split(":")[1]
        bus = desc["bus_ids"][index]
        self.bus_id = f"00000000:{bus.upper()}:00.0"
        seed = f"{desc.get('host', 'lab')}/{desc.get('name', 'gpu')}/{index}"
        self.uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, seed))
        self.serial = str(1320000000000 + uuid.uuid5(uuid.NAMESPACE_DNS, seed).int % 10**9)
        self.memory_used = 2 if self.memory > 16000 else 0
        self.power_draw = max(9, self.power_limit // 10)
        self.bus_index = index  # position on the bus; nvidia-smi renumbers when one is gone


def visible_gpus(desc: dict[str, Any], count: int) -> list[Gpu]:
    """The GPUs nvidia-smi answers for (a GPU that fell off the bus is not one), renumbered."""
    out: list[Gpu] = []
    for i in range(count):
        if per_gpu(desc, "gone", i):
            continue
        gpu = Gpu(desc, i)
        gpu.index = len(out)
        out.append(gpu)
    return out


def load_description() -> dict[str, Any] | None:
    try:
        data = json.loads(CONFIG.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def loaded_version(desc: dict[str, Any]) -> str | None:
    mode = desc.get("driver", "auto")
    if mode == "not-loaded":
        return None
    if mode == "loaded":
        return USERSPACE_VERSION
    try:
        text = LOADED.read_text(encoding="utf-8").split()
    except OSError:
        return None
    return text[0] if text else None


def cuda_version() -> str:
    branch = int(USERSPACE_VERSION.split(".")[0])
    # 580: "CUDA Version: 13.0" in a real R580 nvidia-smi (the H200 capture in
    # tests/unit/fixtures/captures/nvidia-smi__r580_1x_h200_device.txt)
    versions = {535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6", 580: "13.0"}
    return versions.get(branch, "12.2")


def persistence_on() -> bool:
    if (STATE / "persistence").exists():
        return True
    try:
        pid = int(PERSISTENCED_PID.read_text(encoding="utf-8").strip())
        mode = (PERSISTENCED_PID.parent / "persistence-mode").read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return False
    return mode != "0" and Path(f"/proc/{pid}").exists()


def fabric_state(desc: dict[str, Any]) -> str:
    if not desc.get("nvswitch"):
        return "N/A"
    return "Completed" if (STATE / "fabricmanager").exists() else "In Progress"


def on_off(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


# ---------------------------------------------------------------------------- query-gpu
FIELD_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "pm": "persistence_mode",
    "ecc.mode.cur": "ecc.mode.current",
    "mig.mode.cur": "mig.mode.current",
    "driver_version": "driver_version",
    "compute_capability": "compute_cap",
    "gpu_serial": "serial",
    "vbios": "vbios_version",
}
UNITS = {
    "memory.total": "MiB",
    "memory.used": "MiB",
    "memory.free": "MiB",
    "power.limit": "W",
    "power.draw": "W",
    "temperature.gpu": "",
    "utilization.gpu": "%",
    "utilization.memory": "%",
    "clocks.sm": "MHz",
    "clocks.max.sm": "MHz",
}


def field_value(field: str, gpu: Gpu, gpus: list[Gpu], desc: dict[str, Any]) -> tuple[str, str]:
    """(value, unit) of one --query-gpu field."""
    pm = on_off(persistence_on())
    values: dict[str, tuple[str, str]] = {
        "index": (str(gpu.index), ""),
        "name": (gpu.name, ""),
        "uuid": (gpu.uuid, ""),
        "serial": (gpu.serial, ""),
        "memory.total": (str(gpu.memory), "MiB"),
        "memory.used": (str(gpu.memory_used), "MiB"),
        "memory.free": (str(gpu.memory - gpu.memory_used - 5), "MiB"),
        "pci.bus_id": (gpu.bus_id, ""),
        "pci.device_id": (f"0x{gpu.pci_device_id.upper()}10DE", ""),
        "persistence_mode": (pm, ""),
        "ecc.mode.current": (gpu.ecc, ""),
        "ecc.mode.pending": (gpu.ecc, ""),
        "mig.mode.current": (gpu.mig, ""),
        "mig.mode.pending": (gpu.mig, ""),
        "driver_version": (USERSPACE_VERSION, ""),
        "count": (str(len(gpus)), ""),
        "compute_cap": (gpu.compute_cap, ""),
        "vbios_version": (gpu.vbios, ""),
        "power.limit": (f"{gpu.power_limit:.2f}", "W"),
        "power.draw": (f"{gpu.power_draw:.2f}", "W"),
        "temperature.gpu": ("33", ""),
        "utilization.gpu": ("0", "%"),
        "utilization.memory": ("0", "%"),
        "pstate": ("P0", ""),
        "fabric.state": (fabric_state(desc), ""),
    }
    return values[field]


def query_gpu(fields_arg: str, fmt: str, gpus: list[Gpu], desc: dict[str, Any]) -> int:
    fields = [f.strip() for f in fields_arg.split(",") if f.strip()]
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts:
        sys.stdout.write('"--format=" switch is missing "csv" option.\n')
        return EXIT_BAD_ARG
    canon: list[str] = []
    for field in fields:
        name = FIELD_ALIASES.get(field, field)
        try:
            field_value(name, gpus[0], gpus, desc) if gpus else None
        except KeyError:
            sys.stdout.write(f'Field "{field}" is not a valid field to query.\n\n')
            return EXIT_BAD_ARG
        canon.append(name)
    if "noheader" not in opts:
        heads = [
            f"{f} [{UNITS[c]}]" if UNITS.get(c) else f for f, c in zip(fields, canon, strict=True)
        ]
        print(", ".join(heads))
    for gpu in gpus:
        cells = []
        for name in canon:
            value, unit = field_value(name, gpu, gpus, desc)
            cells.append(value if ("nounits" in opts or not unit) else f"{value} {unit}")
        print(", ".join(cells))
    return 0


# ---------------------------------------------------------------------------- other views
def list_gpus(gpus: list[Gpu]) -> int:
    for gpu in gpus:
        print(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
    return 0


def table(gpus: list[Gpu]) -> int:
    v = USERSPACE_VERSION
    pm = "On" if persistence_on() else "Off"
    bar = (
        "+-----------------------------------------+----------------------+----------------------+"
    )
    out = [
        time.strftime("%a %b %e %H:%M:%S %Y").ljust(30),
        "+---------------------------------------------------------------------------------------+",
        f"| NVIDIA-SMI {v:<23}Driver Version: {v:<13}CUDA Version: {cuda_version():<9}|",
        "|-----------------------------------------+----------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                      |               MIG M. |",
        "|=========================================+======================+======================|",
    ]
    for gpu in gpus:
        ecc = "0" if gpu.ecc == "Enabled" else ("Off" if gpu.ecc == "Disabled" else "N/A")
        name = gpu.name if len(gpu.name) <= 28 else gpu.name[:25] + "..."
        mig = gpu.mig if gpu.mig in ("Enabled", "Disabled") else "N/A"
        fan = gpu.fan
        power = f"{gpu.power_draw}W / {gpu.power_limit}W"
        mem = f"{gpu.memory_used}MiB / {gpu.memory}MiB"
        out += [
            f"| {gpu.index:>3}  {name:<28}{pm:>5}  | {gpu.bus_id} Off | {ecc:>20} |",
            f"| {fan:<4}  33C    P0{power:>24} | {mem:>20} | {'0%':>7}      Default |",
            f"|                                         |                      | {mig:>20} |",
            bar,
        ]
    out += [
        " " * 89,
        "+---------------------------------------------------------------------------------------+",
        "| Processes:                                                                            |",
        "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
        "|        ID   ID                                                             Usage      |",
        "|=======================================================================================|",
        "|  No running processes found                                                           |",
        "+---------------------------------------------------------------------------------------+",
    ]
    print("\n".join(out))
    return 0


def topo(desc: dict[str, Any], gpus: list[Gpu]) -> int:
    n = len(gpus)
    link = desc.get("interconnect", {})
    matrix: list[list[str]]
    if link.get("type") == "nvlink":
        nv = f"NV{link.get('links', 12)}"
        matrix = [[" X " if i == j else nv for j in range(n)] for i in range(n)]
    else:
        given = link.get("matrix") or [["X"]]
        matrix = [[" X " if i == j else given[i][j] for j in range(n)] for i in range(n)]
    affinity = desc.get("cpu_affinity") or ["0-31"] * n
    numa = desc.get("numa") or [0] * n
    head = (
        "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    )
    print(head)
    for i in range(n):
        print(f"GPU{i}\t" + "\t".join(matrix[i]) + f"\t{affinity[i]}\t{numa[i]}\t\tN/A")
    print()
    print(LEGEND)
    return 0


def query_full(desc: dict[str, Any], gpus: list[Gpu]) -> int:
    pm = on_off(persistence_on())
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        f"Timestamp                                 : {time.strftime('%a %b %e %H:%M:%S %Y')}",
        f"Driver Version                            : {USERSPACE_VERSION}",
        f"CUDA Version                              : {cuda_version()}",
        "",
        f"Attached GPUs                             : {len(gpus)}",
    ]
    for gpu in gpus:
        fabric = fabric_state(desc)
        fabric_status = "Success" if fabric == "Completed" else "N/A"
        width = int(per_gpu(desc, "pcie_width", gpu.bus_index) or 16)
        slow = "Active" if per_gpu(desc, "hw_slowdown", gpu.bus_index) else "Not Active"
        ecc_na = "" if gpu.ecc == "Enabled" else "N/A"
        dbe = int(per_gpu(desc, "ecc_uncorrectable", gpu.bus_index) or 0)
        remap = per_gpu(desc, "remap", gpu.bus_index)
        pending = "Yes" if remap == "pending" else "No"
        failure = "Yes" if remap == "failure" else "No"
        out += [
            f"GPU {gpu.bus_id}",
            f"    Product Name                          : {gpu.name}",
            f"    Product Architecture                  : {gpu.architecture}",
            "    Display Mode                          : Disabled",
            f"    Persistence Mode                      : {pm}",
            "    MIG Mode",
            f"        Current                           : {gpu.mig}",
            f"        Pending                           : {gpu.mig}",
            f"    Serial Number                         : {gpu.serial}",
            f"    GPU UUID                              : {gpu.uuid}",
            f"    Minor Number                          : {gpu.index}",
            f"    VBIOS Version                         : {gpu.vbios}",
            "    Fabric",
            f"        State                             : {fabric}",
            f"        Status                            : {fabric_status}",
            "    PCI",
            f"        Bus                               : 0x{gpu.bus_id[9:11]}",
            "        Device                            : 0x00",
            "        Domain                            : 0x0000",
            f"        Device Id                         : 0x{gpu.pci_device_id.upper()}10DE",
            f"        Bus Id                            : {gpu.bus_id}",
            "        GPU Link Info",
            "            PCIe Generation",
            f"                Max                       : {PCIE_GEN.get(gpu.architecture, 4)}",
            f"                Current                   : {PCIE_GEN.get(gpu.architecture, 4)}",
            "            Link Width",
            "                Max                       : 16x",
            f"                Current                   : {width}x",
            "    Clocks Event Reasons",
            "        Idle                              : Active",
            "        Applications Clocks Setting       : Not Active",
            "        SW Power Cap                      : Not Active",
            f"        HW Slowdown                       : {slow}",
            f"            HW Thermal Slowdown           : {slow}",
            "            HW Power Brake Slowdown       : Not Active",
            "        Sync Boost                        : Not Active",
            "        SW Thermal Slowdown               : Not Active",
            "        Display Clock Setting             : Not Active",
            "    ECC Mode",
            f"        Current                           : {gpu.ecc}",
            f"        Pending                           : {gpu.ecc}",
            "    ECC Errors",
            "        Volatile",
            f"            DRAM Correctable              : {ecc_na or 0}",
            f"            DRAM Uncorrectable            : {ecc_na or dbe}",
            "        Aggregate",
            f"            DRAM Correctable              : {ecc_na or 0}",
            f"            DRAM Uncorrectable            : {ecc_na or dbe}",
            "    Remapped Rows",
            f"        Correctable Error                 : {ecc_na or 0}",
            f"        Uncorrectable Error               : {ecc_na or (1 if remap else 0)}",
            f"        Pending                           : {ecc_na or pending}",
            f"        Remapping Failure Occurred        : {ecc_na or failure}",
            "    FB Memory Usage",
            f"        Total                             : {gpu.memory} MiB",
            f"        Used                              : {gpu.memory_used} MiB",
            f"        Free                              : {gpu.memory - gpu.memory_used - 5} MiB",
            "    Compute Mode                          : Default",
            "",
        ]
    print("\n".join(out))
    return 0


def nvlink(desc: dict[str, Any], gpus: list[Gpu], errors: bool) -> int:
    """`nvidia-smi nvlink -s` (per-link speed or <inactive>) and `-e` (per-link error counters).
    GPUs without NVLink print the A100 PCIe capture's line (captures/
    nvidia-smi-nvlink-s__a100_pcie_inactive.txt); the per-link lines are the documented format
    (no public capture in the fixtures)."""
    link = desc.get("interconnect", {})
    for gpu in gpus:
        print(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
        if link.get("type") != "nvlink":
            print("NVML: Unable to retrieve NVLink information as all links are inActive")
            continue
        down = per_gpu(desc, "nvlink_down", gpu.bus_index) or []
        for n in range(int(link.get("links", 12))):
            if errors:
                for counter in ("Replay Errors", "Recovery Errors", "CRC Errors"):
                    print(f"\t Link {n}: {counter}: 0")
            elif n in down:
                print(f"\t Link {n}: <inactive>")
            else:
                print(f"\t Link {n}: {NVLINK_GBPS.get(gpu.architecture, '25.000')} GB/s")
    return 0


def set_persistence(value: str, gpus: list[Gpu]) -> int:
    flag = STATE / "persistence"
    if value in ("1", "ENABLED"):
        STATE.mkdir(parents=True, exist_ok=True)
        flag.write_text("1\n", encoding="utf-8")
        word = "Enabled"
    elif value in ("0", "DISABLED"):
        flag.unlink(missing_ok=True)
        word = "Disabled"
    else:
        sys.stdout.write(f'Invalid value "{value}" for -pm.\n')
        return EXIT_BAD_ARG
    for gpu in gpus:
        print(f"{word} persistence mode for GPU {gpu.bus_id}.")
    print("All done.")
    return 0


# ---------------------------------------------------------------------------- main
def option(args: list[str], *names: str) -> str | None:
    """The value of `--name=value`, `--name value` or `-n value` (removed from args)."""
    for i, arg in enumerate(args):
        for name in names:
            if arg.startswith(name + "="):
                del args[i]
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
                del args[i : i + 2]
                return value
    return None


def main(argv: list[str]) -> int:  # noqa: PLR0911, PLR0912 - one branch per nvidia-smi mode
    args = list(argv)
    if args and args[0] in ("-h", "--help"):
        print(f"NVIDIA System Management Interface -- v{USERSPACE_VERSION}")
        return 0
    desc = load_description()
    gpu_count = len(desc.get("bus_ids", [])) if desc and desc.get("gpu") else 0
    loaded = loaded_version(desc) if desc else None
    if not desc or not gpu_count or loaded is None:
        sys.stdout.write(NO_DRIVER)
        return EXIT_NO_DRIVER
    if loaded != USERSPACE_VERSION:
        sys.stdout.write(MISMATCH.format(v=".".join(USERSPACE_VERSION.split(".")[:2])))
        return EXIT_MISMATCH
    gpus = visible_gpus(desc, gpu_count)
    index = option(args, "-i", "--id")
    if index is not None:
        wanted = {int(x) for x in index.split(",") if x.isdigit()}
        gpus = [g for g in gpus if g.index in wanted]
        if not gpus:
            sys.stdout.write(f"No devices were found matching the ID {index}.\n")
            return 6
    if args and args[0] == "topo":
        if "-m" in args or "--matrix" in args:
            return topo(desc, visible_gpus(desc, gpu_count))
        sys.stdout.write("Usage: nvidia-smi topo -m\n")
        return EXIT_BAD_ARG
    if args and args[0] == "nvlink":
        if "-s" in args or "--status" in args or "-e" in args or "--errorcounters" in args:
            return nvlink(desc, gpus, "-e" in args or "--errorcounters" in args)
        sys.stdout.write("Usage: nvidia-smi nvlink -s | -e\n")
        return EXIT_BAD_ARG
    if "--version" in args:
        print(f"NVIDIA-SMI version  : {USERSPACE_VERSION}")
        print(f"NVML version        : {USERSPACE_VERSION}")
        print(f"DRIVER version      : {USERSPACE_VERSION}")
        print(f"CUDA Version        : {cuda_version()}")
        return 0
    if "-L" in args or "--list-gpus" in args:
        return list_gpus(gpus)
    pm_value = option(args, "-pm", "--persistence-mode")
    if pm_value is not None:
        return set_persistence(pm_value.upper(), gpus)
    fields = option(args, "--query-gpu")
    if fields is not None:
        fmt = option(args, "--format")
        if fmt is None:
            sys.stdout.write('"--format" must be specified with "--query-gpu".\n')
            return EXIT_BAD_ARG
        return query_gpu(fields, fmt, gpus, desc)
    if "-q" in args or "--query" in args:
        return query_full(desc, gpus)
    if args:
        sys.stdout.write(f"Invalid combination of input arguments: {' '.join(args)}\n")
        return EXIT_BAD_ARG
    return table(gpus)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
