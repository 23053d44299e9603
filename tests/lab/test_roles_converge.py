"""Lab: one simulated 8x H100 host through its life, in order (each test builds on the last):

fresh check is read-only -> converge -> second run zero changed -> check clean and read-only ->
six drifts detected by a read-only check -> site.yml repairs them (hand-removed hold restored) ->
branch 535 -> 550 upgrade with holds moved and exactly one reboot -> back to 535 with `provision
--no-reboot` (no reboot, rest of the stack converged, stopped before validation, exit 1) -> the next
run reboots once.

The driver is pinned to 535.129.03 so that the repository's newer 535.154.05 can play the
"userspace upgraded under the loaded module" drift.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_roles_helpers import (
    PlayResult,
    fingerprint,
    fingerprint_diff,
    fleet_args,
    provision_cli,
    run_playbook,
    stack_vars,
)

OLD, NEW = "535.129.03", "535.154.05"
STATE: dict[str, Any] = {}
REBOOT_HANDLER = "RUNNING HANDLER [nvidia_driver : Reboot to load the NVIDIA driver]"


@pytest.fixture(scope="module")
def node(lab: Any) -> Iterator[Any]:
    fleet = lab.create_fleet(1, ["h100-sxm-8"])
    try:
        yield fleet
    finally:
        fleet.destroy()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("roles-life")


def _ev(node: Any, **over: Any) -> dict[str, Any]:
    return stack_vars(node.stack_path, **{"nvidia_driver_version": OLD, **over})


def _host(node: Any) -> str:
    return str(node.hosts[0].name)


def _check(node: Any, work: Path, name: str) -> tuple[PlayResult, list[str]]:
    """check.yml in check mode, with a fingerprint of the host before and after."""
    host = _host(node)
    before = fingerprint(node, host)
    res = run_playbook(node, "check.yml", _ev(node), check=True, tmp=work / name)
    after = fingerprint(node, host)
    return res, fingerprint_diff(before, after)


def _statuses(res: PlayResult, host: str) -> dict[str, str]:
    return {k: v["status"] for k, v in res.checks(host).items()}


def test_fresh_host_check_is_read_only(node: Any, work: Path) -> None:
    host = _host(node)
    res, diff = _check(node, work, "fresh-check")
    assert diff == [], diff[:40]
    assert res.changed(host) == 0, res.output[-4000:]
    st = _statuses(res, host)
    # nothing installed yet: the stack's state is drift, the GPUs are there
    assert st["preflight.gpu"] == "pass", st
    for cid in ("repo.source", "cuda.toolkit", "cudnn.version", "nccl.version", "env.path"):
        assert st[cid] == "drift", (cid, st)


def test_converges(node: Any, work: Path) -> None:
    host = _host(node)
    first = run_playbook(node, "site.yml", _ev(node), tmp=work / "converge")
    assert first.rc == 0, first.output[-6000:]
    checks = first.checks(host)
    failed = {k: v for k, v in checks.items() if v["status"] == "fail"}
    assert not failed, failed
    for cid in (
        "preflight.gpu",
        "repo.source",
        "driver.branch",
        "driver.version",
        "driver.module_loaded",
        "driver.hold",
        "driver.persistence",
        "driver.fabricmanager",
        "driver.nouveau_blacklist",
        "driver.reboot",
        "cuda.toolkit",
        "cuda.symlink",
        "cuda.nvcc",
        "cudnn.version",
        "cudnn.hold",
        "nccl.version",
        "nccl.hold",
        "env.path",
        "env.ld_library_path",
        "env.ldconfig",
        "pytorch.version",
        "pytorch.cuda",
    ):
        assert checks[cid]["status"] == "pass", checks[cid]
    assert int(first.facts[host]["preflight_report"]["gpu_count"]) == 8
    assert first.facts[host]["nvidia_driver_report"]["driver_userspace_version"] == OLD
    # fabric manager at exactly the driver version on the NVSwitch box
    out = node.run(host, "dpkg-query -W -f='${Version}' nvidia-fabricmanager-535").stdout
    assert out.startswith(OLD + "-"), out
    assert (
        node.run(
            host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0"
        ).stdout.strip()
        == OLD
    )
    # the trap packages are never installed
    traps = "cuda cuda-12-1 cuda-drivers cuda-12-4"
    query = f"dpkg-query -W -f='${{Package}} ${{db:Status-Abbrev}}\\n' {traps} || true"
    out = node.run(host, query).stdout
    assert " ii" not in out, out
    out = node.run(
        host, "dpkg-query -W -f='${Package}=${Version}\\n' 'libcudnn8*' 'libnccl*'"
    ).stdout
    assert "+cuda12.4" not in out and out.count("+cuda12.1") == 4, out
    held = node.run(host, "apt-mark showhold").stdout.split()
    for pkg in (
        "cuda-drivers-535",
        "nvidia-driver-535",
        "libcudnn8",
        "libcudnn8-dev",
        "libnccl2",
        "libnccl-dev",
        "nvidia-fabricmanager-535",
    ):
        assert pkg in held, held
    STATE["converged"] = True


def test_second_run_changes_nothing(node: Any, work: Path) -> None:
    assert STATE.get("converged"), "needs test_converges"
    host = _host(node)
    second = run_playbook(node, "site.yml", _ev(node), tmp=work / "second")
    assert second.rc == 0, second.output[-4000:]
    changed = [ln for ln in second.output.splitlines() if ln.startswith("changed:")]
    assert second.changed(host) == 0, changed
    assert REBOOT_HANDLER not in second.output


def test_check_after_converge_is_clean_and_read_only(node: Any, work: Path) -> None:
    host = _host(node)
    res, diff = _check(node, work, "clean-check")
    assert res.rc == 0, res.output[-4000:]
    assert diff == [], diff[:40]
    assert res.changed(host) == 0
    st = _statuses(res, host)
    assert not {k: v for k, v in st.items() if v in ("drift", "fail")}, st


DRIFT = f"""
set -e
export DEBIAN_FRONTEND=noninteractive
# a hold removed by hand
apt-mark unhold libnccl2
# cuDNN downgraded (held again, so only the version drifts)
apt-mark unhold libcudnn8 libcudnn8-dev
apt-get install -y -q --allow-downgrades \\
  libcudnn8=8.9.0.131-1+cuda12.1 libcudnn8-dev=8.9.0.131-1+cuda12.1
