#!/usr/bin/python3
"""Fake `dmesg` for the provision lab: the simulated kernel log of the host's NVIDIA GPUs.

Prints the module's load line when the simulated module is loaded and one NVRM Xid line per entry
of the description's faults.xid ({gpu: bus position, xid: number}). Formats: the load line as in
the real H200 capture (tests/unit/fixtures/captures/dmesg-nvrm__r580_h200_device_no_xid.txt), the
Xid line as NVIDIA's Xid documentation gives it (docs.nvidia.com/deploy/xid-errors/). Read-only:
-c/-C (clear the ring buffer) are refused, as an unprivileged real dmesg would.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CONFIG = Path(os.environ.get("FAKE_NVIDIA_CONFIG", "/etc/fake-nvidia/gpus.json"))
LOADED = Path(os.environ.get("FAKE_NVIDIA_LOADED", "/run/fake-nvidia/loaded"))
XID_TEXT = {
    79: "GPU has fallen off the bus.",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.",
}


def main(argv: list[str]) -> int:
    if any(a in ("-c", "-C", "--clear", "--read-clear") for a in argv):
        sys.stderr.write("dmesg: klogctl failed: Operation not permitted\n")
        return 1
    try:
        desc = json.loads(CONFIG.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        desc = {}
    try:
        loaded = LOADED.read_text(encoding="utf-8").split()
    except OSError:
        loaded = []
    if loaded:
        print(f"[    0.570649] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {loaded[0]}  "
              "Release Build  (lab@)")
    bus_ids = desc.get("bus_ids") or []
    faults = desc.get("faults") if isinstance(desc.get("faults"), dict) else {}
    for n, entry in enumerate(faults.get("xid") or []):
        gpu, xid = int(entry.get("gpu", 0)), int(entry.get("xid", 0))
        bus = bus_ids[gpu] if gpu < len(bus_ids) else "00"
        print(f"[{1000 + n * 10:>5}.000000] NVRM: Xid (PCI:0000:{bus}:00): {xid}, pid=1234, "
              f"name=python3, {XID_TEXT.get(xid, 'Xid error.')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
