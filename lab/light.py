"""Light hosts: many SSH targets without a systemd boot, to measure the controller at fleet scale.

A light host is sshd and nothing else, in its own mount, UTS and PID namespace, chrooted into an
overlay whose lower layers are the lab's read-only base (the same layers every host of the fleet,
and every full lab host, shares on disk and in the page cache); its upper directory holds only what
differs per host (hostname, listen address, host key, GPU description). It has the lab's simulated
`lspci` and `nvidia-smi` (`/usr/bin/nvidia-smi`, from lab/payload/nvidia_smi.py, with the module
"loaded" through the description's `driver: loaded`), sudo and the base's python3, so `provision
check` runs its real play against it over real SSH. There is no systemd: `systemctl` inside answers
"System has not been booted with systemd", and the checks of services report what such a host does.
What a light host is for: the controller's CPU, memory, wall time and fan-out against 200+ hosts on
a small machine (bench P7); what the roles do to a host is the full lab's job (lab/fleet.py).

Each host costs one sshd listener (about 4 MB resident, most of it shared pages) and a few mounts;
hosts are started together and ready when their sshd accepts a connection.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from lab import alloc, cgroups, payload
from lab import personality as personality_mod
from lab.base import ADMIN_USER, Base
from lab.fleet import _exit_on_sigterm, stack_yaml
from lab.hosts import Host, HostRuntime, RunResult
from lab.profiles import load_profile
from lab.util import LabError, clean_env, remove_tree, unmount_all

MAX_LIGHT_HOSTS = 1000
NVIDIA_SMI = "/usr/bin/nvidia-smi"
DRIVER_VERSION = "580.95.05"  # the lab stack's branch 580, newest build (lab/fleet.py stack_yaml)

# runs as root in the new namespaces: pid 1 of its PID namespace ends up being sshd
INNER = r"""
set -eu
m=$1; name=$2
hostname "$name"
mount --make-rprivate /
mount -t proc proc "$m/proc"
mount -t sysfs -o ro sysfs "$m/sys" 2>/dev/null || mount --rbind -o ro /sys "$m/sys"
mount -t tmpfs -o mode=755,size=1m tmpfs "$m/dev"
for d in null zero full random urandom tty; do
  touch "$m/dev/$d"; mount --bind "/dev/$d" "$m/dev/$d"
