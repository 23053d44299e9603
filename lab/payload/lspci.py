#!/usr/bin/python3
"""Fake `lspci` for the provision lab: lists the PCI devices of /etc/fake-nvidia/gpus.json.

Supports -n, -nn, -D, -k, -v, -mm, -d VENDOR[:DEVICE], -s [[DOMAIN:]BUS:]SLOT[.FUNC]. The data
source is the host's GPU description ($FAKE_NVIDIA_CONFIG overrides the path); without one only
the generic chipset devices are shown, like a server with no NVIDIA card.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

CONFIG = os.environ.get("FAKE_NVIDIA_CONFIG", "/etc/fake-nvidia/gpus.json")
LOADED = os.environ.get("FAKE_NVIDIA_LOADED", "/run/fake-nvidia/loaded")

VENDORS = {
    "10de": "NVIDIA Corporation",
    "8086": "Intel Corporation",
    "15b3": "Mellanox Technologies",
}
CLASSES = {
    "0600": "Host bridge",
    "0601": "ISA bridge",
    "0200": "Ethernet controller",
    "0300": "VGA compatible controller",
    "0302": "3D controller",
    "0680": "Bridge",
}
GENERIC: list[dict[str, Any]] = [
    {
        "slot": "00:00.0",
        "cls": "0600",
        "id": "8086:09a2",
        "name": "Ice Lake Memory Map/VT-d",
        "rev": "04",
    },
    {
        "slot": "00:1f.0",
        "cls": "0601",
        "id": "8086:a1cb",
        "name": "C620 Series Chipset LPC/eSPI Controller",
        "rev": "0a",
    },
    {
        "slot": "4b:00.0",
        "cls": "0200",
        "id": "15b3:1021",
        "name": "MT2910 Family [ConnectX-7]",
        "rev": None,
    },
]


def devices(desc: dict[str, Any] | None) -> list[dict[str, Any]]:
    devs: list[dict[str, Any]] = [dict(d, sub=None, driver=None) for d in GENERIC]
    if not desc:
        return devs
    gpu = desc.get("gpu")
    if gpu:
        for bus in desc.get("bus_ids", []):
            devs.append(
                {
                    "slot": f"{bus}:00.0",
                    "cls": gpu["pci_class"],
                    "id": gpu["pci_id"],
                    "name": gpu["lspci_name"],
                    "rev": "a1",
                    "sub": gpu.get("subsystem_id"),
                    "driver": "gpu",
                }
            )
    sw = desc.get("nvswitch")
    if sw:
        for bus in sw.get("bus_ids", []):
            devs.append(
                {
                    "slot": f"{bus}:00.0",
                    "cls": "0680",
                    "id": sw["pci_id"],
                    "name": sw.get("lspci_name", "Device " + sw["pci_id"].split(":")[1]),
                    "rev": "a1",
                    "sub": sw["pci_id"],
                    "driver": "switch",
                }
            )
    return sorted(devs, key=lambda d: d["slot"])


def load() -> dict[str, Any] | None:
    try:
        with Path(CONFIG).open(encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def matches(dev: dict[str, Any], dfilter: str | None, sfilter: str | None) -> bool:
    if dfilter:
        parts = [*dfilter.split(":"), "", ""][:2]
        vendor, device = dev["id"].split(":")
        if parts[0] and parts[0].lower() != vendor:
            return False
        if parts[1] and parts[1].lower() != device:
            return False
    if sfilter:
        want = sfilter.lower().removeprefix("0000:")
        if not dev["slot"].startswith(want) and not (
            want.count(":") == 0 and dev["slot"].endswith(want)
        ):
            return False
    return True


def line(dev: dict[str, Any], numeric: int, domain: bool, mm: bool) -> str:
    slot = ("0000:" if domain else "") + dev["slot"]
    vendor_id, device_id = dev["id"].split(":")
    vendor = VENDORS.get(vendor_id, "Device")
    cls = CLASSES.get(dev["cls"], "Class " + dev["cls"])
    rev = f" (rev {dev['rev']})" if dev["rev"] else ""
    if mm:
        if numeric == 1:
            fields = [dev["cls"], vendor_id, device_id]
        elif numeric >= 2:
            fields = [
                f"{cls} [{dev['cls']}]",
                f"{vendor} [{vendor_id}]",
                f"{dev['name']} [{device_id}]",
            ]
        else:
            fields = [cls, vendor, dev["name"]]
        out: str = slot + " " + " ".join(f'"{f}"' for f in fields)
        if dev["rev"]:
            out += f" -r{dev['rev']}"
        if dev.get("sub"):
            sv, sd = dev["sub"].split(":")
            sub = [sv, sd] if numeric == 1 else [VENDORS.get(sv, sv), f"Device {sd}"]
            out += " " + " ".join(f'"{s}"' for s in sub)
        else:
            out += ' "" ""'
        return out
    if numeric == 1:
        return f"{slot} {dev['cls']}: {dev['id']}{rev}"
    if numeric >= 2:
        return f"{slot} {cls} [{dev['cls']}]: {vendor} {dev['name']} [{dev['id']}]{rev}"
    return f"{slot} {cls}: {vendor} {dev['name']}{rev}"


def details(dev: dict[str, Any], verbose: bool) -> list[str]:
    out: list[str] = []
    if dev.get("sub"):
        sv, sd = dev["sub"].split(":")
        out.append(f"\tSubsystem: {VENDORS.get(sv, sv)} Device {sd}")
    if verbose:
        out.append("\tFlags: bus master, fast devsel, latency 0")
    role = dev.get("driver")
    if role == "gpu":
        if Path(LOADED).exists():
            out.append("\tKernel driver in use: nvidia")
        out.append("\tKernel modules: nvidiafb, nouveau, nvidia_drm, nvidia")
    elif role == "switch" and Path(LOADED).exists():
        out.append("\tKernel driver in use: nvidia-nvswitch")
    return out


def main(argv: list[str]) -> int:  # noqa: PLR0912 - one branch per lspci option
    numeric = 0
    domain = mm = kernel = verbose = False
    dfilter: str | None = None
    sfilter: str | None = None
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "-d" and args:
            dfilter = args.pop(0)
        elif arg == "-s" and args:
            sfilter = args.pop(0)
        elif arg.startswith("-") and not arg.startswith("--"):
            for ch in arg[1:]:
                if ch == "n":
                    numeric += 1
                elif ch == "D":
                    domain = True
                elif ch == "m":
                    mm = True
                elif ch == "k":
                    kernel = True
                elif ch == "v":
                    verbose = True
                elif ch in "qQxtbiAp":
                    continue
                else:
                    sys.stderr.write(f"lspci: invalid option -- '{ch}'\n")
                    return 2
        elif arg in ("--version",):
            print("lspci version 3.9.0")
            return 0
    for dev in devices(load()):
        if not matches(dev, dfilter, sfilter):
            continue
        print(line(dev, numeric, domain, mm))
        if (kernel or verbose) and not mm:
            print("\n".join(details(dev, verbose)))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
