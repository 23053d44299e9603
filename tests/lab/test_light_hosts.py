"""Light lab hosts (lab/light.py): sshd in its own namespaces over the shared read-only base, no
systemd; what `make bench` uses to measure `provision check` over 200+ hosts (records.fleet_check,
P7). Kept to three hosts so that it runs on a 2-core CI machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_roles_helpers import fleet_args, provision_cli

from lab import cgroups
from lab.util import mounts_under


def test_light_hosts_answer_ssh_sudo_and_the_simulated_gpus(lab: Any) -> None:
    fleet = lab.create_light_fleet(2, ["h100-sxm-8", "nogpu"])
    try:
        first, second = (h.name for h in fleet.hosts)
        res = fleet.run(first, "hostname; sudo -n id -u; nvidia-smi -L | wc -l")
        assert res.ok, res.stderr
        assert res.stdout.split() == [first, "0", "8"], res.stdout
        # the second host has its own description (no GPU) over the same shared base
        res = fleet.run(second, "nvidia-smi -L")
        assert res.rc == 9 and "couldn't communicate with the NVIDIA driver" in res.stdout, res
        # no systemd: a light host is not a booted system
        res = fleet.run(first, "systemctl is-system-running")
        assert res.stdout.strip() == "offline", res
        # a write on one host is not seen on the other (each has its own upper layer)
        assert fleet.run(first, "sudo -n touch /etc/light-marker").ok
        assert not fleet.run(second, "test -e /etc/light-marker").ok
        lowers = {str(h.dir) for h in fleet.hosts}
        assert all(mounts_under(Path(d)) for d in lowers)
        machines = [h.machine for h in fleet.hosts]
    finally:
        fleet.destroy()
    assert not fleet.dir.exists()
    assert all(not cgroups.pids_in(m) for m in machines)


WANT = {"h100-sxm-8": "failed", "rtx4090-4": "drift", "nogpu": "failed"}


def test_provision_check_runs_against_three_light_hosts(lab: Any, tmp_path: Path) -> None:
    """Every host is reached and judged: preflight ok, the probe's facts (GPUs from the simulated
    nvidia-smi), and the fleet's real state, never unreachable: the GPU hosts run a driver no
    package installed and nothing of the stack (drift: a run would converge them), except that
    the NVSwitch host has no fabric manager running (health.fabric fails: no systemd on a light
    host); the GPU-less one fails preflight.gpu."""
    fleet = lab.create_light_fleet(3, ["h100-sxm-8", "rtx4090-4", "nogpu"])
    profiles = {h.name: h.profile for h in fleet.hosts}
    try:
        proc, report = provision_cli(tmp_path, "check", *fleet_args(fleet), report="light")
    finally:
        fleet.destroy()
    hosts = report["hosts"]
    assert sorted(hosts) == sorted(h.name for h in fleet.hosts), proc.stderr[-2000:]
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    for name, entry in hosts.items():
        assert entry["preflight"]["status"] == "ok", (name, entry["preflight"])
        want = WANT[profiles[name]]
        failing = [(c["id"], c["message"]) for c in entry["checks"] if c["status"] == "fail"]
        assert entry["status"] == want, (name, entry["status"], failing)
        ids = {c["id"] for c in entry["checks"]}
        assert {"driver.version", "cuda.toolkit"} <= ids, (name, sorted(ids))
    gpus = {name: entry["facts"]["gpu_count"] for name, entry in hosts.items()}
    assert sorted(gpus.values()) == [0, 4, 8], gpus
    assert report["summary"]["unreachable"] == 0, report["summary"]