done
mkdir -p "$m/dev/pts" "$m/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$m/dev/pts"
ln -s pts/ptmx "$m/dev/ptmx"
ln -s /proc/self/fd "$m/dev/fd"
mount -t tmpfs -o mode=1777 tmpfs "$m/dev/shm"
mount -t tmpfs -o mode=755 tmpfs "$m/run"
mkdir -p "$m/run/sshd" "$m/run/lock"
mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
exec chroot "$m" /usr/sbin/sshd -D -e
"""

# joins the host's cgroups, then leaves for the namespaces
OUTER = r"""
set -u
inner=$1; m=$2; name=$3; shift 3
for cg in "$@"; do mkdir -p "$cg" && echo $$ > "$cg/cgroup.procs"; done
exec unshare --mount --uts --pid --fork -- /bin/sh -c "$inner" light-host "$m" "$name"
"""

_LIVE: dict[str, LightFleet] = {}


class LightFleet:
    """`LightFleet.create(lab_path, base, n)`: n light hosts, inventory, stack, known_hosts."""

    def __init__(
        self, fleet_id: str, path: Path, lab_path: Path, hosts: list[Host], personality: str
    ) -> None:
        self.id = fleet_id
        self.dir = path
        self.lab_path = lab_path
        self.hosts = hosts
        self.personality = personality
        self._rt = {h.name: HostRuntime(h) for h in hosts}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.destroyed = False

    @classmethod
    def create(
        cls,
        lab_path: Path,
        base: Base,
        n: int,
        profiles: Sequence[str] = ("h100-sxm-8",),
        *,
        repo_url: str = "http://127.0.0.1:9/nvidia",
        wheels_url: str = "http://127.0.0.1:9/wheels/",
        wheel_hashes: Sequence[str] = (),
        timeout: float = 300.0,
    ) -> LightFleet:
        """Create and start n light hosts (profiles[i], the last repeating, is host i's GPU
        profile); returns when every sshd accepts connections. The URLs only fill the stack file:
        a check never fetches from them."""
        if not 1 <= n <= MAX_LIGHT_HOSTS:
            raise LabError(f"a light fleet has 1 to {MAX_LIGHT_HOSTS} hosts, not {n}")
        if not profiles:
            raise LabError("at least one GPU profile is needed")
        for p in profiles:
            load_profile(p)
        fleet_dir = lab_path / "light" / f"l{os.getpid()}-{time.time_ns() % 10**9}"
        fleet_id, addresses = alloc.allocate(lab_path, fleet_dir, n)
        width = max(3, len(str(n)))
        hosts = [
            Host(
                name=f"light{i + 1:0{width}d}",
                address=addr,
                machine=f"pl{fleet_id}-l{i + 1}",
                dir=fleet_dir / "hosts" / f"l{i + 1}",
                profile=profiles[min(i, len(profiles) - 1)],
                user=ADMIN_USER,
                key=base.key,
            )
            for i, addr in enumerate(addresses)
        ]
        fleet = cls(fleet_id, fleet_dir, lab_path, hosts, base.personality or "ubuntu2204")
        _LIVE[fleet_id] = fleet
        _exit_on_sigterm()  # SIGTERM becomes an exit, so atexit tears the hosts down
        try:
            smi = payload.read("nvidia_smi.py").replace("@DRIVER_VERSION@", DRIVER_VERSION)
            files = {NVIDIA_SMI: smi.encode()}
            known = []
            for h in hosts:
                rt = fleet._rt[h.name]
                etc_hosts = f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{h.address}\t{h.name}\n"
                known.append(rt.prepare(base.lowerdir, etc_hosts, files))
                (h.merged / NVIDIA_SMI.lstrip("/")).chmod(0o755)
                rt.write_description(h.profile, driver="loaded")
            fleet.known_hosts.write_text("\n".join(known) + "\n", encoding="utf-8")
            fleet.inventory_path.write_text(
                f"# provision lab light fleet {fleet_id} (generated)\n"
                + yaml.safe_dump(fleet.inventory(), sort_keys=False, default_flow_style=False),
                encoding="utf-8",
            )
            fleet.stack_path.write_text(
                stack_yaml(repo_url, wheels_url, wheel_hashes), encoding="utf-8"
            )
            fleet.start()
            fleet.wait_ready(timeout)
        except BaseException:
            fleet.destroy()
            raise
        return fleet

    # ----------------------------------------------------------------- files
    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yml"

    @property
    def stack_path(self) -> Path:
        return self.dir / "stack.yml"

    def inventory(self) -> dict[str, Any]:
        return {
            "all": {
                "vars": {
                    "ansible_user": ADMIN_USER,
                    "ansible_become": True,
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "ansible_ssh_private_key_file": str(self.hosts[0].key),
                    "ansible_ssh_common_args": (
                        f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes"
                    ),
                    "gpu_stack_kernel_modules": False,
                    "gpu_stack_kernel_headers": True,
                    "lab_personality": self.personality,
                    "lab_torch_venv": personality_mod.get(self.personality).torch,
                    "lab_light_host": True,
                },
                "children": {
                    "gpu_servers": {
                        "hosts": {
                            h.name: {"ansible_host": h.address, "lab_gpu_profile": h.profile}
                            for h in self.hosts
                        }
                    }
                },
            }
        }

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        for h in self.hosts:
            log = h.console_log.open("ab")
            cgs = [str(c) for c in cgroups.host_cgroups(h.machine)]
            self._procs[h.name] = subprocess.Popen(
                ["bash", "-c", OUTER, "light-host", INNER, str(h.merged), h.name, *cgs],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=clean_env(),
                start_new_session=True,
            )
            log.close()

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until every host's sshd accepts a TCP connection."""
        deadline = time.monotonic() + timeout
        pending = list(self.hosts)
        while pending:
            still: list[Host] = []
            for h in pending:
                proc = self._procs.get(h.name)
                if proc is not None and proc.poll() is not None:
                    raise LabError(
                        f"light host {h.name} ({h.address}): exited with {proc.returncode}; "
                        f"log:\n{self._rt[h.name].console_tail()}"
                    )
                if not _accepts(h.address):
                    still.append(h)
            pending = still
            if pending:
                if time.monotonic() > deadline:
                    names = ", ".join(h.name for h in pending[:10])
                    raise LabError(
                        f"light hosts not listening on port 22 after {timeout:.0f}s: {names} "
                        f"({len(pending)} in all); first log:\n"
                        f"{self._rt[pending[0].name].console_tail()}"
                    )
                time.sleep(0.2)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise LabError(f"no light host {name!r} in fleet {self.id}")

    def run(self, name: str, command: str, timeout: float = 60.0) -> RunResult:
        """Run a command on a light host over SSH as the admin user."""
        return self._rt[name].run_ssh(command, self.known_hosts, timeout=timeout)

    def process_ids(self) -> list[int]:
        """The hosts' top processes (each host's processes descend from one of them)."""
        return [p.pid for p in self._procs.values()]

    def cgroup_procs_files(self) -> list[Path]:
        """Each host's cgroup2 `cgroup.procs` (without systemd inside, a host's processes stay in
        its one cgroup)."""
        return [
            cg / "cgroup.procs"
            for h in self.hosts
            for cg in cgroups.host_cgroups(h.machine)
            if (cg / "cpu.stat").exists()
        ]

    def cgroup_usage_usec(self) -> int:
        """CPU used by every light host so far (sshd, sudo, modules), from their cgroup2."""
        total = 0
        for h in self.hosts:
            for cg in cgroups.host_cgroups(h.machine):
                with contextlib.suppress(OSError, ValueError):
                    for line in (cg / "cpu.stat").read_text(encoding="utf-8").splitlines():
                        if line.startswith("usage_usec "):
                            total += int(line.split()[1])
        return total

    def destroy(self) -> None:
        """Kill every host's processes and remove mounts, cgroups and files. Safe to call twice."""
        if self.destroyed:
            return
        errors: list[str] = []
        for proc in self._procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

        def one(h: Host) -> None:
            try:
                cgroups.kill_and_remove(h.machine)
                unmount_all(h.dir)
            except Exception as exc:  # collected and raised below
                errors.append(f"{h.name}: {exc}")

        threads = [threading.Thread(target=one, args=(h,)) for h in self.hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not errors:
            remove_tree(self.dir)
        alloc.release(self.lab_path, self.id)
        _LIVE.pop(self.id, None)
        self.destroyed = True
        if errors:
            raise LabError("light fleet teardown incomplete: " + "; ".join(errors[:5]))


def _accepts(address: str, port: int = 22) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        try:
            sock.connect((address, port))
        except OSError:
            return False
    return True


@atexit.register
def _destroy_live() -> None:
    for fleet in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            fleet.destroy()