apt-mark hold libcudnn8 libcudnn8-dev
# profile script edited by hand
echo 'export PATH=/usr/local/cuda-11.3/bin:$PATH' >> /etc/profile.d/cuda.sh
# /usr/local/cuda repointed to a second toolkit
apt-get install -y -q cuda-toolkit-12-4
update-alternatives --set cuda /usr/local/cuda-12.4
# the driver userspace upgraded under the loaded module (an unattended upgrade past the holds)
P="cuda-drivers-535 nvidia-driver-535 nvidia-utils-535 libnvidia-compute-535 nvidia-dkms-535"
apt-mark unhold $P
apt-get install -y -q cuda-drivers-535={NEW}-1 nvidia-driver-535={NEW}-0ubuntu1 \\
  nvidia-utils-535={NEW}-0ubuntu1 libnvidia-compute-535={NEW}-0ubuntu1 \\
  nvidia-dkms-535={NEW}-0ubuntu1
apt-mark hold $P
# a different torch in the venv (a minimal wheel that says 2.0.0)
/opt/pytorch/bin/python - <<'EOF'
import zipfile
files = {{
    "torch/__init__.py": "__version__ = '2.0.0'\\nfrom . import version, cuda\\n",
    "torch/version.py": "cuda = None\\n",
    "torch/cuda.py": "def is_available():\\n    return False\\n",
    "torch-2.0.0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: torch\\nVersion: 2.0.0\\n",
    "torch-2.0.0.dist-info/WHEEL": (
        "Wheel-Version: 1.0\\nGenerator: lab\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    ),
}}
record = "".join(f"{{n}},,\\n" for n in files) + "torch-2.0.0.dist-info/RECORD,,\\n"
with zipfile.ZipFile("/root/torch-2.0.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr("torch-2.0.0.dist-info/RECORD", record)
EOF
/opt/pytorch/bin/python -m pip install -q --no-index --no-deps /root/torch-2.0.0-py3-none-any.whl
rm -f /root/torch-2.0.0-py3-none-any.whl
"""

EXPECTED_DRIFT = {
    "nccl.hold": ("drift", "libnccl2"),
    "cudnn.version": ("drift", "8.9.0.131"),
    "env.path": ("drift", "edited"),
    "cuda.symlink": ("drift", "/usr/local/cuda-12.4"),
    "pytorch.version": ("drift", "torch 2.0.0"),
    "driver.version": ("drift", NEW),
    "driver.module_loaded": ("fail", "mismatch"),
}


def test_drift_is_detected_read_only(node: Any, work: Path) -> None:
    host = _host(node)
    res = node.run(host, DRIFT, timeout=600)
    assert res.rc == 0, (res.stdout[-3000:], res.stderr[-3000:])
    check, diff = _check(node, work, "drift-check")
    assert diff == [], diff[:40]
    assert check.changed(host) == 0
    checks = check.checks(host)
    for cid, (status, needle) in EXPECTED_DRIFT.items():
        c = checks[cid]
        assert c["status"] == status, c
        assert needle in str(c["actual"]), c
        assert c["expected"] and c["remediation"], c
    assert checks["driver.module_loaded"]["remediation"] == "reboot"
    assert "provision --host" in checks["cudnn.version"]["remediation"]
    assert OLD in str(checks["driver.version"]["expected"])
    STATE["drifted"] = True


def test_site_repairs_drift_and_next_check_is_green(node: Any, work: Path) -> None:
    assert STATE.get("drifted"), "needs test_drift_is_detected_read_only"
    host = _host(node)
    fix = run_playbook(node, "site.yml", _ev(node), tmp=work / "repair")
    assert fix.rc == 0, fix.output[-6000:]
    assert REBOOT_HANDLER not in fix.output  # userspace back to the loaded module: no reboot needed
    held = node.run(host, "apt-mark showhold").stdout.split()
    assert "libnccl2" in held, held  # the hold removed by hand is restored
    assert node.run(host, "readlink -f /usr/local/cuda").stdout.strip() == "/usr/local/cuda-12.1"
    res, diff = _check(node, work, "green-check")
    assert diff == [], diff[:40]
    st = _statuses(res, host)
    assert not {k: v for k, v in st.items() if v in ("drift", "fail")}, st
    assert res.facts[host]["pytorch_report"]["torch_version"].startswith("2.13.0")


def test_branch_upgrade_535_to_550_moves_holds_and_reboots_once(node: Any, work: Path) -> None:
    host = _host(node)
    boot = node.boot_id(host)
    ev = _ev(node, nvidia_driver_branch="550", nvidia_driver_version="")
    up = run_playbook(node, "site.yml", ev, tmp=work / "upgrade")
    assert up.rc == 0, up.output[-6000:]
    assert up.output.count(REBOOT_HANDLER) == 1, up.output[-6000:]
    assert node.boot_id(host) != boot
    checks = up.checks(host)
    for cid in (
        "driver.branch",
        "driver.version",
        "driver.module_loaded",
        "driver.hold",
        "driver.fabricmanager",
    ):
        assert checks[cid]["status"] == "pass", checks[cid]
    smi = node.run(
        host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0"
    ).stdout.strip()
    assert smi == "550.54.15"
    held = node.run(host, "apt-mark showhold").stdout.split()
    assert {"cuda-drivers-550", "nvidia-driver-550", "nvidia-fabricmanager-550"} <= set(held), held
    assert not [p for p in held if p.endswith("-535")], held
    pkgs = node.run(
        host, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' '*535*' || true"
    ).stdout
    assert " ii" not in pkgs, pkgs
    fm = node.run(host, "dpkg-query -W -f='${Version}' nvidia-fabricmanager-550").stdout
    assert fm.startswith("550.54.15-"), fm
    again = run_playbook(node, "site.yml", ev, tmp=work / "upgrade-again")
    assert again.rc == 0, again.output[-4000:]
    assert again.changed(host) == 0, [
        ln for ln in again.output.splitlines() if ln.startswith("changed:")
    ]
    assert REBOOT_HANDLER not in again.output


def test_no_reboot_defers_the_reboot_and_stops_before_validation(node: Any, work: Path) -> None:
    """Back from 550 to the 535 pin with --no-reboot: packages change, the host keeps running the
    550 module, the rest of the stack still converges, validation does not run; exit 1 with
    driver.reboot "reboot required". The next run without --no-reboot reboots exactly once."""
    host = _host(node)
    boot = node.boot_id(host)
    proc, data = provision_cli(
        work / "no-reboot", *fleet_args(node), "--no-reboot", "-e", f"nvidia_driver_version={OLD}"
    )
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert node.boot_id(host) == boot, "--no-reboot rebooted the host"
    h = data["hosts"][host]
    assert h["status"] == "failed"
    checks = {c["id"]: c for c in h["checks"]}
    assert checks["driver.reboot"]["status"] == "fail", checks["driver.reboot"]
    assert checks["driver.reboot"]["message"] == "reboot required"
    assert checks["driver.module_loaded"]["status"] == "fail", checks["driver.module_loaded"]
    assert checks["driver.branch"]["status"] == "pass", checks["driver.branch"]
    # the roles after the driver still ran and passed
    for cid in ("cuda.toolkit", "cudnn.version", "nccl.version", "env.path", "pytorch.version"):
        assert checks[cid]["status"] == "pass", checks[cid]
    # validation stopped before any GPU work, saying why
    for cid in ("validation.allreduce", "validation.ddp"):
        assert checks[cid]["status"] == "fail", checks[cid]
        assert "reboot required" in checks[cid]["message"], checks[cid]
    assert not h.get("validation"), h.get("validation")
    smi = node.run(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0")
    assert smi.rc == 18 and "version mismatch" in smi.stdout, smi
    assert node.run(host, "dpkg-query -W -f='${Version}' nvidia-driver-535").stdout.startswith(OLD)

    # the reboot is the driver role's: run that role alone
    done = run_playbook(node, "site.yml", _ev(node), tmp=work / "after-no-reboot",
                        tags="nvidia_driver")
    assert done.rc == 0, done.output[-6000:]
    assert done.output.count(REBOOT_HANDLER) == 1, done.output[-6000:]
    assert node.boot_id(host) != boot
    after = done.checks(host)
    for cid in ("driver.version", "driver.module_loaded", "driver.reboot", "driver.fabricmanager"):
        assert after[cid]["status"] == "pass", after[cid]
    smi = node.run(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0")
    assert smi.stdout.strip() == OLD, smi
