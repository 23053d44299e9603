#!/usr/bin/python3
"""Fake `nv-hostengine` (NVIDIA DCGM's host engine, fake datacenter-gpu-manager-4-core package).

The lab's nvidia-dcgm unit runs it in the foreground (`-n`); it only stays up until SIGTERM. The
simulated dcgmi does not talk to it (it reads the GPU description itself). `-t` (stop a running
engine) and `--version` answer as the real options do in shape, not in text.
"""

from __future__ import annotations

import signal
import sys
import time

VERSION = "4.4.0"


def main(argv: list[str]) -> int:
    if "--version" in argv or "-v" in argv:
        print(f"version: {VERSION}")
        return 0
    if "-t" in argv:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
