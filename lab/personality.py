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
from dataclasses import dataclass
from pathlib import Path

from lab import base as base_mod
from lab.util import LabError, file_lock, remove_tree

DEFAULT = "ubuntu2204"


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


def names() -> list[str]:
    return list(PERSONALITIES)


def get(name: str | None = None) -> Personality:
    """A personality by name; None: $PROVISION_LAB_PERSONALITY, else the default (ubuntu2204)."""
    key = name or os.environ.get("PROVISION_LAB_PERSONALITY") or DEFAULT
    try:
        return PERSONALITIES[key]
    except KeyError:
        raise LabError(f"unknown personality {key!r}; known: {', '.join(PERSONALITIES)}") from None


def _layer_hash(p: Personality) -> str:
    data = json.dumps({"files": p.presented, "links": p.links}, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def _ensure_layer(lab: Path, p: Personality) -> Path:
    final = lab / f"present-{p.name}-{_layer_hash(p)}"
    if (final / "done").exists():
        return final / "layer"
    with file_lock(lab / "base.lock"):
        if (final / "done").exists():
            return final / "layer"
        remove_tree(final)
        layer = final / "layer"
        for rel, text in (p.presented or {}).items():
            dest = layer / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
            dest.chmod(0o755 if rel.startswith("usr/bin/") else 0o644)
        for rel, target in (p.links or {}).items():
            dest = layer / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(target)
        for d in sorted(layer.rglob("*")):
            if d.is_dir() and not d.is_symlink():
                d.chmod(0o755)
        layer.chmod(0o755)
        (final / "done").write_text("", encoding="utf-8")
    return layer


def ensure(lab: Path, name: str | None = None, log: bool = False) -> base_mod.Base:
    """The base (and presentation layer) of a personality, built when missing."""
    p = get(name)
    found = base_mod.ensure_base(lab, log=log, suite=p.suite, torch=p.torch)
    layers: tuple[Path, ...] = ()
    if p.presented:
        layers = (_ensure_layer(lab, p),)
    return base_mod.Base(found.path, layers=layers, personality=p.name)
