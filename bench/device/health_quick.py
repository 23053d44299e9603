"""The health quick tier on a real GPU machine: collect (gpu + health sections) and judge, timed.

Read-only and passive (what the probe runs: nvidia-smi, nvidia-smi -q, nvlink -s/-e on NVLink
systems, lspci -nn, journalctl -k / dmesg, /proc/driver/nvidia/version). Run from the repository
root: python3 bench/device/health_quick.py > result.json. Prints every health check record, the
commands run and the wall time of collect + judge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "playbooks" / "collections"))

from ansible_collections.provision.gpu.plugins.module_utils import collect as c
from ansible_collections.provision.gpu.plugins.module_utils.components import (
    health,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    Context,
)


class RealIO(c.HostIO):
    def __init__(self) -> None:
        self.ran: list[tuple[list[str], float]] = []

    def run(
        self, argv: list[str], timeout: float | None = None, env: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        exe = argv[0] if Path(argv[0]).is_absolute() else self.which(argv[0])
        if exe is None:
            return 127, "", f"{argv[0]}: command not found"
        t = time.monotonic()
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, LC_ALL="C", **(env or {})), check=False)
        self.ran.append((list(argv), round(time.monotonic() - t, 3)))
        return proc.returncode, proc.stdout, proc.stderr


def main() -> int:
    io = RealIO()
    start = time.monotonic()
    facts = c.collect(["gpu", "health", "kernel", "units"], {}, io)
    collected = time.monotonic()
    ctx = Context(facts, {"host": os.uname().nodename, "health": {"expected_gpus": 0}}, True)
    health.judge(ctx)
    done = time.monotonic()
    out = {
        "collect_s": round(collected - start, 3),
        "judge_s": round(done - collected, 4),
        "ran": io.ran,
        "checks": ctx.checks,
        "health_facts": facts.get("health"),
        "gpu_state": facts["gpu"].get("state"),
    }
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
