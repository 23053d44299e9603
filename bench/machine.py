"""The machine a result was measured on."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from bench import parse


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _os_name() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


def describe() -> dict[str, Any]:
    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return {
        "cpu_model": parse.cpu_model(_read("/proc/cpuinfo")),
        "cores": cores,
        "cores_usable": usable,
        "memory_gib": parse.mem_total_gib(_read("/proc/meminfo")),
        "kernel": platform.release(),
        "os": _os_name(),
        "python": platform.python_version(),
        "ansible_core": _version("ansible-core"),
        "ansible_runner": _version("ansible-runner"),
        "provision": _version("provision"),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def one_line(m: dict[str, Any]) -> str:
    return (
        f"{m.get('cpu_model')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, "
        f"kernel {m.get('kernel')} ({m.get('os')}), Python {m.get('python')}, "
        f"ansible-core {m.get('ansible_core')}, ansible-runner {m.get('ansible_runner')}"
    )
