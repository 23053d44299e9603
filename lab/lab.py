"""`Lab`: one lab directory's base image, wheelhouse, repository server and fleets."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lab import base as base_mod
from lab import personality as personality_mod
from lab.fleet import Fleet, fleets_in, owner_alive
from lab.light import LightFleet
from lab.repo import Repo, build_repo
from lab.server import ThreadedServer
from lab.util import LabError, LabUnavailable, lab_dir, remove_tree
from lab.wheelhouse import ensure_wheelhouse, hashed_requirements

REQUIRED_TOOLS = (
    "systemd-nspawn",
    "debootstrap",
    "dpkg-deb",
    "apt-ftparchive",
    "gpg",
    "gcc",
    "nsenter",
    "ssh",
    "ssh-keygen",
    "mount",
)


def unavailable_reason() -> str | None:
    """Why this machine cannot run the lab, or None when it can."""
    if os.geteuid() != 0:
        return "the lab needs root (it mounts overlays and boots systemd-nspawn containers)"
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        return (
            "missing tools: " + ", ".join(missing) + " (apt-get install debootstrap "
            "systemd-container apt-utils dpkg-dev gnupg gcc libc6-dev openssh-client)"
        )
    filesystems = Path("/proc/filesystems").read_text(encoding="utf-8")
    if "overlay" not in filesystems.split():
        with contextlib.suppress(OSError):
            subprocess.run(["modprobe", "overlay"], capture_output=True, check=False)
        if "overlay" not in Path("/proc/filesystems").read_text(encoding="utf-8").split():
            return "the kernel has no overlayfs"
    return None


class Lab:
    """A lab directory ($PROVISION_LAB_DIR, default /var/tmp/provision-lab)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.dir = lab_dir(path)
        self._server: ThreadedServer | None = None
        self._serve_root: Path | None = None
        self.repo: Repo | None = None

    def check(self) -> None:
        reason = unavailable_reason()
        if reason:
            raise LabUnavailable(reason)

    def ensure_wheelhouse(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        return ensure_wheelhouse(self.dir)

    def ensure_base(self, log: bool = False, personality: str | None = None) -> base_mod.Base:
        """The base image (and presentation layer) of a personality (default: ubuntu2204, or
        $PROVISION_LAB_PERSONALITY), built when missing."""
        self.check()
        return personality_mod.ensure(self.dir, personality, log=log)

    # ----------------------------------------------------------------- repository server
    def _serve_tree(self, name: str) -> Path:
        root = self.dir / "serve" / name
        remove_tree(root)
        root.mkdir(parents=True)
        (root / "wheels").symlink_to(self.ensure_wheelhouse())
        return root

    def start_repo(self) -> Repo:
        """Serve (in a thread of this process) a freshly built, signed repo and the wheelhouse."""
        if self.repo is not None:
            return self.repo
        for stale in (self.dir / "serve").glob("t*-*"):  # trees of killed test processes
            pid = stale.name[1:].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                remove_tree(stale)
        root = self._serve_tree(f"t{os.getpid()}-{time.time_ns() % 10**9}")
        self._server = ThreadedServer(root)
        self._serve_root = root
        self.repo = build_repo(root, self._server.url, self.dir / "cache" / "so")
        return self.repo

    @property
    def server(self) -> ThreadedServer:
        """The running repository server (its `faults` make paths fail, for the fault tests)."""
        if self._server is None:
            raise LabError("start_repo() first")
        return self._server

    def stop_repo(self) -> None:
        if self._server:
            self._server.stop()
            self._server = None
        if self._serve_root:
            remove_tree(self._serve_root)
            self._serve_root = None
        self.repo = None

    def build_foreign_repo(self, name: str = "foreign") -> Repo:
        """A second copy of the repo, served by the same server under /<name>/, signed with
        another throwaway key: hosts that trust the lab's cuda-keyring must refuse it."""
        if self.repo is None:
            raise LabError("start_repo() first")
        return build_repo(
            self.repo.root / name,
            f"{self.repo.base_url}/{name}",
            self.dir / "cache" / "so",
            archive_models=(),
        )

    @property
    def wheels_url(self) -> str:
        if self.repo is None:
            raise LabError("start_repo() first")
        return f"{self.repo.base_url}/wheels/"

    # ----------------------------------------------------------------- detached server (lab up)
    @property
    def up_dir(self) -> Path:
        return self.dir / "up"

    def start_detached_repo(self) -> Repo:
        """A server process that outlives this one (pid and port in <lab>/up/)."""
        existing = self.detached_repo()
        if existing:
            return existing
        up = self.up_dir
        up.mkdir(parents=True, exist_ok=True)
        root = self._serve_tree("up")
        for f in ("server.pid", "server.port"):
            (up / f).unlink(missing_ok=True)
        log = (up / "server.log").open("ab")
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lab.server",
                "--root",
                str(root),
                "--port-file",
                str(up / "server.port"),
                "--pid-file",
                str(up / "server.pid"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 20
        while not (up / "server.port").exists():
            if time.monotonic() > deadline:
                raise LabError(f"repo server did not start; see {up / 'server.log'}")
            time.sleep(0.05)
        port = int((up / "server.port").read_text(encoding="utf-8"))
        self.repo = build_repo(root, f"http://127.0.0.1:{port}", self.dir / "cache" / "so")
        return self.repo

    def detached_repo(self) -> Repo | None:
        up = self.up_dir
        try:
            pid = int((up / "server.pid").read_text(encoding="utf-8"))
            port = int((up / "server.port").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not Path(f"/proc/{pid}").exists():
            return None
        self.repo = Repo(root=self.dir / "serve" / "up", base_url=f"http://127.0.0.1:{port}")
        return self.repo

    def stop_detached_repo(self) -> bool:
        up = self.up_dir
        try:
            pid = int((up / "server.pid").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists() or not (up / "server.pid").exists():
                break
            time.sleep(0.05)
        for f in ("server.pid", "server.port"):
            (up / f).unlink(missing_ok=True)
        remove_tree(self.dir / "serve" / "up")
        return True

    # ----------------------------------------------------------------- fleets
    def create_fleet(
        self,
        n: int,
        profiles: Sequence[str] = ("h100-sxm-8",),
        *,
        path: Path | None = None,
        detached: bool = False,
        personality: str | None = None,
    ) -> Fleet:
        """Boot n hosts of one personality (ubuntu2204 by default, or $PROVISION_LAB_PERSONALITY;
        see lab/personality.py); their apt sources point at the lab's archive slice."""
        base = self.ensure_base(personality=personality)
        if self.repo is None:
            self.start_repo()
        assert self.repo is not None
        p = personality_mod.get(base.personality)
        return Fleet.create(
            self.dir,
            base,
            n,
            profiles,
            repo_url=self.repo.repos_url,
            wheels_url=f"{self.repo.base_url}/wheels/",
            path=path,
            detached=detached,
            archive_url=self.repo.archive_url(p.archive),
            archive_key=(
                self.repo.archive_key_armored.read_bytes()
                if p.package_manager == "dnf"
                else self.repo.archive_keyring.read_bytes()
            ),
            repo_key_fingerprints=self.repo.key_fingerprints,
            wheel_hashes=hashed_requirements(self.ensure_wheelhouse()),
        )

    def create_light_fleet(
        self, n: int, profiles: Sequence[str] = ("h100-sxm-8",), personality: str | None = None
    ) -> LightFleet:
        """Start n light hosts (lab/light.py: sshd without systemd, for controller measurements)
        on the personality's base; the stack file names the lab's mirrors when the repo runs."""
        base = self.ensure_base(personality=personality)
        hashes = hashed_requirements(self.ensure_wheelhouse())
        if self.repo is None:
            return LightFleet.create(self.dir, base, n, profiles, wheel_hashes=hashes)
        return LightFleet.create(
            self.dir,
            base,
            n,
            profiles,
            repo_url=self.repo.repos_url,
            wheels_url=f"{self.repo.base_url}/wheels/",
            wheel_hashes=hashes,
        )

    def fleets(self) -> list[Fleet]:
        return [Fleet.load(p) for p in fleets_in(self.dir)]

    def reap_stale_fleets(self) -> list[str]:
        """Destroy fleets whose owning process is gone (a killed test run); returns their ids."""
        reaped: list[str] = []
        for fleet in self.fleets():
            if not owner_alive(fleet):
                with contextlib.suppress(LabError):
                    fleet.destroy()
                reaped.append(fleet.id)
        return reaped
