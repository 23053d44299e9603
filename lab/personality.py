"""Host personalities: which operating system a lab host is (or presents), and which repositories it
uses.

* `ubuntu2204`: the Debian 12 base presented as Ubuntu 22.04 (os-release, lsb-release, lsb_release,
  debian_version, issue, dpkg origins: a small overlay layer above the rootfs), NVIDIA's ubuntu2204
  model, the lab's slice of Ubuntu's jammy archive. Default.
* `debian11`: a real bullseye rootfs, NVIDIA's debian11 model, Debian's bullseye slice. No torch
  venv (no CPU torch wheel for Python 3.9 is available to the lab).
* `debian12`: the Debian 12 base as it is, NVIDIA's debian12 model (no CUDA 12.1), bookworm slice.

`ensure(lab, name)` returns the `Base` (rootfs + layers) for a personality, building what is
missing."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lab import base as base_mod
from lab.util import LabError, LabUnavailable, clean_env, file_lock, remove_tree, run, unmount_all

DEFAULT = "ubuntu2204"
# What the el9 layer's rpm database says the (Debian) userland provides, so that rpm scriptlets'
# and packages' basic requirements resolve (presented, not real: see lab/README.md)
RPMDB_PROVIDES = (
    "/bin/sh",
    "/bin/bash",
    "/usr/bin/sh",
    "bash",
    "coreutils",
    "glibc",
    "systemd",
    "shadow-utils",
    "python3",
    "/usr/bin/python3",
    "dnf",
    "rpm",
)
# EL9's glibc.spec (rpms/glibc, rhbz#1380878) runs ldconfig from rpm file triggers on the library
# directories (%transfiletriggerin/%transfiletriggerpostun common -P 2000000 -- /lib /usr/lib /lib64
# /usr/lib64), so a library an rpm installs is in the linker cache when the transaction ends; the
# lab's userland rpm carries the same triggers (Debian's glibc is not in the rpm database)
RPMDB_TRIGGERS = {
    "transfiletriggerin -P 2000000 -- /lib /usr/lib /lib64 /usr/lib64": "/sbin/ldconfig\n",
    "transfiletriggerpostun -P 2000000 -- /lib /usr/lib /lib64 /usr/lib64": "/sbin/ldconfig\n",
}


@dataclass(frozen=True)
class Personality:
    name: str
    suite: str  # the debootstrap suite of its base
    torch: bool  # the base carries the torch venv
    nvidia_repo: str  # NVIDIA repository directory, e.g. "ubuntu2204/x86_64"
    archive: str  # the archive slice's path on the lab server: "ubuntu" or "debian"
    archive_suite: str
    components: tuple[str, ...]  # what a fresh host's sources.list enables
    presented: dict[str, str] | None = None  # files of the presentation layer
    links: dict[str, str] | None = None
    apt_install: tuple[str, ...] = ()  # Debian packages the layer adds (installed with apt)
    hide: tuple[str, ...] = ()  # files of the rootfs the layer hides (overlay whiteouts)
    rpmdb: bool = False  # the layer has an rpm database with the release package installed
    package_manager: str = "apt"

    @property
    def os_id(self) -> str:
        return self.name


# Ubuntu 22.04.4 as its files say it (base-files 12ubuntu4.x, lsb-release).
# Sources: os-release fields as in
# metacpan/metacpan-cpan-extracted:distros/L/Linux-Info/t/distro-ubuntu.t (an Ubuntu 22.04.4
# sample); lsb-release format as python-distro/distro:tests/resources/distros/ubuntu24/etc/
# lsb-release; /etc/debian_version "bookworm/sid" (Ubuntu 22.04 base-files; P).
UBUNTU_OS_RELEASE = """\
PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=jammy
"""
UBUNTU_LSB_RELEASE = """\
DISTRIB_ID=Ubuntu
DISTRIB_RELEASE=22.04
DISTRIB_CODENAME=jammy
DISTRIB_DESCRIPTION="Ubuntu 22.04.4 LTS"
"""
# lsb_release (package lsb-release, present on Ubuntu images): answers from /etc/lsb-release
LSB_RELEASE = r"""#!/bin/sh
# provision lab: lsb_release of the presented Ubuntu 22.04 (reads /etc/lsb-release)
. /etc/lsb-release
short=0; out=""
for a in "$@"; do
  case "$a" in
    -s|--short) short=1 ;;
    -a|--all) out="$out i d r c" ;;
    -i|--id) out="$out i" ;; -d|--description) out="$out d" ;;
    -r|--release) out="$out r" ;; -c|--codename) out="$out c" ;;
    -is|-si) short=1; out="$out i" ;; -rs|-sr) short=1; out="$out r" ;;
    -cs|-sc) short=1; out="$out c" ;; -ds|-sd) short=1; out="$out d" ;;
  esac
