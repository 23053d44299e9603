"""Lab, through the CLI: a 4x RTX 4090 host (PCIe, no NVSwitch) converges without a fabric manager;
a host without a GPU stops in preflight with a clear message, exit 1, and nothing installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_roles_helpers import fingerprint, fingerprint_diff

PROVISION = Path(sys.executable).parent / "provision"


def _provision(fleet: Any, tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    report = tmp / "report"
    env = dict(os.environ, PROVISION_STATE_DIR=str(tmp / "state"))
    proc = subprocess.run(
        [
            str(PROVISION),
            *args,
            "-i",
            str(fleet.inventory_path),
            "--stack",
            str(fleet.stack_path),
            "--known-hosts",
            str(fleet.known_hosts),
            "--report-dir",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env=env,
    )
    data = json.loads((report / "report.json").read_text(encoding="utf-8"))
    return proc, data


def test_rtx4090_gets_no_fabric_manager_and_nogpu_stops_in_preflight(
    fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(2, profiles=("rtx4090-4", "nogpu"))
    rtx, nogpu = (h.name for h in fleet.hosts)
    before = fingerprint(fleet, nogpu)

    proc, data = _provision(fleet, tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]

    # the GPU-less host: one clear preflight failure, nothing else ran, nothing changed
    h = data["hosts"][nogpu]
    checks = {c["id"]: c for c in h["checks"]}
    assert checks["preflight.gpu"]["status"] == "fail", checks["preflight.gpu"]
    assert "no NVIDIA GPU" in checks["preflight.gpu"]["message"]
    assert not [c for c in checks if not c.startswith("preflight.")], sorted(checks)
    diff = fingerprint_diff(before, fingerprint(fleet, nogpu))
    assert diff == [], diff[:40]

    # the PCIe host: full stack, no fabric manager
    h = data["hosts"][rtx]
    checks = {c["id"]: c for c in h["checks"]}
    failed = {k: v for k, v in checks.items() if v["status"] == "fail"}
    assert not failed, failed
    fm = checks["driver.fabricmanager"]
    assert fm["status"] == "pass" and "no fabric manager" in fm["expected"], fm
    out = fleet.run(rtx, "dpkg-query -W 'nvidia-fabricmanager*' 'cuda-drivers-fabricmanager*'")
    assert out.rc != 0 or " ii" not in out.stdout, out.stdout
    assert fleet.run(rtx, "systemctl is-enabled nvidia-fabricmanager").stdout.strip() != "enabled"
    assert int(h["facts"]["gpu_count"]) == 4
    assert str(h["facts"]["nvswitch_present"]).lower() == "false"
    held = fleet.run(rtx, "apt-mark showhold").stdout.split()
    assert "cuda-drivers-535" in held and not [p for p in held if "fabricmanager" in p], held
