# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Pure parsers for the GPU health tier (issue 19): text in, plain dicts out, no I/O.

Runs on the target (Python 3.8+): standard library only. Each parser is unit-tested on real
captured output (tests/unit/fixtures/captures, each with its public source in SOURCES.md; the
formats with no public capture say so in tests/unit/test_health_parsers.py).
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any

NA_TOKENS = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")
GPU_BLOCK_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
# NVIDIA's Xid kernel log line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the
# bus." (docs.nvidia.com/deploy/xid-errors/); dmesg adds "[ 12.345678] ", journalctl a date/host.
# On a MIG GPU the parenthesis also carries the instance ("(PCI:0000:01:00 GPU-I:05 GPU-CI:02)":
# the format strings of NVIDIA/open-gpu-kernel-modules:src/nvidia/src/kernel/gpu/rc/kernel_rc.c);
# the domain is 0000 on most hosts but not on GB200 ("PCI:0019:01:00", leptonai/gpud#1174).
XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]+(?::[0-9A-Fa-f]+)+(?:\.[0-9A-Fa-f])?)"
    r"(?P<attr>[^)]*)\):\s*(?P<xid>\d+)\s*,?\s*(?P<rest>.*)$"
)
XID_GI_RE = re.compile(r"GPU-I:\s*(\d+)")
XID_CI_RE = re.compile(r"GPU-CI:\s*(\d+)")
# seconds since boot: at the start (dmesg, journalctl -o short-monotonic) or after a syslog prefix
# ("Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: ...", NVIDIA/gpu-operator#1146)
DMESG_TS_RE = re.compile(r"\[\s*(\d+\.\d+)\]\s")
PROC_VERSION_RE = re.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+([\d.]+)\s")
# "LnkCap:\tPort #0, Speed 16GT/s, Width x16, ..." / "LnkSta:\tSpeed 2.5GT/s (downgraded), Width x16
# (ok)"; older pciutils print no "(ok)" ("Speed 2.5GT/s (downgraded), Width x16",
# noonghunna/club-3090#1028): the numbers are compared, never the markers
LNK_RE = re.compile(r"^\s*(LnkCap|LnkSta):\s.*?Speed ([\d.]+)GT/s[^,]*, Width x(\d+)")
LSPCI_SLOT_RE = re.compile(r"^([0-9A-Fa-f]{2,4}(?::[0-9A-Fa-f]{2})?:[0-9A-Fa-f]{2}\.\d)\s")
# "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"; the UUID is whatever is in the parenthesis (posted
# captures redact it: "(UUID: ...)", Azure/azhpc-diagnostics#73; "(UUID: GPU-xxx)", gpud#1085)
NVLINK_GPU_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]*)\)")
NVLINK_LINK_RE = re.compile(r"^\s+Link (\d+): (.+?)\s*$")


def na(value: str | None) -> str | None:
    """None for nvidia-smi's not-available tokens, else the stripped value."""
    if value is None:
        return None
    value = value.strip()
    return None if value in NA_TOKENS else value


def _int(value: str | None) -> int | None:
    value = na(value)
    if value is None:
        return None
    m = re.match(r"^(-?\d+)", value)
    return int(m.group(1)) if m else None


