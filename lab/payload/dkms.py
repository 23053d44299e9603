#!/usr/bin/python3
"""Fake `dkms` (the lab's dkms package): registers module sources and "builds" them for every kernel
whose headers are installed (/lib/modules/<kernel>/build), like the real one, writing a placeholder
/lib/modules/<kernel>/updates/dkms/nvidia.ko ("simulated nvidia.ko <version> <flavor>").

Commands: add, build, install, remove, autoinstall, status (dkms 2.8 and 3.x output formats), and
the helpers the packages call: `common.postinst <module> <version>` (installed as
/usr/lib/dkms/common.postinst) and `kernel-hook <kernel>` (/etc/kernel/{header_,}postinst.d/dkms).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

DKMS_VERSION = "@DKMS_VERSION@"
ROOT = Path(os.environ.get("FAKE_DKMS_ROOT", "/"))
TREE = ROOT / "var/lib/dkms"
SRC = ROOT / "usr/src"
MODULES = ROOT / "lib/modules"
LOADER = "/usr/lib/fake-nvidia/loader"  # the lab's `modprobe nvidia` stand-in (base image)


def new_format() -> bool:
    return not DKMS_VERSION.startswith(("1:2.", "2."))


def kernels() -> list[str]:
    return sorted(p.name for p in MODULES.iterdir() if p.is_dir()) if MODULES.is_dir() else []


def has_headers(kernel: str) -> bool:
    return (MODULES / kernel / "build").exists()


def conf(module: str, version: str) -> dict[str, str]:
    path = SRC / f"{module}-{version}" / "dkms.conf"
    out: dict[str, str] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            m = re.match(r'^\s*([A-Za-z_]+)="?([^"#]*)"?', line)
            if m:
                out[m.group(1)] = m.group(2).strip()
            m = re.match(r"^#\s*provision-lab flavor:\s*(\S+)", line)
            if m:
                out["FLAVOR"] = m.group(1)
    return out


def added() -> list[tuple[str, str]]:
    out = []
    if TREE.is_dir():
        for mod in sorted(TREE.iterdir()):
            for ver in sorted(mod.iterdir()):
                if (ver / "source").exists() or (ver / "source").is_symlink():
                    out.append((mod.name, ver.name))
    return out


def parse(argv: list[str]) -> tuple[str | None, str | None, str | None, bool]:
    module = version = kernel = None
    every = False
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "-m":
            module = rest.pop(0)
        elif arg == "-v":
            version = rest.pop(0)
        elif arg in ("-k", "--kernelver"):
            kernel = rest.pop(0).split("/")[0]
        elif arg == "--all":
            every = True
        elif "/" in arg and not arg.startswith("-"):
            module, version = arg.split("/", 1)
        elif not arg.startswith("-") and module is None:
            module = arg
    return module, version, kernel, every


def do_add(module: str, version: str) -> int:
    src = SRC / f"{module}-{version}"
    if not (src / "dkms.conf").exists():
        print(f"Error! Could not find module source directory.\nDirectory: {src} does not exist.")
        return 2
    d = TREE / module / version
    d.mkdir(parents=True, exist_ok=True)
    link = d / "source"
    if not link.is_symlink():
        link.symlink_to(f"/usr/src/{module}-{version}")
    print(
        f"Creating symlink /var/lib/dkms/{module}/{version}/source -> /usr/src/{module}-{version}"
    )
    return 0


def do_install(module: str, version: str, kernel: str) -> int:
    if not has_headers(kernel):
        print(
            f"Error! Your kernel headers for kernel {kernel} cannot be found at "
            f"/lib/modules/{kernel}/build or /lib/modules/{kernel}/source."
        )
        return 1
    flavor = conf(module, version).get("FLAVOR", "proprietary")
    out = MODULES / kernel / "updates" / "dkms"
    out.mkdir(parents=True, exist_ok=True)
    (out / "nvidia.ko").write_text(f"simulated nvidia.ko {version} {flavor}\n", encoding="utf-8")
    built = TREE / module / version / kernel / "x86_64"
    built.mkdir(parents=True, exist_ok=True)
    (built / "installed").write_text("", encoding="utf-8")
    print(f"Building module for {module}/{version} on {kernel} (simulated): done.")
    return 0


def do_remove(module: str, version: str, kernel: str | None) -> int:
    base = TREE / module / version
    for k in [kernel] if kernel else kernels():
        ko = MODULES / k / "updates" / "dkms" / "nvidia.ko"
        if ko.exists() and ko.read_text(encoding="utf-8").split()[2:3] == [version]:
            ko.unlink()
        shutil.rmtree(base / k, ignore_errors=True)
    if kernel is None:
        shutil.rmtree(base, ignore_errors=True)
    print(f"Module {module}/{version} removed (simulated).")
    return 0


def do_autoinstall(kernel: str) -> int:
    rc = 0
    for module, version in added():
        if conf(module, version).get("AUTOINSTALL", "yes").lower() != "yes":
            continue
        rc |= do_install(module, version, kernel)
    return rc


def do_status() -> int:
    for module, version in added():
        built = [k for k in kernels() if (TREE / module / version / k / "x86_64").is_dir()]
        if not built:
            print(f"{module}/{version}: added" if new_format() else f"{module}, {version}: added")
        for k in built:
            if new_format():
                print(f"{module}/{version}, {k}, x86_64: installed")
            else:
                print(f"{module}, {version}, {k}, x86_64: installed")
    return 0


def common_postinst(module: str, version: str) -> int:
    """What dh_dkms's postinst does: add, then build for the current and the newest kernel."""
    do_add(module, version)
    current = os.uname().release
    targets = [current] + [k for k in kernels()[-1:] if k != current]
    for k in targets:
        if not has_headers(k):
            print(
                f"Module build for kernel {k} was skipped since the kernel headers for this kernel "
                "does not seem to be installed."
            )
            continue
        do_install(module, version, k)
    if Path(LOADER).exists():
        subprocess.run([LOADER, "modprobe"], check=False)
    return 0


def kernel_hook(kernel: str) -> int:
    if not has_headers(kernel):
        print(
            f"dkms: autoinstall for kernel {kernel} was skipped since the kernel headers for this "
            "kernel do not seem to be installed."
        )
        return 0
    return do_autoinstall(kernel)


def main(argv: list[str]) -> int:  # noqa: PLR0911 - one return per action
    if not argv:
        print("Error! No action was specified.")
        return 1
    action, rest = argv[0], argv[1:]
    module, version, kernel, every = parse(rest)
    if action == "status":
        return do_status()
    if action == "autoinstall":
        return do_autoinstall(kernel or os.uname().release)
    if action == "common.postinst":
        return common_postinst(rest[0], rest[1])
    if action == "kernel-hook":
        return kernel_hook(rest[0] if rest else os.uname().release)
    if not module or not version:
        print(
            "Error! Arguments <module> and <module-version> are not specified.\n"
            f"Usage: {action} <module>/<module-version>"
        )
        return 1
    if action == "add":
        return do_add(module, version)
    if action in ("build", "install"):
        return do_install(module, version, kernel or os.uname().release)
    if action == "remove":
        return do_remove(module, version, None if every or not kernel else kernel)
    print(f"Error! Unknown action: {action} (simulated: add build install remove autoinstall)")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
