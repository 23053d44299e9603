"""A fleet: 1-16 booted lab hosts plus the files a `provision` run needs (inventory, stack,
known_hosts). Torn down on destroy(), at interpreter exit, and by `python -m lab down`."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from lab import alloc
from lab import personality as personality_mod
from lab.base import ADMIN_USER, Base
from lab.hosts import Host, HostRuntime, RunResult
from lab.profiles import load_profile
from lab.repo import REPO_SUBDIR, epel_urls
from lab.util import LabError, remove_tree

MAX_HOSTS = 16
_LIVE: dict[str, Fleet] = {}  # fleets owned by this process, destroyed at exit


def stack_yaml(repo_url: str, wheels_url: str, wheel_hashes: Sequence[str] = ()) -> str:
    """The lab's stack file (schema 1) with mirrors pointing at the lab. The lab's mirror models
    NVIDIA's real one, so it declares nothing beyond it (`nvidia_repo_carries: []`)."""
    return f"""\
schema: 1
name: lab
driver: {{branch: "580", version: null, flavor: proprietary, fabricmanager: auto}}
cuda: {{version: "12.1"}}
cudnn: {{version: "8.9.2.26"}}
nccl: {{version: "2.18.3"}}
pytorch: {{version: "2.13.0", build: cpu, venv: /opt/pytorch, torchvision: null, torchaudio: null}}
mirrors:
  nvidia_repo: {repo_url}
  nvidia_repo_carries: []
  pytorch_index: null
  pytorch_find_links: {wheels_url}
  pytorch_hashes: {json.dumps(list(wheel_hashes))}
validation: {{backend: auto, nproc_per_node: 2, timeout_s: 120}}
"""