def parse_smi_q_tree(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi -q` (any -d selection) -> one nested dict per GPU block, in output order.

    The format is an indented key/value tree (4 spaces a level): "Key : value" is a leaf, a line
    without a colon opens a section. Each GPU dict also has "_bus_id" from its block header."""
    gpus: list[dict[str, Any]] = []
    stack: list[tuple[int, dict[str, Any]]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        m = GPU_BLOCK_RE.match(line)
        if m:
            gpu: dict[str, Any] = {"_bus_id": m.group(1)}
            gpus.append(gpu)
            stack = [(0, gpu)]
            continue
        if not stack:
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:  # back at the top level (a trailer): the GPU block is over
            stack = []
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        node = stack[-1][1]
        if ":" in line:
            key, _, value = line.strip().partition(":")
            node[key.strip()] = value.strip()
        else:
            child: dict[str, Any] = {}
            node[line.strip()] = child
            stack.append((indent, child))
    return gpus


def _get(tree: dict[str, Any], *path: str) -> Any:  # noqa: ANN401 - a leaf string or a section
    node: Any = tree
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _active(value: Any) -> bool:  # noqa: ANN401 - a leaf string or None
    return isinstance(value, str) and value.strip() == "Active"


# Clock event reasons that mean the GPU is held back by hardware or cooling, as nvidia-smi -q names
# them; Idle, Applications Clocks Setting, Display Clock Setting, Sync Boost and SW Power Cap are
# normal operation (nvidia-smi --help-query-gpu, clocks_event_reasons.*).
# (HW Thermal and HW Power Brake Slowdown are printed indented under HW Slowdown, which has a value
# of its own: the tree keeps them as its siblings.)
THROTTLE_REASONS = (
    "HW Slowdown",
    "HW Thermal Slowdown",
    "HW Power Brake Slowdown",
    "SW Thermal Slowdown",
)


def gpu_health(tree: dict[str, Any], index: int) -> dict[str, Any]:
    """The health figures of one `nvidia-smi -q` GPU block (see parse_smi_q_tree)."""
    ecc = _get(tree, "ECC Errors")
    ecc = ecc if isinstance(ecc, dict) else {}
    vol: dict[str, Any] = ecc["Volatile"] if isinstance(ecc.get("Volatile"), dict) else {}
    agg: dict[str, Any] = ecc["Aggregate"] if isinstance(ecc.get("Aggregate"), dict) else {}

    def uncorrectable(section: dict[str, Any]) -> int | None:
        # Hopper+: "DRAM Uncorrectable" + SRAM parity/SEC-DED; older: "Double Bit ... Total"
        keys = [k for k in section if "Uncorrectable" in k and "Threshold" not in k]
        values = [_int(section[k]) for k in keys if isinstance(section[k], str)]
        dbl = section.get("Double Bit")
        if isinstance(dbl, dict):
            values.append(_int(dbl.get("Total")))
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    remap = _get(tree, "Remapped Rows") or {}
    retired = _get(tree, "Retired Pages") or {}
    link = _get(tree, "PCI", "GPU Link Info") or {}
    reasons = _get(tree, "Clocks Event Reasons") or _get(tree, "Clocks Throttle Reasons") or {}
    active = []
    for reason in THROTTLE_REASONS:
        if isinstance(reasons, dict) and _active(reasons.get(reason)):
            active.append(reason)
    fabric = _get(tree, "Fabric") or {}
    remap_pending = na(remap.get("Pending")) if isinstance(remap, dict) else None
    remap_failure = (
        na(remap.get("Remapping Failure Occurred")) if isinstance(remap, dict) else None
    )
    return {
        "index": index,
        "bus_id": tree.get("_bus_id"),
        "uuid": na(tree.get("GPU UUID")),
        "name": na(tree.get("Product Name")),
        "ecc_mode": na(_get(tree, "ECC Mode", "Current")),
        "ecc_volatile_uncorrectable": uncorrectable(vol),
        "ecc_aggregate_uncorrectable": uncorrectable(agg),
        "remap_pending": None if remap_pending is None else remap_pending == "Yes",
        "remap_failure": None if remap_failure is None else remap_failure == "Yes",
        "remap_uncorrectable": _int(remap.get("Uncorrectable Error"))
        if isinstance(remap, dict)
        else None,
        "retired_pending": (na(retired.get("Pending Page Blacklist")) or "") == "Yes"
        if isinstance(retired, dict)
        else False,
        "retired_double_bit": _int(_get(retired, "Double Bit ECC"))
        if not isinstance(_get(retired, "Double Bit ECC"), dict)
        else _int(_get(retired, "Double Bit ECC", "Count")),
        "pcie_gen_max": _int(_get(link, "PCIe Generation", "Max")),
        "pcie_gen_current": _int(_get(link, "PCIe Generation", "Current")),
        "pcie_width_max": _int(_get(link, "Link Width", "Max")),
        "pcie_width_current": _int(_get(link, "Link Width", "Current")),
        "throttle_active": active,
        "fabric_state": na(fabric.get("State")) if isinstance(fabric, dict) else None,
        "fabric_status": na(fabric.get("Status")) if isinstance(fabric, dict) else None,
        "recovery_action": na(tree.get("GPU Recovery Action")),
    }


def parse_smi_q_health(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi -q` -> the health figures of every GPU (index = order in the output, which is
    nvidia-smi's index order)."""
    return [gpu_health(tree, i) for i, tree in enumerate(parse_smi_q_tree(text))]


def parse_query_csv(text: str) -> list[dict[str, str | None]]:
    """`nvidia-smi --query-gpu=A,B,... --format=csv` (with its header line) -> one dict per GPU,
    keyed by the field name without its unit ("power.draw [W]" -> "power.draw")."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
    rows = []
    for line in lines[1:]:
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(header):
            continue
        rows.append({h: na(c) for h, c in zip(header, cols)})
    return rows


def normalise_bus(bus: str) -> str:
    """A PCI address in any spelling (00000000:3B:00.0, 0000:3b:00, 3b:00.0) -> "3b:00" (bus and
    device, lower case), the part every tool agrees on. A non-zero PCI domain is kept in front
    ("00000019:01:00.0" and "0019:01:00" -> "0019:01:00"): the four GPUs of a GB200 tray all sit at
    bus 01 device 00 of domains 0008, 0009, 0018 and 0019 (NVIDIA/dcgm-exporter#581), so bus and
    device alone would merge them."""
    parts = bus.strip().lower().split(":")
    if len(parts) >= 2:
        short = "%s:%s" % (parts[-2][-2:], parts[-1].split(".")[0][-2:])
        try:
            domain = int(parts[-3], 16) if len(parts) >= 3 and parts[-3] else 0
        except ValueError:
            domain = 0
        return "%04x:%s" % (domain, short) if domain else short
    return bus.strip().lower()


def parse_xid_lines(text: str) -> list[dict[str, Any]]:
    """NVRM Xid lines of `dmesg` or `journalctl -k` -> [{xid, bus, detail, ts, line,
    gpu_instance, compute_instance}] in order. ts is the dmesg seconds since boot when present
    (dmesg -T and dmesg --ctime print a date instead: None); the instances are the MIG GPU and
    compute instance the driver attributed the Xid to, else None."""
    out = []
    for line in text.splitlines():
        m = XID_RE.search(line)
        if not m:
            continue
        ts = DMESG_TS_RE.search(line[: m.start()])
        gi = XID_GI_RE.search(m.group("attr"))
        ci = XID_CI_RE.search(m.group("attr"))
        out.append(
            {
                "xid": int(m.group("xid")),
                "bus": normalise_bus(m.group("bus")),
                "detail": m.group("rest").strip()[:200],
                "ts": float(ts.group(1)) if ts else None,
                "line": line.strip()[:300],
                "gpu_instance": int(gi.group(1)) if gi else None,
                "compute_instance": int(ci.group(1)) if ci else None,
            }
        )
    return out


def parse_proc_version(text: str) -> str | None:
    """/proc/driver/nvidia/version -> the loaded kernel module's version, or None."""
    m = PROC_VERSION_RE.search(text or "")
    return m.group(1) if m else None


def _uuid(value: str) -> str | None:
    value = value.strip()
    return value if value.startswith("GPU-") else None


def parse_lnk_line(line: str) -> tuple[str, float, int] | None:
    """One `lspci -vv` LnkCap/LnkSta line -> ("cap" or "sta", GT/s, lanes), else None (other
    lines, and "Speed unknown" when the link is down)."""
    m = LNK_RE.match(line)
    if not m:
        return None
    return ("cap" if m.group(1) == "LnkCap" else "sta", float(m.group(2)), int(m.group(3)))


def parse_lspci_links(text: str) -> dict[str, dict[str, Any]]:
    """`lspci -vv` -> {slot: {cap_speed, cap_width, sta_speed, sta_width}} for every device with a
    LnkCap/LnkSta pair (root only: without it lspci prints "Capabilities: <access denied>")."""
    out: dict[str, dict[str, Any]] = {}
    slot = None
    for line in text.splitlines():
        m = LSPCI_SLOT_RE.match(line)
        if m:
            slot = m.group(1).lower()
            continue
        link = parse_lnk_line(line)
        if link and slot is not None:
            prefix, speed, width = link
            entry = out.setdefault(slot, {})
            entry[prefix + "_speed"] = speed
            entry[prefix + "_width"] = width
    return out


def parse_nvlink_status(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi nvlink -s` -> [{index, uuid, active, inactive, all_inactive}] per GPU.
    A link line is "Link N: 26.562 GB/s" (active) or "Link N: <inactive>"; a GPU whose links are
    all down prints "NVML: Unable to retrieve NVLink information as all links are inActive"."""
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = NVLINK_GPU_RE.match(line)
        if m:
            gpus.append(
                {
                    "index": int(m.group(1)),
                    "uuid": _uuid(m.group(3)),
                    "active": 0,
                    "inactive": [],
                    "all_inactive": False,
                }
            )
            continue
        if not gpus:
            continue
        if "all links are inactive" in line.lower():
            gpus[-1]["all_inactive"] = True
            continue
        m = NVLINK_LINK_RE.match(line)
        if m:
            if "inactive" in m.group(2).lower():
                gpus[-1]["inactive"].append(int(m.group(1)))
            else:
                gpus[-1]["active"] += 1
    return gpus


def parse_nvlink_errors(text: str) -> dict[int, dict[str, int]]:
    """`nvidia-smi nvlink -e` -> {gpu index: {counter name: total over links}}; counters are the
    CRC, replay and recovery error counts nvidia-smi prints per link ("Replay Errors: 0")."""
    out: dict[int, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        m = NVLINK_GPU_RE.match(line)
        if m:
            current = int(m.group(1))
            out[current] = {}
            continue
        if current is None or not line.startswith((" ", "\t")):
            continue
        body = re.sub(r"^Link \d+:\s*", "", line.strip())  # "Link 0: Replay Errors: 0"
        if ":" not in body:
            continue
        key, _, value = body.partition(":")
        number = _int(value)
        if number is not None and "error" in key.lower():
            name = key.strip()
            out[current][name] = out[current].get(name, 0) + number
    return out
