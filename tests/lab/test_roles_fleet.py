"""Lab, through the CLI: a 4x RTX 4090 host (PCIe, no NVSwitch) converges without a fabric manager;
a host without a GPU, and a host with Secure Boot on (unsigned module path), each stop in preflight
with a clear message, exit 1, and nothing changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_roles_helpers import fingerprint, fingerprint_diff, fleet_args, provision_cli


def test_rtx4090_gets_no_fabric_manager_nogpu_and_secure_boot_stop_in_preflight(
    fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(3, profiles=("rtx4090-4", "nogpu", "t4-1"))
    rtx, nogpu, sb = (h.name for h in fleet.hosts)
    fleet.set_secure_boot(sb, True)
    before = fingerprint(fleet, nogpu)
    before_sb = fingerprint(fleet, sb)

    proc, data = provision_cli(tmp_path, *fleet_args(fleet))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]

    # Secure Boot on, no signed path declared: stopped before any change, with the options named
    h = data["hosts"][sb]
    assert h["status"] == "failed"
    checks = {c["id"]: c for c in h["checks"]}
    sbc = checks["preflight.secure_boot"]
    assert sbc["status"] == "fail", sbc
    assert sbc["actual"] == "Secure Boot enabled, unsigned DKMS modules", sbc
    assert "nothing was changed" in sbc["message"], sbc["message"]
    assert "linux-modules-nvidia-580-server" in sbc["message"] and "MOK" in sbc["message"]
    assert "gpu_stack_secure_boot_signed=true" in sbc["message"]
    assert not [c for c in checks if not c.startswith("preflight.")], sorted(checks)
    assert str(h["facts"].get("secure_boot")) == "enabled", h["facts"]
    diff = fingerprint_diff(before_sb, fingerprint(fleet, sb))
    assert diff == [], diff[:40]
    assert sb in proc.stdout + proc.stderr

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
    assert "cuda-drivers-580" in held and not [p for p in held if "fabricmanager" in p], held