class Fleet:
    """Booted hosts with an inventory. Create with `Fleet.create(...)` (or `Lab.create_fleet`)."""

    def __init__(
        self,
        *,
        fleet_id: str,
        path: Path,
        lab_path: Path,
        hosts: list[Host],
        owner_pid: int | None,
        repo_url: str | None,
        wheels_url: str | None,
        personality: str = personality_mod.DEFAULT,
        repo_key_fingerprints: Sequence[str] = (),
    ) -> None:
        self.id = fleet_id
        self.repo_key_fingerprints = list(repo_key_fingerprints)
        self.personality = personality
        self.dir = path
        self.lab_path = lab_path
        self.hosts = hosts
        self.owner_pid = owner_pid
        self.repo_url = repo_url
        self.wheels_url = wheels_url
        self._rt = {h.name: HostRuntime(h) for h in hosts}
        self.destroyed = False

    # ----------------------------------------------------------------- creation
    @classmethod
    def create(
        cls,
        lab_path: Path,
        base: Base,
        n: int,
        profiles: Sequence[str] = ("h100-sxm-8",),
        *,
        repo_url: str | None = None,
        wheels_url: str | None = None,
        path: Path | None = None,
        detached: bool = False,
        boot: bool = True,
        archive_url: str | None = None,
        archive_key: bytes | None = None,
        repo_key_fingerprints: Sequence[str] = (),
        wheel_hashes: Sequence[str] = (),
    ) -> Fleet:
        """Create and boot n hosts; profiles[i] (the last one repeats) is host i's GPU profile.
        The base's personality decides the OS; archive_url/archive_key (the lab's slice of the
        distribution's archive) become each host's /etc/apt/sources.list and trusted key."""
        if not 1 <= n <= MAX_HOSTS:
            raise LabError(f"a fleet has 1 to {MAX_HOSTS} hosts, not {n}")
        if not profiles:
            raise LabError("at least one GPU profile is needed")
        for p in profiles:
            load_profile(p)
        fleet_dir = path or lab_path / "fleets" / f"f{os.getpid()}-{time.time_ns() % 10**9}"
        if (fleet_dir / "fleet.json").exists():
            raise LabError(f"a fleet already exists in {fleet_dir}; destroy it first")
        fleet_id, addresses = alloc.allocate(lab_path, fleet_dir, n)
        hosts = [
            Host(
                name=f"gpu{i + 1:02d}",
                address=addr,
                machine=f"pl{fleet_id}-gpu{i + 1:02d}",
                dir=fleet_dir / "hosts" / f"gpu{i + 1:02d}",
                profile=profiles[min(i, len(profiles) - 1)],
                user=ADMIN_USER,
                key=base.key,
            )
            for i, addr in enumerate(addresses)
        ]
        fleet = cls(
            fleet_id=fleet_id,
            path=fleet_dir,
            lab_path=lab_path,
            hosts=hosts,
            owner_pid=None if detached else os.getpid(),
            repo_url=repo_url,
            wheels_url=wheels_url,
            personality=base.personality or personality_mod.DEFAULT,
            repo_key_fingerprints=repo_key_fingerprints,
        )
        if not detached:
            _LIVE[fleet_id] = fleet
            _exit_on_sigterm()
        try:
            fleet._save()
            etc_hosts = (
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                + "".join(f"{h.address}\t{h.name}\n" for h in hosts)
            )
            files = host_apt_files(fleet.personality, archive_url, archive_key)
            known = [fleet._rt[h.name].prepare(base.lowerdir, etc_hosts, files) for h in hosts]
            fleet.known_hosts.write_text("\n".join(known) + "\n", encoding="utf-8")
            fleet._write_inventory()
            fleet.extra_vars_path.write_text(
                "# the lab cannot load kernel modules: roles skip modprobe/initramfs; the headers\n"
                "# are installed all the same (the lab's DKMS builds only where they are)\n"
                + yaml.safe_dump(fleet.lab_vars(), sort_keys=False, default_flow_style=False),
                encoding="utf-8",
            )
            if repo_url and wheels_url:
                fleet.stack_path.write_text(
                    stack_yaml(repo_url, wheels_url, wheel_hashes), encoding="utf-8"
                )
            if boot:
                fleet.boot()
        except BaseException:
            fleet.destroy()
            raise
        return fleet

    @classmethod
    def load(cls, path: Path) -> Fleet:
        """A fleet created by another process (for `lab down` / `lab status`)."""
        data = json.loads((path / "fleet.json").read_text(encoding="utf-8"))
        return cls(
            fleet_id=data["id"],
            path=path,
            lab_path=Path(data["lab"]),
            hosts=[Host.from_json(h) for h in data["hosts"]],
            owner_pid=data.get("owner_pid"),
            repo_url=data.get("repo_url"),
            wheels_url=data.get("wheels_url"),
            personality=data.get("personality", personality_mod.DEFAULT),
            repo_key_fingerprints=data.get("repo_key_fingerprints", []),
        )

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "fleet.json").write_text(
            json.dumps(
                {
                    "id": self.id,
                    "lab": str(self.lab_path),
                    "owner_pid": self.owner_pid,
                    "repo_url": self.repo_url,
                    "wheels_url": self.wheels_url,
                    "personality": self.personality,
                    "repo_key_fingerprints": self.repo_key_fingerprints,
                    "hosts": [h.to_json() for h in self.hosts],
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )

    # ----------------------------------------------------------------- files
    @property
    def distro_arch(self) -> str:
        """The NVIDIA repository directory of this fleet's personality (e.g. ubuntu2204/x86_64)."""
        return personality_mod.get(self.personality).nvidia_repo

    @property
    def keyring_url(self) -> str:
        """The cuda-keyring .deb of this fleet's NVIDIA repository on the lab server."""
        return f"{self.repo_url}/{self.distro_arch}/cuda-keyring_1.1-1_all.deb"

    @property
    def repo_file_url(self) -> str:
        """EL: the .repo file of this fleet's NVIDIA repository (cuda-rhel9.repo)."""
        return f"{self.repo_url}/{self.distro_arch}/cuda-{self.distro_arch.split('/')[0]}.repo"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yml"

    @property
    def stack_path(self) -> Path:
        return self.dir / "stack.yml"

    @property
    def extra_vars_path(self) -> Path:
        """Variables every lab run needs (for `-e @file` with `--host`; the inventory has them)."""
        return self.dir / "lab-vars.yml"

    def lab_vars(self) -> dict[str, Any]:
        """Variables every run against this fleet needs: the lab cannot load kernel modules (the
        headers are installed all the same: the lab's DKMS builds only where they are); EL: EPEL
        from the lab's server instead of dl.fedoraproject.org."""
        out: dict[str, Any] = {"gpu_stack_kernel_modules": False, "gpu_stack_kernel_headers": True}
        if self.repo_key_fingerprints:
            # the lab's NVIDIA repositories are signed with the lab's own key (a re-signed mirror,
            # as far as the roles can tell): the lab's cuda-keyring holds that key (repo.key)
            out["gpu_stack_repo_key_fingerprints"] = list(self.repo_key_fingerprints)
        suffix = "/" + REPO_SUBDIR
        if personality_mod.get(self.personality).package_manager == "dnf" and self.repo_url:
            base = self.repo_url[: -len(suffix)] if self.repo_url.endswith(suffix) else ""
            if base:
                release, key = epel_urls(base)
                out["nvidia_repo_el_epel_release_url"] = release
                out["nvidia_repo_el_epel_key_url"] = key
        return out

    def inventory(self) -> dict[str, Any]:
        key = self.hosts[0].key
        return {
            "all": {
                "vars": {
                    "ansible_user": ADMIN_USER,
                    "ansible_become": True,
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "ansible_ssh_private_key_file": str(key),
                    "ansible_ssh_common_args": (
                        f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes"
                    ),
                    **self.lab_vars(),
                    "lab_personality": self.personality,
                    "lab_torch_venv": personality_mod.get(self.personality).torch,
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

    def _write_inventory(self) -> None:
        text = (
            "# provision lab fleet "
            + self.id
            + " (generated)\n"
            + yaml.safe_dump(self.inventory(), sort_keys=False, default_flow_style=False)
        )
        self.inventory_path.write_text(text, encoding="utf-8")

    # ----------------------------------------------------------------- lifecycle
    def boot(self, timeout: float = 180.0) -> dict[str, str]:
        """Start every host and wait until each is ready; returns host -> system state."""
        for h in self.hosts:
            self._rt[h.name].start()
        with ThreadPoolExecutor(max_workers=len(self.hosts)) as pool:
            states = list(pool.map(lambda h: self._rt[h.name].wait_ready(timeout), self.hosts))
        return {h.name: s for h, s in zip(self.hosts, states, strict=True)}

    def host(self, name: str | Host) -> Host:
        key = name.name if isinstance(name, Host) else name
        for h in self.hosts:
            if key in (h.name, h.address, h.machine):
                return h
        raise KeyError(f"no host {key!r} in fleet {self.id}")

    def runtime(self, host: str | Host) -> HostRuntime:
        return self._rt[self.host(host).name]

    def run(
        self,
        host: str | Host,
        command: str,
        *,
        via: str = "nsenter",
        timeout: float | None = 120.0,
        user: str | None = None,
    ) -> RunResult:
        """Run a shell command on a host: via nsenter (as root) or via ssh (as the admin user)."""
        rt = self.runtime(host)
        if via == "ssh":
            return rt.run_ssh(command, self.known_hosts, timeout=timeout, user=user)
        if via != "nsenter":
            raise ValueError(f"via must be 'nsenter' or 'ssh', not {via!r}")
        return rt.run_nsenter(command, timeout=timeout)

    def boot_id(self, host: str | Host) -> str:
        return self.runtime(host).boot_id()

    def reboot(self, host: str | Host, timeout: float = 120.0) -> str:
        return self.runtime(host).reboot(timeout)

    def wait_ready(self, host: str | Host, timeout: float = 120.0) -> str:
        return self.runtime(host).wait_ready(timeout)

    def set_profile(self, host: str | Host, profile: str, driver: str = "auto") -> None:
        """Change a host's simulated GPUs at runtime (lspci and nvidia-smi read it each call)."""
        load_profile(profile)
        self.runtime(host).write_description(profile, driver)
        self._save()
        self._write_inventory()

    def set_secure_boot(self, host: str | Host, enabled: bool | None) -> None:
        """Simulate Secure Boot on, off, or not reported (None) through `mokutil --sb-state`."""
        self.runtime(host).write_secure_boot(enabled)

    def state(self) -> dict[str, str]:
        """host -> 'running'/'degraded'/... or 'down'."""
        out: dict[str, str] = {}
        for h in self.hosts:
            rt = self._rt[h.name]
            if rt.init_pid() is None:
                out[h.name] = "down"
            else:
                out[h.name] = rt.run_nsenter(
                    "systemctl is-system-running", timeout=10
                ).stdout.strip()
        return out

    def destroy(self) -> None:
        """Stop every host and remove processes, mounts, cgroups and files. Safe to call twice."""
        if self.destroyed:
            return
        errors: list[str] = []
        for rt in self._rt.values():
            rt.stop()
        # plain threads: this also runs from atexit, when executors refuse new work
        results: dict[str, Exception | None] = {}
        threads = [
            threading.Thread(target=lambda r=rt: results.__setitem__(r.host.name, _stop_one(r)))
            for rt in self._rt.values()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors += [f"{name}: {exc}" for name, exc in results.items() if exc]
        for rt in self._rt.values():
            try:
                rt.remove()
            except LabError as exc:
                errors.append(f"{rt.host.name}: {exc}")
        if not errors:
            remove_tree(self.dir)
        alloc.release(self.lab_path, self.id)
        _LIVE.pop(self.id, None)
        self.destroyed = True
        if errors:
            raise LabError("teardown incomplete: " + "; ".join(errors))


ARCHIVE_KEY_FILE = "/etc/apt/trusted.gpg.d/provision-lab-archive.gpg"


def host_apt_files(
    personality: str, archive_url: str | None, archive_key: bytes | None
) -> dict[str, bytes]:
    """A fresh host's apt sources: the distribution archive (the lab's slice of it), as a cloud
    image has it (Ubuntu: main restricted universe multiverse; Debian: main)."""
    if not archive_url or archive_key is None:
        return {}
    p = personality_mod.get(personality)
    if p.package_manager == "dnf":  # archive_key: the ASCII-armored key
        sections = []
        for repo_id in ("BaseOS", "AppStream", "CRB", "extras"):
            enabled = 1 if repo_id in p.components or repo_id.lower() in p.components else 0
            sections.append(
                f"[{repo_id.lower()}]\nname=Rocky Linux $releasever - {repo_id}\n"
                f"baseurl={archive_url}/$releasever/{repo_id}/$basearch/os/\n"
                f"gpgcheck=1\nenabled={enabled}\n"
                "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9\n"
            )
        return {
            "/etc/yum.repos.d/rocky.repo": "\n".join(sections).encode(),
            "/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9": archive_key,
        }
    line = f"deb {archive_url} {p.archive_suite} {' '.join(p.components)}\n"
    return {"/etc/apt/sources.list": line.encode(), ARCHIVE_KEY_FILE: archive_key}


def _stop_one(rt: HostRuntime) -> Exception | None:
    try:
        rt.wait_stopped()
    except Exception as exc:
        return exc
    return None


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into a normal exit (so atexit tears fleets down), if nobody handles it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_exit)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@atexit.register
def _destroy_live_fleets() -> None:
    for fleet in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            fleet.destroy()


def fleets_in(lab_path: Path) -> list[Path]:
    """Fleet directories in a lab (pytest fleets and the `lab up` fleet)."""
    found = [p.parent for p in (lab_path / "fleets").glob("*/fleet.json")]
    if (lab_path / "fleet" / "fleet.json").exists():
        found.append(lab_path / "fleet")
    return found


def owner_alive(fleet: Fleet) -> bool:
    if fleet.owner_pid is None:
        return True  # detached (`lab up`): lives until `lab down`
    return Path(f"/proc/{fleet.owner_pid}").exists()