done
[ -n "$out" ] || out=" v"
for k in $out; do
  case $k in
    v) [ $short = 1 ] && echo "n/a" || echo "No LSB modules are available." ;;
    i) [ $short = 1 ] && echo "$DISTRIB_ID" || echo "Distributor ID:	$DISTRIB_ID" ;;
    d) [ $short = 1 ] && echo "$DISTRIB_DESCRIPTION" || echo "Description:	$DISTRIB_DESCRIPTION" ;;
    r) [ $short = 1 ] && echo "$DISTRIB_RELEASE" || echo "Release:	$DISTRIB_RELEASE" ;;
    c) [ $short = 1 ] && echo "$DISTRIB_CODENAME" || echo "Codename:	$DISTRIB_CODENAME" ;;
  esac
done
"""

PERSONALITIES: dict[str, Personality] = {
    "ubuntu2204": Personality(
        name="ubuntu2204",
        suite="bookworm",
        torch=True,
        nvidia_repo="ubuntu2204/x86_64",
        archive="ubuntu",
        archive_suite="jammy",
        components=("main", "restricted", "universe", "multiverse"),
        presented={
            "usr/lib/os-release": UBUNTU_OS_RELEASE,
            "etc/lsb-release": UBUNTU_LSB_RELEASE,
            "etc/debian_version": "bookworm/sid\n",
            "etc/issue": "Ubuntu 22.04.4 LTS \\n \\l\n\n",
            "etc/issue.net": "Ubuntu 22.04.4 LTS\n",
            "etc/dpkg/origins/ubuntu": (
                "Vendor: Ubuntu\nVendor-URL: https://www.ubuntu.com/\n"
                "Bugs: https://bugs.launchpad.net/ubuntu/+filebug\nParent: Debian\n"
            ),
            "usr/bin/lsb_release": LSB_RELEASE,
        },
        links={"etc/dpkg/origins/default": "ubuntu", "etc/os-release": "../usr/lib/os-release"},
    ),
    "debian11": Personality(
        name="debian11",
        suite="bullseye",
        torch=False,
        nvidia_repo="debian11/x86_64",
        archive="debian",
        archive_suite="bullseye",
        components=("main",),
    ),
    "debian12": Personality(
        name="debian12",
        suite="bookworm",
        torch=True,
        nvidia_repo="debian12/x86_64",
        archive="debian",
        archive_suite="bookworm",
        components=("main",),
    ),
}


# Rocky Linux 9.3 as its files say it: python-distro/distro:tests/resources/distros/rocky9/usr/lib/
# os-release and .../rocky9/usr/lib/rocky-release
ROCKY_OS_RELEASE = """\
NAME="Rocky Linux"
VERSION="9.3 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.3"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.3 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.3"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.3"
"""
PERSONALITIES["el9"] = Personality(
    name="el9",
    suite="bookworm",
    torch=True,
    nvidia_repo="rhel9/x86_64",
    archive="rocky",
    archive_suite="9",
    components=("baseos", "appstream", "extras"),
    presented={
        "usr/lib/os-release": ROCKY_OS_RELEASE,
        "etc/dnf/vars/releasever": "9\n",
        "etc/yum.repos.d/.keep": "",
        # EL9's glibc searches /usr/lib64 by default (its x86_64 libdir); Debian's does not, so the
        # libraries NVIDIA's rpms put there (libcuda, libcudnn, libnccl) need this line in the lab
        "etc/ld.so.conf.d/provision-lab-el9-lib64.conf": (
            "# provision lab: EL9's default library directory (Debian's ld.so does not search it)\n"
            "/usr/lib64\n"
        ),
    },
    links={"etc/os-release": "../usr/lib/os-release"},
    apt_install=("dnf", "python3-dnf", "dnf-plugins-core", "rpm", "python3-rpm"),
    hide=("etc/debian_version", "etc/apt/sources.list", "etc/dnf/plugins/local.conf"),
    rpmdb=True,
    package_manager="dnf",
)


def names() -> list[str]:
    return list(PERSONALITIES)


def get(name: str | None = None) -> Personality:
    """A personality by name; None: $PROVISION_LAB_PERSONALITY, else the default (ubuntu2204)."""
    key = name or os.environ.get("PROVISION_LAB_PERSONALITY") or DEFAULT
    try:
        return PERSONALITIES[key]
    except KeyError:
        raise LabError(f"unknown personality {key!r}; known: {', '.join(PERSONALITIES)}") from None


def _layer_hash(p: Personality, base_path: Path) -> str:
    data = json.dumps(
        {
            "files": p.presented,
            "links": p.links,
            "apt": p.apt_install,
            "hide": p.hide,
            "rpmdb": [p.rpmdb, RPMDB_PROVIDES, RPMDB_TRIGGERS],
            "base": base_path.name,
        },
        sort_keys=True,
    ).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def _ensure_layer(lab: Path, p: Personality, base: base_mod.Base, log: bool) -> Path:
    final = lab / f"present-{p.name}-{_layer_hash(p, base.path)}"
    if (final / "done").exists():
        return final / "layer"
    with file_lock(lab / "base.lock"):
        if (final / "done").exists():
            return final / "layer"
        remove_tree(final)
        layer = final / "layer"
        layer.mkdir(parents=True)
        if p.apt_install or p.hide or p.rpmdb:
            _build_in_overlay(final, layer, base, p, log)
        for rel, text in (p.presented or {}).items():
            dest = layer / rel
            _mkdirs(layer, dest.parent)
            dest.unlink(missing_ok=True)
            dest.write_text(text, encoding="utf-8")
            dest.chmod(0o755 if rel.startswith("usr/bin/") else 0o644)
        for rel, target in (p.links or {}).items():
            dest = layer / rel
            _mkdirs(layer, dest.parent)
            if dest.is_symlink() or dest.exists():
                dest.unlink()
            dest.symlink_to(target)
        layer.chmod(0o755)
        (final / "done").write_text("", encoding="utf-8")
    return layer


def _mkdirs(layer: Path, directory: Path) -> None:
    """Create directory (and parents) inside the layer, root-owned 0755 as in the rootfs."""
    missing = []
    d = directory
    while d != layer and not d.exists():
        missing.append(d)
        d = d.parent
    for m in reversed(missing):
        m.mkdir()
        m.chmod(0o755)


def ensure(lab: Path, name: str | None = None, log: bool = False) -> base_mod.Base:
    """The base (and presentation layer) of a personality, built when missing."""
    p = get(name)
    if p.package_manager == "dnf":
        from lab.repo import rpm_tools_missing  # noqa: PLC0415

        missing = rpm_tools_missing()
        if missing:
            raise LabUnavailable(
                f"the {p.name} personality needs {', '.join(missing)} "
                "(apt-get install rpm createrepo-c)"
            )
    found = base_mod.ensure_base(lab, log=log, suite=p.suite, torch=p.torch)
    layers: tuple[Path, ...] = ()
    if p.presented:
        layers = (_ensure_layer(lab, p, found, log),)
    return base_mod.Base(found.path, layers=layers, personality=p.name)


def _build_in_overlay(
    final: Path, layer: Path, base: base_mod.Base, p: Personality, log: bool
) -> None:
    """Run apt (and rpm) on an overlay of the base whose upper dir becomes the layer, so that the
    layer holds only what changed (whiteouts included)."""
    work, merged = final / "work", final / "merged"
    work.mkdir()
    merged.mkdir()
    run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={base.rootfs},upperdir={layer},workdir={work}",
            merged,
        ]
    )
    env = clean_env(HOME="/root", DEBIAN_FRONTEND="noninteractive")
    try:
        run(["mount", "-t", "proc", "proc", merged / "proc"])
        if p.apt_install:
            if log:
                print(f"[lab] {p.name}: apt-get install {' '.join(p.apt_install)}", flush=True)
            sources = merged / "etc/apt/sources.list"
            sources.write_text(
                f"deb {base_mod.debian_mirror(p.suite)} {p.suite} main\n", encoding="utf-8"
            )
            run(["chroot", merged, "apt-get", "-q", "update"], env=env, timeout=900)
            run(
                [
                    "chroot",
                    merged,
                    "apt-get",
                    "install",
                    "-y",
                    "-q",
                    "--no-install-recommends",
                    *p.apt_install,
                ],
                env=env,
                timeout=1800,
            )
            run(["chroot", merged, "apt-get", "clean"], env=env)
            sources.write_text("", encoding="utf-8")
            for lst in (merged / "var/lib/apt/lists").glob("*"):
                if lst.is_file():
                    lst.unlink()
        if p.rpmdb:
            _rpmdb(merged, final)
        for rel in p.hide:
            target = merged / rel
            if target.exists() or target.is_symlink():
                target.unlink()
    finally:
        unmount_all(merged)
    shutil.rmtree(work, ignore_errors=True)
    merged.rmdir()


def _rpmdb(merged: Path, final: Path) -> None:
    """An rpm database that knows the release package (dnf reads $releasever from it)."""
    from lab.rpms import Rpm  # noqa: PLC0415 - only EL layers need rpmbuild

    rel = Rpm(
        "rocky-release",
        "9.3",
        "1.el9",
        "Rocky Linux release files (provision lab)",
        arch="noarch",
        provides=[
            "system-release(releasever) = 9",
            "system-release = 9.3-1.el9",
            "redhat-release = 9.3-1.el9",
            "rocky-release(upstream) = 9.3",
        ],
    )
    rel.add_text("/etc/rocky-release", "Rocky Linux release 9.3 (Blue Onyx)\n")
    rel.symlinks["/etc/redhat-release"] = "rocky-release"
    rel.symlinks["/etc/system-release"] = "rocky-release"
    base = Rpm(
        "provision-lab-userland",
        "1",
        "1.el9",
        "What the Debian userland under this presented EL9 provides (provision lab)",
        arch="noarch",
        provides=list(RPMDB_PROVIDES),
        scripts=dict(RPMDB_TRIGGERS),
    )
    run(["chroot", merged, "rpm", "--initdb"], env=clean_env())
    for pkg in (rel, base):
        built = pkg.build(final, final)
        shutil.copy2(built, merged / "tmp" / built.name)
        inside = f"/tmp/{built.name}"  # noqa: S108 - the chroot's /tmp, cleaned right after
        run(["chroot", merged, "rpm", "-i", "--nodeps", inside], env=clean_env())
        (merged / "tmp" / built.name).unlink()
        built.unlink()
