"""The lab's base images: a Debian rootfs (bookworm, or bullseye for the debian11 personality)
shared
read-only (as overlay lower dir) by every host; lab/personality.py stacks presentation layers on
top.

Built once per lab directory and recipe (the directory name carries a hash of the recipe), into a
temporary directory that is renamed into place only when complete, under a file lock so that
concurrent builders wait for each other instead of corrupting the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from lab.util import LabError, clean_env, file_lock, remove_tree, run, unmount_all
from lab.wheelhouse import TORCH_REQUIREMENT, ensure_wheelhouse

RECIPE_VERSION = 4
SUITE = "bookworm"  # the default base
SUITES = ("bookworm", "bullseye")
ADMIN_USER = "gpuadmin"
TORCH_VENV = "/opt/pytorch"
PACKAGES = (
    "python3",
    "python3-apt",
    "python3-debian",
    "python3-venv",
    "python3-pip",
    "openssh-server",
    "sudo",
    "ca-certificates",
    "systemd",
    "systemd-sysv",
    "dbus",
    "kmod",
    "procps",
    "iproute2",
)
# Units that make no sense in a container and would leave a host "degraded".
MASKED_UNITS = (
    "systemd-networkd-wait-online.service",
    "e2scrub_reap.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "fstrim.timer",
)
SSHD_CONFIG = """\
# provision lab: key-only logins for the admin user
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UseDNS no
HostKey /etc/ssh/ssh_host_ed25519_key
"""


@dataclass(frozen=True)
class Base:
    """A finished base image, with the presentation layers a personality stacks on it (top
    first)."""

    path: Path
    layers: tuple[Path, ...] = ()
    personality: str = ""

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    @property
    def lowerdir(self) -> str:
        """The overlay `lowerdir=` value: layers first, the rootfs last."""
        return ":".join(str(p) for p in (*self.layers, self.rootfs))

    @property
    def key(self) -> Path:
        """The admin user's private SSH key (its public half is in authorized_keys)."""
        return self.path / "id_ed25519"

    @property
    def recipe(self) -> dict[str, object]:
        data = json.loads((self.path / "recipe.json").read_text(encoding="utf-8"))
        assert isinstance(data, dict)
        return data


def debian_mirror(suite: str = SUITE) -> str:
    """The Debian mirror from this machine's own apt sources ($PROVISION_LAB_MIRROR overrides);
    the same mirror serves bullseye as bookworm."""
    env = os.environ.get("PROVISION_LAB_MIRROR")
    if env:
        return env
    candidates: list[str] = []
    for src in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for block in src.read_text(encoding="utf-8").split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", block, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", block, re.M)
            if uris and suites and SUITE in suites.group(1).split():
                candidates.append(uris.group(1))
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for lst in lists:
        if lst.exists():
            for line in lst.read_text(encoding="utf-8").splitlines():
                m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and m.group(2) == SUITE:
                    candidates.append(m.group(1))
    return candidates[0] if candidates else "http://deb.debian.org/debian"


def recipe(suite: str = SUITE, torch: bool = True) -> dict[str, object]:
    """Everything that determines the base's content; its hash names the base directory."""
    if suite not in SUITES:
        raise LabError(f"unknown base suite {suite!r}; known: {', '.join(SUITES)}")
    return {
        "version": RECIPE_VERSION,
        "suite": suite,
        "variant": "minbase",
        "packages": list(PACKAGES),
        "user": ADMIN_USER,
        "torch": TORCH_REQUIREMENT if torch else None,
        "torch_venv": TORCH_VENV if torch else None,
        "masked": list(MASKED_UNITS),
        "sshd": SSHD_CONFIG,
    }


