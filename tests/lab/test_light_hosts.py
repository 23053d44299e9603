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
        # every host answered Ansible: none needed the SSH preflight's diagnosis
        assert "preflight" not in entry, (name, entry["preflight"])
        want = WANT[profiles[name]]
        failing = [(c["id"], c["message"]) for c in entry["checks"] if c["status"] == "fail"]
        assert entry["status"] == want, (name, entry["status"], failing)
        ids = {c["id"] for c in entry["checks"]}
        assert {"driver.version", "cuda.toolkit"} <= ids, (name, sorted(ids))
    gpus = {name: entry["facts"]["gpu_count"] for name, entry in hosts.items()}
    assert sorted(gpus.values()) == [0, 4, 8], gpus
    assert report["summary"]["unreachable"] == 0, report["summary"]
    assert "preflight " not in proc.stderr, proc.stderr[-2000:]


def test_check_diagnoses_only_the_hosts_ansible_cannot_reach(lab: Any, tmp_path: Path) -> None:
    """`provision check` runs the SSH preflight only where Ansible failed, and its diagnosis is
    the host's entry: a changed host key (ssh.hostkey, with the key's fingerprint), a port where
    no sshd listens (ssh.connect), a login without passwordless sudo (Ansible's probe task fails
    before it reports: ssh.sudo); the host Ansible reached is judged by its probe and not probed
    twice."""
    import yaml  # noqa: PLC0415

    fleet = lab.create_light_fleet(3, ["rtx4090-4", "nogpu"])  # drift: no stack installed
    try:
        good, moved, nosudo = fleet.hosts
        assert fleet.run(nosudo.name, "sudo -n rm /etc/sudoers.d/gpuadmin").ok
        assert not fleet.run(nosudo.name, "sudo -n true").ok
        known = tmp_path / "known_hosts"
        other = next(x for x in fleet.known_hosts.read_text(encoding="utf-8").splitlines()
                     if x.split()[0].split(",")[0] == good.address)
        lines = [x for x in fleet.known_hosts.read_text(encoding="utf-8").splitlines()
                 if x.split()[0].split(",")[0] != moved.address]
        # the moved host's entry holds another host's key: "host key changed"
        lines.append(" ".join([f"{moved.address},{moved.name}", *other.split()[1:]]))
        known.write_text("\n".join(lines) + "\n", encoding="utf-8")
        inventory = yaml.safe_load(fleet.inventory_path.read_text(encoding="utf-8"))
        common = inventory["all"]["vars"]["ansible_ssh_common_args"]
        inventory["all"]["vars"]["ansible_ssh_common_args"] = common.replace(
            str(fleet.known_hosts), str(known)
        )
        hosts = inventory["all"]["children"]["gpu_servers"]["hosts"]
        hosts["ghost"] = {**hosts[good.name], "ansible_port": 2}  # nothing listens there
        inv_path = tmp_path / "inventory.yml"
        inv_path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
        proc, report = provision_cli(
            tmp_path, "check", "-i", str(inv_path), "--stack", str(fleet.stack_path),
            "--known-hosts", str(known), report="diagnosed",
        )
    finally:
        fleet.destroy()
    # the host without sudo failed (1), which outranks the unreachable ones (3) and the judged
    # host's drift (5)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    entries = report["hosts"]
    assert sorted(entries) == sorted([good.name, moved.name, nosudo.name, "ghost"])
    assert "preflight" not in entries[good.name]
    assert entries[good.name]["status"] == "drift", entries[good.name]["message"]
    assert {"driver.version", "health.gpu_count"} <= {c["id"] for c in entries[good.name]["checks"]}
    assert f"preflight {good.name}" not in proc.stderr
    key = entries[moved.name]
    assert key["status"] == "unreachable"
    assert [c["id"] for c in key["checks"]] == ["ssh.hostkey"], key["checks"]
    assert "SHA256:" in key["checks"][0]["message"], key["checks"][0]
    assert key["preflight"]["stage"] == "hostkey"
    ghost = entries["ghost"]
    assert ghost["status"] == "unreachable"
    assert [c["id"] for c in ghost["checks"]] == ["ssh.connect"], ghost["checks"]
    assert "refused" in ghost["checks"][0]["message"].lower(), ghost["checks"][0]
    sudo = entries[nosudo.name]
    assert sudo["status"] == "failed", sudo
    assert [c["id"] for c in sudo["checks"]] == ["ssh.sudo"], sudo["checks"]
    assert "sudo -n true" in sudo["checks"][0]["message"], sudo["checks"][0]
