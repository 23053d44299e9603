"""Lab: the stack converges on a simulated 8x H100 host, idempotently; check mode is clean."""

from __future__ import annotations

from pathlib import Path

from test_roles_helpers import run_playbook, stack_vars


def test_h100_converges_idempotent_and_check_clean(fleet_factory, tmp_path: Path) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    host = fleet.hosts[0].name
    ev = stack_vars(fleet.stack_path)

    first = run_playbook(fleet, "site.yml", ev, tmp=tmp_path / "r1")
    assert first.rc == 0, first.output[-6000:]
    checks = first.checks(host)
    failed = {k: v for k, v in checks.items() if v["status"] == "fail"}
    assert not failed, failed
    for cid in ("preflight.gpu", "repo.source", "driver.version", "driver.hold",
                "driver.fabricmanager", "cuda.toolkit", "cuda.symlink", "cuda.nvcc",
                "cudnn.version", "cudnn.hold", "nccl.version", "nccl.hold", "env.path",
                "env.ld_library_path", "env.ldconfig", "pytorch.version", "pytorch.cuda"):
        assert checks[cid]["status"] == "pass", checks[cid]
    assert first.facts[host]["preflight_report"]["gpu_count"] in (8, "8")
    # fabric manager at exactly the driver version on the NVSwitch box
    res = fleet.run(host, "dpkg-query -W -f='${Version}' nvidia-fabricmanager-535")
    rc, out = res.rc, res.stdout
    driver = first.facts[host]["nvidia_driver_report"]["driver_userspace_version"]
    assert rc == 0 and out.startswith(driver)
    # traps never installed
    query = "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' cuda cuda-12-1 cuda-drivers"
    out = fleet.run(host, query + " || true").stdout
    assert " ii" not in out, out
    out = fleet.run(host, "apt-mark showhold").stdout
    for pkg in ("cuda-drivers-535", "libcudnn8", "libnccl2", "nvidia-fabricmanager-535"):
        assert pkg in out.split(), out

    second = run_playbook(fleet, "site.yml", ev, tmp=tmp_path / "r2")
    assert second.rc == 0, second.output[-4000:]
    assert second.changed(host) == 0, second.output[-6000:]

    check = run_playbook(fleet, "check.yml", ev, check=True, tmp=tmp_path / "r3")
    assert check.rc == 0, check.output[-4000:]
    assert check.changed(host) == 0
    statuses = {k: v["status"] for k, v in check.checks(host).items()}
    assert not [k for k, v in statuses.items() if v in ("drift", "fail")], statuses
