"""Lab: the validation role on simulated GPU hosts (CPU torch in /opt/pytorch, gloo backend).

One host x 4 ranks passes with its numbers in the facts; two hosts x 2 ranks pass across the network
(static rendezvous on the first host); a stalled rank on the second host fails the check on both
hosts, naming the rank and its host, by the collective watchdog long before the outer limit (the
single-host stall is covered by tests/unit/test_validation_program.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from test_roles_helpers import run_playbook, stack_vars


def _vars(fleet: Any, **extra: Any) -> dict[str, Any]:
    ev = stack_vars(
        fleet.stack_path,
        gpu_stack_validation_enabled=True,
        gpu_stack_validation_timeout_s=120,
        validation_init_timeout_s=30,
        validation_collective_timeout_s=30,
    )
    ev.update(extra)
    return ev


def _checks(result: Any, host: str) -> dict[str, dict[str, Any]]:
    return result.checks(host)


def test_one_host_four_ranks_passes(fleet_factory, tmp_path: Path, record_property) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    host = fleet.hosts[0].name
    t0 = time.monotonic()
    res = run_playbook(
        fleet, "validate.yml", _vars(fleet, gpu_stack_validation_nproc_per_node=4), tmp=tmp_path
    )
    wall = time.monotonic() - t0
    assert res.rc == 0, res.output[-5000:]
    checks = _checks(res, host)
    assert checks["validation.allreduce"]["status"] == "pass", checks
    assert checks["validation.ddp"]["status"] == "pass", checks
    assert checks["validation.multinode"]["status"] == "skip", checks
    node = res.hosts[host].validation
    record_property("validation_program_s", node["elapsed_s"])
    record_property("validate_playbook_s", round(wall, 1))
    print(f"lab validation: program {node['elapsed_s']} s, playbook {wall:.1f} s")
    assert node["status"] == "pass"
    assert node["backend"] == "gloo" and node["world_size"] == 4
    # the simulated GPUs are reported (from the GPU facts: no driver on a fresh host), but the CPU
    # row applies, and says so
    assert len(node["gpu_names"]) == 8 and "H100" in node["gpu_names"][0], node["gpu_names"]
    assert node["topology"]["interconnect"] == "nvswitch"
    assert node["topology"]["facts"]["nvswitch_count"] > 0
    assert node["thresholds"]["row"] == "cpu-gloo"
    assert "GPU thresholds not applicable" in node["thresholds"]["note"]
    # measured numbers are in the result
    busbw = node["allreduce"]["judged_busbw_gbps"]
    assert busbw > node["thresholds"]["allreduce_busbw_gbps"]
    assert checks["validation.allreduce"]["actual"]["busbw_gbps"] == busbw
    summary = node["ddp"]["summary"]
    assert summary["params_identical"] is True
    assert summary["loss_last"] < summary["loss_first"]
    assert set(summary["samples_per_s_per_rank"]) == {"0", "1", "2", "3"}
    assert summary["scaling_efficiency"] is not None
    assert node["versions"]["torch"].startswith("2.13.0")
    # the program ran well inside its outer limit and left nothing behind
    assert node["elapsed_s"] < 120
    left = fleet.run(host, "ls -d /tmp/provision-validate.* 2>/dev/null | wc -l")
    assert left.stdout.strip() == "0", left


def test_two_hosts_two_ranks_each_across_network(fleet_factory, tmp_path: Path) -> None:
    fleet = fleet_factory(2, profiles=("h100-sxm-8", "h100-sxm-8"))
    res = run_playbook(
        fleet,
        "validate.yml",
        _vars(
            fleet,
            gpu_stack_validation_nproc_per_node=2,
            gpu_stack_validation_network_interface="lo",
        ),
        tmp=tmp_path,
    )
    assert res.rc == 0, res.output[-5000:]
    hosts = [h.name for h in fleet.hosts]
    for rank, host in enumerate(hosts):
        checks = _checks(res, host)
        assert checks["validation.multinode"]["status"] == "pass", checks
        assert checks["validation.allreduce"]["status"] == "pass", checks
        assert checks["validation.ddp"]["status"] == "pass", checks
        node = res.hosts[host].validation
        assert node["nnodes"] == 2 and node["world_size"] == 4 and node["node_rank"] == rank
        assert node["gloo_env"].get("GLOO_SOCKET_IFNAME") == "lo"
        # the DDP per-rank numbers span both hosts
        assert len(set(node["ddp"]["summary"]["hosts"].values())) == 2


def test_check_mode_validates_only_when_asked_and_changes_nothing(
    fleet_factory, tmp_path: Path
) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    host = fleet.hosts[0].name
    ev = _vars(fleet, gpu_stack_validation_nproc_per_node=2)
    # check.yml (the nightly read-only run): no validation unless the variable is given
    plain = dict(ev)
    del plain["gpu_stack_validation_enabled"]
    night = run_playbook(fleet, "check.yml", plain, check=True, tmp=tmp_path / "night")
    assert not night.hosts[host].validation
    assert not [c for c in night.checks(host) if c.startswith("validation.")]
    # validate.yml, turned off: every validation check skips
    off = run_playbook(
        fleet,
        "validate.yml",
        dict(ev, gpu_stack_validation_enabled=False),
        check=True,
        tmp=tmp_path / "off",
    )
    assert off.rc == 0, off.output[-3000:]
    assert {c["status"] for c in _checks(off, host).values()} == {"skip"}
    assert not off.hosts[host].validation

    # validate.yml under --check (the role default: on): the job runs and changes nothing
    on = run_playbook(fleet, "validate.yml", plain, check=True, tmp=tmp_path / "on")
    assert on.rc == 0, on.output[-3000:]
    assert on.changed(host) == 0
    checks = _checks(on, host)
    assert checks["validation.allreduce"]["status"] == "pass", checks
    assert checks["validation.ddp"]["status"] == "pass", checks
    assert on.hosts[host].validation["world_size"] == 2

    # no torch where validation_python points: the host fails with checks that say why
    ev_broken = dict(
        ev, gpu_stack_validation_enabled=True, validation_python="/opt/none/bin/python"
    )
    broken = run_playbook(fleet, "validate.yml", ev_broken, tmp=tmp_path / "broken")
    assert broken.rc != 0
    checks = _checks(broken, host)
    assert checks["validation.allreduce"]["status"] == "fail"
    assert "validation could not run" in checks["validation.allreduce"]["message"]
    assert "/opt/none/bin/python" in checks["validation.allreduce"]["remediation"]


def test_provision_validate_writes_numbers_into_report(fleet_factory, tmp_path: Path) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    host = fleet.hosts[0].name
    report = tmp_path / "report"
    provision = Path(sys.executable).parent / "provision"
    proc = subprocess.run(
        [
            str(provision),
            "validate",
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
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((report / "report.json").read_text(encoding="utf-8"))
    h = data["hosts"][host]
    assert h["status"] == "ok"
    checks = {c["id"]: c for c in h["checks"]}
    assert checks["validation.allreduce"]["status"] == "pass"
    assert checks["validation.allreduce"]["actual"]["busbw_gbps"] > 0
    assert checks["validation.ddp"]["status"] == "pass"
    val = h["validation"]
    assert val["world_size"] == 2 and val["allreduce"]["judged_busbw_gbps"] > 0
    assert val["ddp"]["summary"]["scaling_efficiency"] is not None


def test_stalled_rank_on_second_host_is_named_from_both_hosts(
    fleet_factory, tmp_path: Path
) -> None:
    fleet = fleet_factory(2, profiles=("h100-sxm-8", "h100-sxm-8"))
    second = fleet.hosts[1].name
    hostname = fleet.run(second, "hostname").stdout.strip()
    res = run_playbook(
        fleet,
        "validate.yml",
        _vars(
            fleet,
            gpu_stack_validation_nproc_per_node=2,
            validation_fault="stall:rank=3",
            validation_collective_timeout_s=10,
            gpu_stack_validation_timeout_s=90,
        ),
        tmp=tmp_path,
    )
    assert res.rc != 0
    for h in fleet.hosts:
        checks = _checks(res, h.name)
        assert checks["validation.allreduce"]["status"] == "fail", checks
        assert checks["validation.multinode"]["status"] == "fail", checks
        assert f"rank 3 on host {hostname}" in checks["validation.allreduce"]["message"], (
            h.name,
            checks["validation.allreduce"]["message"],
        )
        assert "hang" in checks["validation.allreduce"]["message"]
        node = res.hosts[h.name].validation
        # failed by the collective watchdog (10 s), long before the outer 90 s limit
        assert node["torchrun_rc"] not in (124, 137), node["torchrun_rc"]
        assert node["elapsed_s"] < 90
