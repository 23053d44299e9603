"""Lab hosts: boot, SSH with host-key checking and sudo, reboot, runtime GPU profile, teardown."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab import cgroups
from lab.util import mounts_under


def test_host_boots_with_ssh_sudo_and_host_key_checking(fleet_factory, tmp_path):
    fleet = fleet_factory(2, ["h100-sxm-8", "nogpu"])
    assert fleet.state() == {"gpu01": "running", "gpu02": "running"}
    one, two = fleet.hosts
    assert (one.address, two.address) != ("", "") and one.address != two.address

    res = fleet.run("gpu01", "hostname; id -un; sudo -n id -u", via="ssh")
    assert res.rc == 0, res.stderr
    assert res.stdout.split() == ["gpu01", "gpuadmin", "0"]
    # the other host is reachable by name from inside (every /etc/hosts names all hosts)
    res = fleet.run("gpu01", "getent hosts gpu02")
    assert res.stdout.split() == [two.address, "gpu02"]
    # systemd is PID 1 inside, and each host has its own boot id
    assert fleet.run("gpu02", "cat /proc/1/comm").stdout.strip() == "systemd"
    assert fleet.boot_id("gpu01") != fleet.boot_id("gpu02")

    # host key checking is on: an empty known_hosts file is refused
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    res = subprocess.run(
        [
            "ssh",
            "-i",
            str(one.key),
            "-o",
            f"UserKnownHostsFile={empty}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            f"gpuadmin@{one.address}",
            "true",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 255 and "Host key verification failed" in res.stderr
    # key-only: password authentication is not offered
    res = subprocess.run(
        [
            "ssh",
            "-o",
            f"UserKnownHostsFile={fleet.known_hosts}",
            "-o",
            "BatchMode=yes",
            "-o",
            "PubkeyAuthentication=no",
            f"gpuadmin@{one.address}",
            "true",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 255 and "Permission denied" in res.stderr

    inv = yaml.safe_load(fleet.inventory_path.read_text())
    assert inv["all"]["children"]["gpu_servers"]["hosts"]["gpu02"]["ansible_host"] == two.address
    common = inv["all"]["vars"]
    assert f"UserKnownHostsFile={fleet.known_hosts}" in common["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in common["ansible_ssh_common_args"]
    assert common["gpu_stack_kernel_modules"] is False
    stack = yaml.safe_load(fleet.stack_path.read_text())
    assert stack["mirrors"]["nvidia_repo"].endswith("/compute/cuda/repos")
    assert stack["pytorch"] == {
        "version": "2.13.0",
        "build": "cpu",
        "venv": "/opt/pytorch",
        "torchvision": None,
        "torchaudio": None,
    }


def test_reboot_gives_new_boot_id_and_host_returns(fleet_factory):
    fleet = fleet_factory(1)
    before = fleet.boot_id("gpu01")
    fleet.run("gpu01", "echo kept > /var/tmp/marker; mkdir -p /run/x; echo lost > /run/x/marker")
    after = fleet.reboot("gpu01")
    assert after != before
    assert fleet.run("gpu01", "cat /var/tmp/marker").stdout.strip() == "kept"
    assert fleet.run("gpu01", "test -e /run/x/marker").rc == 1  # tmpfs is fresh after a boot
    res = fleet.run("gpu01", "systemctl is-system-running; sudo -n true", via="ssh")
    assert res.rc == 0 and res.stdout.strip() == "running"


def test_reboot_from_inside_over_ssh_comes_back(fleet_factory):
    fleet = fleet_factory(1)
    before = fleet.boot_id("gpu01")
    fleet.run("gpu01", "sudo -n systemctl reboot", via="ssh", timeout=30)
    fleet.wait_ready("gpu01", timeout=60)
    assert fleet.boot_id("gpu01") != before


def test_profile_changes_at_runtime(fleet_factory):
    fleet = fleet_factory(1, ["nogpu"])
    assert fleet.run("gpu01", "lspci -d 10de:").stdout == ""
    assert "python3" in fleet.run("gpu01", "head -1 /usr/local/bin/lspci").stdout
    fleet.set_profile("gpu01", "a100-sxm-8")
    out = fleet.run("gpu01", "lspci -nn -d 10de:20b2").stdout
    assert out.count("NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2]") == 8
    assert fleet.hosts[0].profile == "a100-sxm-8"


def test_torch_venv_is_baked_into_the_base(fleet_factory):
    fleet = fleet_factory(1)
    res = fleet.run(
        "gpu01", "/opt/pytorch/bin/python -c 'import torch; print(torch.__version__)'", timeout=120
    )
    assert res.rc == 0, res.stderr
    assert res.stdout.strip().startswith("2.13.0")


def _running(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_teardown_leaves_no_mounts_processes_or_cgroups(lab):
    fleet = lab.create_fleet(3, ["t4-1"])
    machines = [h.machine for h in fleet.hosts]
    pids = [p for m in machines for p in cgroups.pids_in(m)]
    assert len(pids) >= 3 * 3  # supervisor, nspawn, systemd, sshd ... per host
    assert mounts_under(fleet.dir)
    fleet.destroy()
    assert not fleet.dir.exists()
    assert mounts_under(fleet.dir) == []
    assert all(cgroups.pids_in(m) == [] for m in machines)
    assert not any(p.name in machines for p in cgroups.leftovers())
    alive = [p for p in pids if _running(p)]
    assert alive == []
    fleet.destroy()  # idempotent


# SIGINT is reset to Python's default: a pytest started in the background by a non-interactive
# shell (`cmd &`) inherits SIGINT ignored, and so would this child
OWNER = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from lab import Lab
lab = Lab()
lab.start_repo()
fleet = lab.create_fleet(1, ["t4-1"])
print(fleet.dir, fleet.hosts[0].machine, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_owner_killed_by_signal_still_tears_down(lab, sig):
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline().split()
    assert len(line) == 2, proc.stderr.read() if proc.poll() is not None else line
    fleet_dir, machine = Path(line[0]), line[1]
    assert mounts_under(fleet_dir) and cgroups.pids_in(machine)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert not fleet_dir.exists()
    assert mounts_under(fleet_dir) == []
    assert cgroups.pids_in(machine) == []


def test_real_pip_install_from_the_loopback_wheelhouse(lab, fleet_factory):
    fleet = fleet_factory(1, ["t4-1"])
    res = fleet.run(
        "gpu01",
        "python3 -m venv /opt/fresh && /opt/fresh/bin/pip install -q --disable-pip-version-check "
        f"--no-index --find-links {lab.wheels_url} torch==2.13.0 && "
        "/opt/fresh/bin/python -c 'import torch, torch.distributed as d; "
        "print(torch.__version__, d.is_gloo_available())'",
        timeout=600,
    )
    assert res.rc == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["2.13.0+cpu", "True"]
