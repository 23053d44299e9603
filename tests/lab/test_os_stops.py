"""Issue 20 item 4: an OS release NVIDIA publishes no CUDA 12.1 for stops in the preflight, with the
reason, before anything on the host changes (before: Ubuntu 24.04 passed the preflight, the
repository role wrote NVIDIA's ubuntu2404 apt source, then the run failed).

The host is the Ubuntu 22.04 personality presented as Ubuntu 24.04.3: its os-release and
lsb-release replaced by Ubuntu 24.04's (python-distro/distro:tests/resources/distros/ubuntu24/etc/,
the same file as tests/unit/fixtures/captures/os-release__ubuntu_24.04.txt). Nothing of 24.04's
userland is modelled: the run must not get that far."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab_shell import ok
from test_roles_helpers import fingerprint, fingerprint_diff, fleet_args, provision_cli

NOBLE_OS_RELEASE = (Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "captures"
                    / "os-release__ubuntu_24.04.txt").read_text(encoding="utf-8")
NOBLE_LSB_RELEASE = (
    "DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=24.04\nDISTRIB_CODENAME=noble\n"
    'DISTRIB_DESCRIPTION="Ubuntu 24.04.3 LTS"\n'
)


def present_as_noble(fleet: Any, host: str) -> None:
    ok(
        fleet,
        host,
        f"cat > /usr/lib/os-release <<'EOF'\n{NOBLE_OS_RELEASE}EOF\n"
        f"cat > /etc/lsb-release <<'EOF'\n{NOBLE_LSB_RELEASE}EOF\n",
    )
    assert "VERSION_ID=\"24.04\"" in ok(fleet, host, "cat /etc/os-release")


def test_ubuntu_2404_stops_in_preflight_before_any_change(
    fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(1, ["t4-1"])
    host = fleet.hosts[0].name
    present_as_noble(fleet, host)
    sources = ok(fleet, host, "ls /etc/apt/sources.list.d/; cat /etc/apt/sources.list")
    before = fingerprint(fleet, host)

    proc, data = provision_cli(tmp_path, *fleet_args(fleet))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-6000:]
    entry = data["hosts"][host]
    checks = {c["id"]: c for c in entry["checks"]}
    check = checks["preflight.cuda_repo"]
    assert check["status"] == "fail", check
    assert "no CUDA 12.1 packages for ubuntu2404/x86_64" in check["message"], check
    assert entry["status"] == "failed", entry["status"]
    # and nothing on the host changed: the same apt sources, files and enabled units
    assert ok(fleet, host, "ls /etc/apt/sources.list.d/; cat /etc/apt/sources.list") == sources
    assert fingerprint_diff(before, fingerprint(fleet, host)) == []
