#!/usr/bin/python3
"""The lab's stand-in for the kernel loading the NVIDIA module and udev reacting to it (base image).

Installed as three commands (argv[1] selects):

* `generator` (/usr/lib/systemd/system-generators/provision-lab-nvidia): at boot and on
  daemon-reload, when a module for the running kernel is installed (DKMS's
  /lib/modules/<k>/updates/dkms/nvidia.ko or a prebuilt /lib/modules/<k>/kernel/nvidia*/nvidia.ko)
  and the host has NVIDIA GPUs, writes `provision-lab-nvidia-bound.service` (sysinit) that "loads"
  it, and gives that unit the `Wants=` that the installed udev rules ask for with SYSTEMD_WANTS on
  the driver (Ubuntu's 71-nvidia.rules: the static nvidia-persistenced.service), standing for the
  device unit that keeps such units needed.
* `load`: writes /run/fake-nvidia/loaded (`<version>\\n<flavor>`) from that module file.
* `modprobe`: what DKMS's postinst triggers in the lab when nothing is loaded yet (the real
  `modprobe nvidia` the lab turns off): regenerate and start the bound unit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

UNIT = "provision-lab-nvidia-bound.service"
LOADED = Path("/run/fake-nvidia/loaded")
CONFIG = Path("/etc/fake-nvidia/gpus.json")
RULES = (Path("/lib/udev/rules.d"), Path("/usr/lib/udev/rules.d"), Path("/etc/udev/rules.d"))
SELF = "/usr/lib/fake-nvidia/loader"


def module_file() -> Path | None:
    k = os.uname().release
    cands = [Path(f"/lib/modules/{k}/updates/dkms/nvidia.ko")]
    cands += sorted(Path(f"/lib/modules/{k}/kernel").glob("nvidia*/nvidia.ko"))
    for c in cands:
        if c.is_file():
            return c
    return None


def has_gpus() -> bool:
    try:
        desc = json.loads(CONFIG.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(desc.get("gpu")) and desc.get("driver", "auto") != "not-loaded"


def wanted_units() -> list[str]:
    units: list[str] = []
    for d in RULES:
        for rule in sorted(d.glob("*.rules")) if d.is_dir() else []:
            for line in rule.read_text(encoding="utf-8", errors="replace").splitlines():
                if "drivers/nvidia" in line and "SYSTEMD_WANTS" in line:
                    for m in re.finditer(r'SYSTEMD_WANTS\}\+?="([^"]+)"', line):
                        units += [u for u in m.group(1).split() if u not in units]
    return units


def generator(out: str) -> int:
    if module_file() is None or not has_gpus():
        return 0
    wants = wanted_units()
    unit = [
        "# provision lab: the NVIDIA driver is loaded and bound (simulated modprobe + udev)",
        "[Unit]",
        "Description=provision lab: NVIDIA kernel module loaded (simulated)",
        "DefaultDependencies=no",
        "After=local-fs.target",
        "Before=sysinit.target",
    ]
    if wants:
        unit.append("Wants=" + " ".join(wants))
        unit.append("Before=" + " ".join(wants))
    unit += [
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        f"ExecStart={SELF} load",
        "",
    ]
    d = Path(out)
    (d / UNIT).write_text("\n".join(unit), encoding="utf-8")
    wants_dir = d / "sysinit.target.wants"
    wants_dir.mkdir(parents=True, exist_ok=True)
    link = wants_dir / UNIT
    if not link.is_symlink():
        link.symlink_to(f"../{UNIT}")
    return 0


def load() -> int:
    ko = module_file()
    if ko is None:
        kernel = os.uname().release
        print(f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{kernel}")
        return 1
    if not has_gpus():
        print("modprobe: ERROR: could not insert 'nvidia': No such device")
        return 1
    if LOADED.exists() and LOADED.read_text(encoding="utf-8").strip():
        return 0
    words = ko.read_text(encoding="utf-8").split()
    version, flavor = (words[2], words[3]) if len(words) >= 4 else ("0", "proprietary")
    LOADED.parent.mkdir(parents=True, exist_ok=True)
    LOADED.write_text(f"{version}\n{flavor}\n", encoding="utf-8")
    return 0


def modprobe() -> int:
    if LOADED.exists() and LOADED.read_text(encoding="utf-8").strip():
        return 0
    if not Path("/run/systemd/system").exists() or module_file() is None or not has_gpus():
        return 0
    subprocess.run(["systemctl", "daemon-reload"], check=False)
    subprocess.run(["systemctl", "start", UNIT], check=False)
    return 0


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else ""
    if Path(sys.argv[0]).name == "provision-lab-nvidia":
        return generator(argv[0] if argv else "/run/systemd/generator")
    if cmd == "load":
        return load()
    if cmd == "modprobe":
        return modprobe()
    print("usage: loader load|modprobe", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