def recipe_hash(suite: str = SUITE, torch: bool = True) -> str:
    data = json.dumps(recipe(suite, torch), sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def base_name(suite: str = SUITE, torch: bool = True) -> str:
    return f"base-{suite}-{recipe_hash(suite, torch)}"


def find_base(lab: Path, suite: str = SUITE, torch: bool = True) -> Base | None:
    path = lab / base_name(suite, torch)
    return Base(path) if (path / "recipe.json").exists() else None


def ensure_base(lab: Path, log: bool = False, suite: str = SUITE, torch: bool = True) -> Base:
    """Return the finished base for the recipe, building it first if needed."""
    found = find_base(lab, suite, torch)
    if found:
        return found
    lab.mkdir(parents=True, exist_ok=True)
    house = ensure_wheelhouse(lab) if torch else None
    with file_lock(lab / "base.lock"):
        found = find_base(lab, suite, torch)
        if found:
            return found
        for stale in lab.glob("base-*.tmp.*"):  # an interrupted build: never reused
            remove_tree(stale)
        final = lab / base_name(suite, torch)
        tmp = lab / f"{final.name}.tmp.{os.getpid()}"
        tmp.mkdir()
        try:
            _build(tmp, house, log, suite)
        except BaseException:
            remove_tree(tmp)
            raise
        tmp.rename(final)
        return Base(final)


def _say(log: bool, msg: str) -> None:
    if log:
        print(f"[lab] {msg}", flush=True)


def _chroot(root: Path, *cmd: str, timeout: float = 600) -> None:
    run(
        ["chroot", root, *cmd],
        env=clean_env(HOME="/root", DEBIAN_FRONTEND="noninteractive"),
        timeout=timeout,
    )


def _build(tmp: Path, house: Path | None, log: bool, suite: str = SUITE) -> None:
    root = tmp / "rootfs"
    started = time.monotonic()
    mirror = debian_mirror(suite)
    _say(log, f"debootstrap {suite} from {mirror} (about a minute)")
    include = ",".join(PACKAGES)
    run(
        ["debootstrap", "--variant=minbase", f"--include={include}", suite, root, mirror],
        env=clean_env(),
        timeout=1800,
    )
    t_deboot = time.monotonic() - started
    _configure(root, tmp)
    t_torch = 0.0
    if house is not None:
        _say(log, f"baking {TORCH_REQUIREMENT} into {TORCH_VENV}")
        t0 = time.monotonic()
        _bake_torch(root, house)
        t_torch = time.monotonic() - t0
    meta = dict(recipe(suite, house is not None))
    meta.update(
        {
            "mirror": mirror,
            "built_at": time.time(),
            "seconds": {
                "debootstrap": round(t_deboot, 1),
                "torch": round(t_torch, 1),
                "total": round(time.monotonic() - started, 1),
            },
        }
    )
    (tmp / "recipe.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _configure(root: Path, tmp: Path) -> None:
    _chroot(root, "apt-get", "clean")
    # hermetic hosts: no Debian sources, no lists
    _write(root / "etc/apt/sources.list", "")
    for src in (root / "etc/apt/sources.list.d").glob("*"):
        src.unlink()
    lists = root / "var/lib/apt/lists"
    shutil.rmtree(lists, ignore_errors=True)
    (lists / "partial").mkdir(parents=True)
    # admin user: key-only SSH, passwordless sudo
    run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"{ADMIN_USER}@provision-lab",
            "-f",
            tmp / "id_ed25519",
        ]
    )
    _chroot(root, "useradd", "-m", "-s", "/bin/bash", "-G", "sudo", ADMIN_USER)
    _write(root / f"etc/sudoers.d/{ADMIN_USER}", f"{ADMIN_USER} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    ssh_dir = root / "home" / ADMIN_USER / ".ssh"
    _write(ssh_dir / "authorized_keys", (tmp / "id_ed25519.pub").read_text(encoding="utf-8"), 0o600)
    ssh_dir.chmod(0o700)
    _chroot(root, "chown", "-R", f"{ADMIN_USER}:{ADMIN_USER}", f"/home/{ADMIN_USER}/.ssh")
    _write(root / "etc/ssh/sshd_config.d/10-provision-lab.conf", SSHD_CONFIG)
    for key in (root / "etc/ssh").glob("ssh_host_*"):  # each host gets its own at creation
        key.unlink()
    # a fresh machine id per boot (systemd generates a transient one)
    _write(root / "etc/machine-id", "")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    (root / "etc/fake-nvidia").mkdir(parents=True, exist_ok=True)
    (root / "usr/sbin/policy-rc.d").unlink(missing_ok=True)


def _bake_torch(root: Path, house: Path) -> None:
    wheels = root / "srv/wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    (root / "proc").mkdir(exist_ok=True)
    try:
        run(["mount", "--bind", "-o", "ro", house, wheels])
        run(["mount", "-t", "proc", "proc", root / "proc"])
        _chroot(root, "python3", "-m", "venv", TORCH_VENV)
        _chroot(
            root,
            f"{TORCH_VENV}/bin/pip",
            "install",
            "--quiet",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            "/srv/wheels",
            TORCH_REQUIREMENT,
            timeout=1800,
        )
    finally:
        unmount_all(root / "srv/wheels")
        unmount_all(root / "proc")
    wheels.rmdir()
    if not (root / TORCH_VENV.lstrip("/") / "bin/python").exists():
        raise LabError("torch venv missing after the bake")
