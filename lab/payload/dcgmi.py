#!/usr/bin/python3
"""Fake `dcgmi` (NVIDIA DCGM's CLI) for the provision lab: `dcgmi diag -r N --json|-j` only.

Reads the host's GPU description (/etc/fake-nvidia/gpus.json, or $FAKE_NVIDIA_CONFIG) and the
simulated kernel-module state (/run/fake-nvidia/loaded, or $FAKE_NVIDIA_LOADED) as the fake
nvidia-smi does, and answers in the JSON layout of NVIDIA/DCGM:nvvs/src/JsonOutput.cpp (test names
and the one-result-for-all-GPUs software tests as in NVIDIA/DCGM:nvvs/src/tests/JsonResultTests.cpp,
the level 3 names as in NVIDIA/DCGM#139).

Faults come from the description's `faults` list (the simulated GPU tools' one fault mechanism):
  {"kind": "dcgm_fail", "test": "<name>", "gpu": <index>, "message": "..."}  that test fails there
  {"kind": "dcgm_skip", "test": "<name>"}                                     that test is skipped
  {"kind": "dcgm_hang"}                                                       never answers
Not modelled (not in public captures): the exit status of a failing diagnostic (here 0 pass, 1
otherwise) and DCGM 4's layout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

CONFIG = Path(os.environ.get("FAKE_NVIDIA_CONFIG", "/etc/fake-nvidia/gpus.json"))
LOADED = Path(os.environ.get("FAKE_NVIDIA_LOADED", "/run/fake-nvidia/loaded"))
VERSION = "3.3.9"
SOFTWARE = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS-related Blocks",
    "Persistence Mode",
    "Environmental Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)
# (level, category, test): what each run level adds (dcgmi diag: "1 ⊂ 2 ⊂ 3")
PER_GPU = (
    (2, "Integration", "PCIe"),
    (2, "Hardware", "GPU Memory"),
    (3, "Hardware", "Diagnostic"),
    (3, "Stress", "Targeted Stress"),
    (3, "Stress", "Targeted Power"),
    (4, "Hardware", "EUD Test"),
)
# the lab's own words (the real message without a driver is not in public captures)
NO_DRIVER = "Error: (provision lab dcgmi) no NVIDIA driver loaded or no GPU: cannot run diag\n"


def description() -> dict[str, Any] | None:
    try:
        data = json.loads(CONFIG.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def driver_loaded(desc: dict[str, Any]) -> bool:
    mode = str(desc.get("driver", "auto"))
    if mode in ("loaded", "not-loaded"):
        return mode == "loaded"
    try:
        return bool(LOADED.read_text(encoding="utf-8").split())
    except OSError:
        return False


def result(status: str, gpu_ids: Any, warning: str = "") -> dict[str, Any]:  # noqa: ANN401
    out: dict[str, Any] = {"gpu_ids": gpu_ids, "status": status}
    if warning:
        out["warnings"] = [
            {"warning": warning, "error_id": 1, "error_category": 1, "error_severity": 1}
        ]
    return out


def diag(level: int, desc: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    count = int(desc.get("count") or len(desc.get("bus_ids") or []))
    faults = [f for f in desc.get("faults") or [] if isinstance(f, dict)]
    failing = {(f.get("test"), f.get("gpu")): f for f in faults if f.get("kind") == "dcgm_fail"}
    skipped = {f.get("test") for f in faults if f.get("kind") == "dcgm_skip"}
    all_gpus = ",".join(str(i) for i in range(count))
    ok = True

    def status_of(test: str, gpu: int | None) -> dict[str, Any]:
        nonlocal ok
        if test in skipped:
            return result("Skip", all_gpus if gpu is None else gpu)
        for (name, where), fault in failing.items():
            # a software test (gpu None) has one result for all GPUs: any fault of it fails it
            if name == test and (gpu is None or where in (gpu, None)):
                ok = False
                who = f"GPU {gpu}" if gpu is not None else f"GPUs {all_gpus}"
                msg = fault.get("message") or f"{test} failed on {who} (lab fault)"
                return result("Fail", all_gpus if gpu is None else gpu, msg)
        return result("Pass", all_gpus if gpu is None else gpu)

    deployment = [{"name": t, "results": [status_of(t, None)]} for t in SOFTWARE]
    categories: list[dict[str, Any]] = [{"category": "Deployment", "tests": deployment}]
    for need, category, test in PER_GPU:
        if need > level:
            continue
        entry = {"name": test, "results": [status_of(test, g) for g in range(count)]}
        for c in categories:
            if c["category"] == category:
                c["tests"].append(entry)
                break
        else:
            categories.append({"category": category, "tests": [entry]})
    root = {"test_categories": categories, "version": VERSION}
    return {"DCGM GPU Diagnostic": root}, ok


def main(args: list[str]) -> int:
    if not args or args[0] != "diag":
        sys.stderr.write("dcgmi (provision lab): only `dcgmi diag -r N --json` is simulated\n")
        return 2
    level = 1
    if "-r" in args and args.index("-r") + 1 < len(args):
        value = args[args.index("-r") + 1]
        if value not in ("1", "2", "3", "4"):
            sys.stderr.write("dcgmi (provision lab): only run levels 1-4 are simulated\n")
            return 2
        level = int(value)
    desc = description()
    if desc is None or not driver_loaded(desc) or not desc.get("bus_ids"):
        sys.stderr.write(NO_DRIVER)
        return 255
    if any(isinstance(f, dict) and f.get("kind") == "dcgm_hang" for f in desc.get("faults") or []):
        while True:
            time.sleep(60)
    doc, ok = diag(level, desc)
    if "--json" in args or "-j" in args:
        sys.stdout.write(json.dumps(doc, indent=4) + "\n")
    else:
        sys.stdout.write("Successfully ran diagnostic for group.\n(lab: use --json)\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
