# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Facts every component reads: installed packages, holds, GPUs, the driver's state."""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any

from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    Context,
)
from ansible_collections.provision.gpu.plugins.module_utils.platforms import (
    upstream_version,
)

CONTAINERS = ("systemd-nspawn", "docker", "lxc", "podman", "container", "containerd", "oci", "wsl")


def flag(value: Any, default: bool = True) -> bool:  # noqa: ANN401 - YAML/Jinja values
    """A boolean from the stack: real bools, and the strings Jinja may leave ("False", "no")."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() not in ("false", "no", "0", "off", "none")


def vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or ""))



class Facts(Context):
    """Shared readings of the collected facts (every component class derives from this)."""

    @property
    def installed(self) -> dict[str, dict[str, Any]]:
        pk = self.section("packages").get("installed") or {}
        return {n: v for n, v in pk.items() if v.get("installed")}

    @property
    def held(self) -> set[str]:
        return set(self.section("packages").get("held") or [])

    @property
    def gpu(self) -> dict[str, Any]:
        return self.section("gpu")

    @property
    def in_container(self) -> bool:
        return (self.section("os").get("container") or "") in CONTAINERS

    def kernel_modules_managed(self) -> bool:
        value = self.stack.get("kernel_modules", "auto")
        if str(value).lower() == "auto":
            return not self.in_container
        return flag(value)

    def dpkg_interrupted(self) -> bool:
        """An earlier install was cut short: the roles run `dpkg --configure -a` first."""
        return bool(self.section("packages").get("interrupted"))

    def dpkg_reinstall(self) -> list[str]:
        """Packages an unpack cut short left half-installed or reinst-required: `dpkg --configure`
        and `apt-get --fix-broken install` refuse them; the roles reinstall them at the version dpkg
        was unpacking (`name=version`, or the bare name when dpkg recorded no version)."""
        found = self.section("packages").get("reinstall") or {}
        return ["%s=%s" % (n, v) if v else str(n) for n, v in sorted(found.items())]

    def headers_required(self) -> bool:
        """Kernel headers (running kernel + the flavour's meta) and DKMS: with kernel modules
        managed, or when gpu_stack_kernel_headers says so."""
        value = (self.stack.get("preflight") or {}).get("kernel_headers", "auto")
        if str(value).lower() == "auto":
            return self.kernel_modules_managed()
        return flag(value)

    def drv(self) -> dict[str, Any]:
        return self.stack.get("driver") or {}

    # ------------------------------------------------------------------ the installed driver
    def driver_state(self) -> dict[str, Any]:
        """The installed driver: main package, version and branch, source, other branches."""
        d = self.drv()
        branch = str(d.get("branch") or "")
        inst = self.installed
        main = None
        for regex in self.plat.driver_main_packages():
            names = sorted(n for n in inst if re.match(regex, n))
            # prefer the stack's branch when several are installed
            names.sort(key=lambda n: self.plat.package_branch(n, inst[n]["version"]) != branch)
            if names:
                main = names[0]
                break
        family = sorted(n for n in inst if self.plat.is_driver_package(n))
        fm_re = self.plat.fabricmanager_re()
        user = upstream_version(inst[main]["version"]) if main else ""
        main_branch = self.plat.package_branch(main, inst[main]["version"]) if main else None
        other = []
        for n in family:
            if re.match(fm_re, n):
                continue
            b = self.plat.package_branch(n, inst[n]["version"])
            if b is not None and b != branch and b.isdigit() and len(b) == 3:
                other.append(n)
        canonical = sorted(n for n in family if self.plat.canonical_flavour(n))
        signed = sorted(n for n in canonical if n.startswith("linux-modules-nvidia-"))
        return {
            "main": main,
            "userspace": user,
            "branch": main_branch,
            "family": family,
            "other_branch": other,
            "canonical": canonical,
            "signed_modules": signed,
        }

    def driver_adopted(self, ds: dict[str, Any]) -> bool:
        """A packaged driver not from NVIDIA's repository (Canonical's -server flavours, signed
        linux-modules-nvidia-*) is adopted when it is the stack's branch, version and flavour."""
        if not ds["canonical"] or not ds["main"]:
            return False
        d = self.drv()
        if ds["branch"] != str(d.get("branch")):
            return False
        if d.get("version") and ds["userspace"] != d.get("version"):
            return False
        is_open = str(ds["main"]).endswith("-open")
        return is_open == (d.get("flavor") == "open")

    def secure_boot_blocked(self) -> tuple[bool, str]:
        state = self.section("secure_boot").get("state")
        d = self.drv()
        if state != "enabled":
            return False, "Secure Boot %s" % (state or "unknown")
        if flag(d.get("secure_boot_signed"), False):
            return False, "Secure Boot enabled (signed module path declared)"
        ds = self.driver_state()
        if ds["signed_modules"] and self.driver_adopted(ds):
            return False, "Secure Boot enabled, Canonical's signed modules: %s" % " ".join(
                ds["signed_modules"]
            )
        return True, "Secure Boot enabled, unsigned DKMS modules"

    def _secure_boot_message(self) -> str:
        b = self.drv().get("branch")
        return (
            "Secure Boot is on and the NVIDIA modules would be unsigned, so they would not load: "
            "nothing was changed. Options: on Ubuntu use Canonical's signed "
            "linux-modules-nvidia-%s-server packages (their driver is adopted when it matches "
            "the stack); otherwise enrol the DKMS signing key as a MOK (mokutil --import, then "
            "confirm in MokManager at the console on the next boot), then set "
            "gpu_stack_secure_boot_signed=true" % b
        )
