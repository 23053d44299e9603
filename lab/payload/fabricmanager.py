#!/usr/bin/python3
"""Fake `nv-fabricmanager` (fake nvidia-fabricmanager-<branch> package).

Like the real one it refuses to run on a host without NVSwitch devices (NV_WARN_NOTHING_TO_DO) and
when its version differs from the loaded driver's; otherwise it forks, marks the fabric as trained
(nvidia-smi -q shows Fabric State: Completed) and runs until SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

VERSION = "@DRIVER_VERSION@"
CONFIG = Path(os.environ.get("FAKE_NVIDIA_CONFIG", "/etc/fake-nvidia/gpus.json"))
LOADED = Path(os.environ.get("FAKE_NVIDIA_LOADED", "/run/fake-nvidia/loaded"))
STATE = Path("/run/fake-nvidia/fabricmanager")
PIDFILE = Path("/run/nvidia-fabricmanager/nv-fabricmanager.pid")


def fail(msg: str) -> int:
    sys.stderr.write(msg + "\n")
    return 1


def main() -> int:
    try:
        desc = json.loads(CONFIG.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        desc = {}
    try:
        loaded = LOADED.read_text(encoding="utf-8").split()[0]
    except (OSError, IndexError):
        return fail(
            "fabric manager failed to open NVIDIA GPU driver interface. Is the driver loaded?"
        )
    if loaded != VERSION:
        return fail(
            f"fabric manager NVIDIA GPU driver interface version {VERSION} don't match with "
            f"driver version {loaded}. Please update with matching NVIDIA driver package."
        )
    if not (desc.get("nvswitch") or {}).get("bus_ids"):
        return fail(
            "request to query NVSwitch device information from NVSwitch driver failed with "
            "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]"
        )
    if os.fork():
        for _ in range(50):
            if PIDFILE.exists():
                return 0
            time.sleep(0.05)
        return 1
    os.setsid()
    PIDFILE.parent.mkdir(parents=True, exist_ok=True)
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(VERSION + "\n", encoding="utf-8")
    PIDFILE.write_text(f"{os.getpid()}\n", encoding="utf-8")

    def stop(_sig: int, _frame: object) -> None:
        STATE.unlink(missing_ok=True)
        PIDFILE.unlink(missing_ok=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
