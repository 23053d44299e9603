"""The read-only probe's health tiers on the machine it runs on, without Ansible: collect (the same
code the host_assess module runs on a host) and judge `health`, `health_deep` and `driver`, printing
the check records as JSON with the collection time. Read-only: what the probe runs in a
`provision check` (nvidia-smi queries, the kernel log, /proc); nothing resets or loads the GPUs
except `dcgmi diag` when DCGM is installed (health_deep, as `provision check --deep`).

    python3 bench/device/health_check.py > health.json      # from the repository root

Run on an H200 (driver 580.159.04, open module, a Firecracker VM without lspci) on 2026-12-04:
bench/device/h200-health-2026-12-04.json. Every health check passed (nvlink and fabric skip: one
PCIe GPU); collection took 0.34 s for the quick tier; the whole script 1.1-1.3 s. The driver checks
drift there, as they should: the image's driver is not from packages provision manages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "playbooks" / "collections"), str(ROOT / "tests" / "unit")]

from ansible_collections.provision.gpu.plugins.module_utils import collect as c  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import evaluate as ev  # noqa: E402


class LocalIO(c.HostIO):
    """Commands through subprocess with a clean locale (as the module's ModuleIO)."""

    def run(
        self, argv: list[str], timeout: float | None = None, env: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        exe = argv[0] if Path(argv[0]).is_absolute() else self.which(argv[0])
        if exe is None:
            return 127, "", f"{argv[0]}: command not found"
        environ = {**os.environ, "LC_ALL": "C", "LANG": "C", **(env or {})}
        try:
            proc = subprocess.run([exe, *argv[1:]], capture_output=True, env=environ,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return -9, "", f"timed out after {timeout} s"
        out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        return proc.returncode, out, err


def main() -> None:
    import probe_fakes as pf  # type: ignore[import-not-found]  # noqa: PLC0415 - the roles' stack

    desired = pf.stack()
    params = {
        "disk_path": "/", "cuda_version": desired["cuda"]["version"],
        "env_profile_file": desired["env"]["profile_file"], "env_users": ["root"],
        "pytorch_python": desired["pytorch"]["python"], "pytorch_venv": desired["pytorch"]["venv"],
        "dcgm_level": 1, "dcgm_timeout_s": 300,
    }
    out = {}
    for components in (["health"], ["health_deep"], ["driver"]):
        start = time.monotonic()
        facts = c.collect(ev.sections_for(components), params, LocalIO())
        collected = time.monotonic() - start
        result = ev.evaluate(components, facts, desired, check_mode=True)
        out[components[0]] = {"collect_s": round(collected, 3), "checks": result["checks"],
                              "report": result["report"]}
    json.dump(out, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main()
