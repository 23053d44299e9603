"""Install the host packages of lab/host-packages.txt that are missing (`make host-packages`).

    python3 lab/prereqs.py [--for demo|test] [--os-release FILE]

Runs with the system's python3 (3.10 or newer, standard library only: it runs before .venv
exists, and it is run as a file, so it imports nothing from the lab package). What is installed is
asked of dpkg-query. As root with apt-get: `apt-get update`, then `apt-get install -y
--no-install-recommends` the missing packages only, with service starts denied while it runs.
Not root, or no apt: prints the exact command and exits 4. Nothing missing: exits 0, one line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LIST_FILE = Path(__file__).resolve().parent / "host-packages.txt"
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
GROUPS = {"demo": ("demo",), "test": ("demo", "test")}
MAKE_TARGET = {"demo": "host-packages", "test": "host-packages-test"}
EXIT_SETUP = 4
UNIT_DIRS = ("/lib/systemd/system/", "/usr/lib/systemd/system/")


@dataclass(frozen=True)
class Entry:
    name: str
    group: str
    only: tuple[str, ...] = ()
    no_start: bool = False


def parse_list(text: str) -> list[Entry]:
    """The entries of host-packages.txt (see the format in its header)."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        if len(line) < 2 or line[1] not in GROUPS:
            raise ValueError(f"{LIST_FILE.name}:{number}: expected 'PACKAGE demo|test ...': {raw}")
        only: tuple[str, ...] = ()
        no_start = False
        for word in line[2:]:
            if word.startswith("only="):
                only = tuple(word.removeprefix("only=").split(","))
            elif word == "no-start":
                no_start = True
            else:
                raise ValueError(f"{LIST_FILE.name}:{number}: unknown attribute {word!r}")
        entries.append(Entry(line[0], line[1], only, no_start))
    return entries


def os_id(os_release: Path) -> str:
    """`ID:VERSION_ID` from an os-release file, e.g. `debian:12`, `ubuntu:24.04`."""
    values: dict[str, str] = {}
    try:
        text = os_release.read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("\"'")
    return f"{values.get('ID', 'unknown')}:{values.get('VERSION_ID', '')}"


def wanted(entries: list[Entry], purpose: str, distro: str) -> list[Entry]:
    return [e for e in entries if e.group in GROUPS[purpose] and (not e.only or distro in e.only)]


def missing_packages(names: list[str]) -> list[str]:
    """The names dpkg-query does not report as installed ("ii"), in list order."""
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", *names],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = set()
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1] == "ii":
            installed.add(fields[0])
    return [n for n in names if n not in installed]


def install_command(names: list[str], sudo: bool = False) -> str:
    prefix = "sudo " if sudo else ""
    return (
        f"{prefix}apt-get update && {prefix}apt-get install -y --no-install-recommends "
        + " ".join(names)
    )


def _disable_units(package: str) -> None:
    """Disable (and stop, under systemd) the systemd services a no-start package ships."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return
    listing = subprocess.run(
        ["dpkg-query", "-L", package], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    units = sorted(
        {
            Path(p).name
            for p in listing
            if p.startswith(UNIT_DIRS) and p.endswith(".service") and "@" not in p
        }
    )
    booted = Path("/run/systemd/system").is_dir()
    for unit in units:
        cmd = [systemctl, "disable", "--quiet", *(["--now"] if booted else []), unit]
        print(f"[host-packages] {' '.join(cmd[1:])}: {package} is only needed for its tools")
        subprocess.run(cmd, check=False)


def install(entries: list[Entry]) -> int:
    names = [e.name for e in entries]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    own_policy = not POLICY_RC_D.exists()
    if own_policy:  # no daemon starts from these packages (prometheus would listen on :9090)
        POLICY_RC_D.write_text("#!/bin/sh\nexit 101\n", encoding="utf-8")
        POLICY_RC_D.chmod(0o755)
    try:
        print(f"[host-packages] {install_command(names)}", flush=True)
        steps = (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *names],
        )
        for cmd in steps:
            rc = subprocess.run(cmd, env=env, check=False).returncode
            if rc != 0:
                print(
                    f"[host-packages] `{' '.join(cmd)}` failed with exit code {rc}",
                    file=sys.stderr,
                )
                return EXIT_SETUP
    finally:
        if own_policy:
            POLICY_RC_D.unlink()
    for entry in entries:
        if entry.no_start:
            _disable_units(entry.name)
    still = missing_packages(names)
    if still:
        print(f"[host-packages] still not installed: {' '.join(still)}", file=sys.stderr)
        return EXIT_SETUP
    return 0


def main(argv: list[str] | None = None, euid: int | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab/prereqs.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--for",
        dest="purpose",
        choices=sorted(GROUPS),
        default="demo",
        help="demo: the lab's packages; test: those and the tools the tests run",
    )
    parser.add_argument("--os-release", type=Path, default=Path("/etc/os-release"))
    parser.add_argument("--list", action="store_true", help="print the package names and exit")
    args = parser.parse_args(argv)
    distro = os_id(args.os_release)
    entries = wanted(parse_list(LIST_FILE.read_text(encoding="utf-8")), args.purpose, distro)
    names = [e.name for e in entries]
    if args.list:
        print(" ".join(names))
        return 0
    target = f"make {args.purpose}"
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        print(
            f"{target} needs these host packages, and this machine has no apt/dpkg "
            f"(supported: Debian 12, Ubuntu 22.04, 24.04): {' '.join(names)}\n"
            f"On a Debian or Ubuntu machine, as root:\n  {install_command(names)}",
            file=sys.stderr,
        )
        return EXIT_SETUP
    missing = missing_packages(names)
    if not missing:
        print(f"[host-packages] {target}: all {len(names)} host packages are installed")
        return 0
    if (os.geteuid() if euid is None else euid) != 0:
        print(
            f"{target} needs host packages that are not installed: {' '.join(missing)}\n"
            f"Install them as root (or run `make {MAKE_TARGET[args.purpose]}` as root):\n"
            f"  {install_command(missing, sudo=True)}",
            file=sys.stderr,
        )
        return EXIT_SETUP
    return install([e for e in entries if e.name in missing])


if __name__ == "__main__":
    sys.exit(main())
