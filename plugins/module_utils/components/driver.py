# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The driver component: the pinned driver branch, nouveau, persistenced, fabric manager, reboots
(role nvidia_driver). The services' checks (persistenced, fabric manager, DCGM) are judged in
driver_services.py, a base of Driver.
"""

from __future__ import absolute_import, annotations, division, print_function

import datetime
import re
from typing import Any, TypedDict

from ansible_collections.provision.gpu.plugins.module_utils import branch_support
from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    CheckSpec,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.driver_services import (
    DriverServices,
    PersistencedPlan,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    flag,
)
from ansible_collections.provision.gpu.plugins.module_utils.flavour import (
    kernel_module_flavour,
    loaded_module_flavour,
)
from ansible_collections.provision.gpu.plugins.module_utils.platforms import (
    upstream_version,
)

NAMES = ("driver",)
ROLE = "nvidia_driver"

CHECKS = (
    CheckSpec(
        "driver.branch",
        "the installed driver is of the stack's branch (driver.branch)",
        (
            "run `provision` on the host (installs cuda-drivers-<branch> and holds it)"
        ),
    ),
    CheckSpec(
        "driver.branch_support",
        (
            "the stack's driver branch is still supported by NVIDIA (the matrix's "
            "driver.branches end_of_support); past it the check passes with a `warning` "
            "(report.json, junit.xml system-out, provision_check_warning, the summary), so "
            "the exit code is unchanged"
        ),
        (
            "set driver.branch in the stack to a supported branch (`provision stack validate` "
            "names them), then run `provision` on the host"
        ),
    ),
    CheckSpec(
        "driver.dcgm",
        (
            "with dcgm.install in the stack: NVIDIA DCGM's package for the stack's CUDA "
            "major (datacenter-gpu-manager-4-cuda<major>) is installed and its host "
            "engine (nvidia-dcgm) is enabled and active once the driver's module is "
            "loaded"
        ),
        "run `provision` on the host (the nvidia_driver role installs it)",
    ),
    CheckSpec(
        "driver.fabricmanager",
        (
            "on NVSwitch systems, nvidia-fabricmanager runs at exactly the driver's "
            "version (CUDA error 802 without it); absent elsewhere"
        ),
        (
            "run `provision` on the host (driver.fabricmanager auto|always|never in the "
            "stack)"
        ),
    ),
    CheckSpec(
        "driver.flavor",
        (
            "the open kernel-module flavour is only used where every GPU is Turing or "
            "newer (compute capability >= 7.5)"
        ),
        "use driver.flavor proprietary on older GPUs",
    ),
    CheckSpec(
        "driver.hold",
        (
            "the driver packages are held (apt-mark hold, dnf versionlock) so upgrades "
            "cannot move them"
        ),
        "run `provision` on the host (it holds them again)",
    ),
    CheckSpec(
        "driver.module_loaded",
        (
            "the loaded kernel module matches the installed userspace driver (no "
            "\"Driver/library version mismatch\", nvidia-smi exit 18)"
        ),
        "reboot the host (the module of the new driver loads at boot)",
    ),
    CheckSpec(
        "driver.next_boot",
        (
            "the kernel the host boots next (and the running one) has an NVIDIA module "
            "built for it"
        ),
        (
            "install the headers for the new kernel and run dkms autoinstall, or run "
            "`provision` on the host"
        ),
    ),
    CheckSpec(
        "driver.nouveau_blacklist",
        "nouveau is blacklisted in /etc/modprobe.d and the initramfs",
        "run `provision` on the host, then reboot",
    ),
    CheckSpec(
        "driver.persistence",
        (
            "nvidia-persistenced runs with persistence mode on (a drop-in where the "
            "packaged unit runs --no-persistence-mode, as Ubuntu's) and every GPU reports"
            " Persistence Mode Enabled"
        ),
        "run `provision` on the host",
    ),
    CheckSpec(
        "driver.pin",
        (
            "apt preferences pin every driver package to the stack's branch or exact "
            "version (/etc/apt/preferences.d/provision-nvidia-driver), so one transaction"
            " never mixes versions; beside an adopted Canonical driver, only the fabric "
            "manager, at that driver's version"
        ),
        "run `provision` on the host",
    ),
    CheckSpec(
        "driver.reboot",
        (
            "no reboot is pending for the driver (under --no-reboot a needed reboot fails"
            " this check)"
        ),
        (
            "reboot the host in your maintenance window, then run `provision` (or "
            "`provision validate`)"
        ),
    ),
    CheckSpec(
        "driver.secure_boot",
        (
            "the driver modules can load: Secure Boot off, Canonical's signed modules "
            "adopted, or a declared signed path (gpu_stack_secure_boot_signed)"
        ),
        (
            "enrol a MOK key at the console or use signed modules, or disable Secure Boot"
        ),
    ),
    CheckSpec(
        "driver.version",
        (
            "the installed driver is the stack's version (driver.version), or the newest "
            "of the branch when that is null"
        ),
        "run `provision` on the host",
    ),
)
PIN_FILE = "/etc/apt/preferences.d/provision-nvidia-driver"

BLACKLIST_FILE = "/etc/modprobe.d/blacklist-nouveau.conf"

BLACKLIST = (
    "# Managed by provision (nvidia_driver role)\nblacklist nouveau\noptions nouveau modeset=0\n"
)

class DriverPlan(TypedDict):
    """provision_plan.driver: what the nvidia_driver role carries out (every key always present)."""

    dpkg_repair: bool
    dpkg_reinstall: list[str]
    adopted: bool
    resync: list[str]
    change: bool
    remove: list[str]
    unhold: list[str]
    pin_file: str
    pin_content: str
    transactions: list[list[str]]
    fabricmanager_install: list[str]
    fabricmanager_remove: list[str]
    persistenced: PersistencedPlan
    hold: list[str]
    kernel_packages: list[str]
    kernel_modules: bool
    blacklist_file: str
    blacklist_content: str
    initramfs: list[str]
    reboot_needed: bool
    module_loaded: bool
    nouveau_loaded: bool
    lspci_available: bool
    main_package: str | None  # None where the platform names no main package


# DriverPlan fields no role reads: kept in the plan for whoever reads provision_plan (-v, a
# playbook of the site's own, the unit tests), each with the reason
PLAN_REPORT_ONLY = {
    "adopted": "the decision behind an empty transactions list (also driver_adopted in the report)",
    "change": "the decision behind remove, unhold and transactions, for reading the plan",
    "kernel_packages": "already the head of transactions[0]; listed apart for reading the plan",
    "main_package": "the package the decisions are about (also driver_package in the report)",
}


class Driver(DriverServices):
    """Judges driver (methods of the one Judge: evaluate.py)."""

    # ------------------------------------------------------------------ driver
    def driver(self) -> None:
        plat = self.plat
        d = self.drv()
        b = str(d.get("branch"))
        v = str(d.get("version") or "")
        flavor = str(d.get("flavor") or "proprietary")
        g = self.gpu
        ds = self.driver_state()
        adopted = self.driver_adopted(ds)
        user = ds["userspace"]
        expected_version = v or "%s.*" % b
        blocked, sb_actual = self.secure_boot_blocked()
        self.add(
            "driver.secure_boot",
            "fail" if blocked else "pass",
            "Secure Boot disabled, or a signed module path",
            sb_actual,
            self._secure_boot_message() if blocked else "module signing not an issue",
            "enrol a MOK key at the console or use signed modules, then set "
            "gpu_stack_secure_boot_signed=true",
        )
        self._driver_flavor(flavor, ds, adopted)
        self._branch_support_check(b)
        branch_ok = ds["branch"] == b and not ds["other_branch"]
        self.add(
            "driver.branch",
            "pass" if branch_ok else self.bad,
            "branch %s only" % b,
            ("installed %s" % user if user else "no driver package")
            + ((", other branches: " + " ".join(ds["other_branch"])) if ds["other_branch"] else ""),
            "driver branch",
            self.fix,
        )
        smi_v = g.get("driver_version") or ""
        state = g.get("state", "unknown")
        user_ok = ds["branch"] == b and (not v or user == v)
        smi_ok = state != "ok" or (smi_v.startswith(b + ".") and (not v or smi_v == v))
        self.add(
            "driver.version",
            "pass" if user_ok and smi_ok else self.bad,
            expected_version,
            "userspace %s, nvidia-smi %s" % (user or "none", smi_v or state),
            "driver version (packages and nvidia-smi)",
            self.fix,
        )
        unpackaged = state == "ok" and not user  # an image's or a runfile's driver (the H200)
        if state == "ok" and smi_v == user and user:
            mstatus = "pass"
        elif not user and state in ("not_installed", "no_device"):
            mstatus = "skip"
        elif unpackaged:
            mstatus = self.bad  # working GPUs: what a run replaces, not a broken host
        else:
            mstatus = "fail"
        self.add(
            "driver.module_loaded",
            mstatus,
            "loaded module %s" % (user or expected_version),
            smi_v if state == "ok" else (g.get("message") or state),
            "loaded kernel module does not match the userspace driver (driver/library mismatch)"
            if state == "version_mismatch"
            else "a driver not installed from packages is loaded: a run installs the stack's "
            "packaged driver, which loads after a reboot"
            if unpackaged
            else "loaded module vs userspace",
            "reboot" if state in ("version_mismatch", "driver_not_loaded") else self.fix,
        )
        fm_names = plat.fabricmanager_packages(b)
        want_fm = self._want_fabricmanager()
        branch_pkgs = self.hold_set(ds, want_fm, fm_names)
        hold_on = flag(d.get("hold"))
        unheld = [n for n in branch_pkgs if n not in self.held]
        self.add(
            "driver.hold",
            "skip" if not hold_on else ("pass" if branch_pkgs and not unheld else self.bad),
            "held: %s" % (" ".join(branch_pkgs) or "driver packages"),
            ("not held: " + " ".join(unheld))
            if unheld
            else ("held" if branch_pkgs else "no driver packages"),
            "driver packages held against unattended upgrades",
            self.fix,
        )
        if not plat.apt:
            pin = ""
        elif not adopted:
            pin = plat.apt_pin(b, v)
        else:
            # an adopted Canonical driver is not pinned, but NVIDIA's fabric manager beside it
            # must be at its version (nv-fabricmanager refuses another driver version), not the
            # newest of the branch
            pin = plat.apt_pin(b, user, only=fm_names) if want_fm and user else ""
        self._pin_check(pin)
        self._persistence_check()
        self._fabricmanager_check(want_fm, fm_names, user, expected_version)
        bl = self.section("kernel").get("blacklist") or ""
        self.add(
            "driver.nouveau_blacklist",
            "pass" if "blacklist nouveau" in bl else self.bad,
            "%s blacklists nouveau" % BLACKLIST_FILE,
            "present" if "blacklist nouveau" in bl else "missing",
            "nouveau blacklisted",
            self.fix,
        )
        nouveau = "nouveau" in (self.section("kernel").get("loaded") or [])
        reboot = (
            state == "version_mismatch"
            or (nouveau and state != "ok")
            or (state == "driver_not_loaded" and bool(user))
        )
        self.add(
            "driver.reboot",
            self.bad if reboot else "pass",
            "no reboot pending",
            ("reboot required: %s" % (g.get("message") or state)) if reboot else "none pending",
            "reboot required" if reboot else "no reboot pending",
            "reboot",
        )
        self._next_boot_check()
        self._dcgm_check(state)
        self.report.update(
            {
                "driver_version": smi_v or user or None,
                "driver_userspace_version": user or None,
                "driver_branch": b,
                "driver_flavor": flavor,
                "driver_state": state,
                "driver_package": ds["main"],
                "driver_adopted": adopted,
                "cuda_driver_version": g.get("cuda_driver_version"),
                "gpu_count": g.get("gpu_count"),
                "gpu_model": g.get("gpu_model"),
                "fabricmanager": want_fm,
                "held_packages": sorted(n for n in self.held if plat.is_driver_package(n)),
            }
        )
        self.plan["driver"] = self._driver_plan(ds, adopted, pin, want_fm, fm_names, reboot)

    def hold_set(self, ds: dict[str, Any], want_fm: bool, fm_names: list[str]) -> list[str]:
        """The installed driver packages that must be held: the stack's branch (not another's),
        the fabric manager only where it belongs, and on apt only packages at a driver version
        (Debian's contrib helpers such as nvidia-kernel-common 20151021 are not the driver's)."""
        plat = self.plat
        d = self.drv()
        v = str(d.get("version") or "")
        inst = self.installed
        return sorted(
            n
            for n in ds["family"]
            if n not in ds["other_branch"]
            and (not re.match(plat.fabricmanager_re(), n) or (want_fm and n in fm_names))
            and (not plat.apt or self._versioned(n) or n.startswith("cuda-drivers"))
            and (not v or not self._versioned(n) or upstream_version(inst[n]["version"]) == v)
        )

    def _versioned(self, name: str) -> bool:
        """Packages whose version is the driver's (not Debian contrib helpers like
        nvidia-kernel-common 20151021 or nvidia-installer-cleanup)."""
        inst = self.installed.get(name)
        if not inst:
            return False
        return re.match(r"^\d{3}\.", upstream_version(inst["version"])) is not None

    def _branch_support_check(self, branch: str) -> None:
        """NVIDIA's end of support of the branch (branch_support.py): a warning, not a failure."""
        today = str(self.stack.get("today") or "")  # tests; else this month
        month = today[:7] if today else datetime.date.today().strftime("%Y-%m")
        status, expected, actual, message, warning = branch_support.judge(
            branch, self.drv().get("support"), month
        )
        extra = {"warning": warning} if warning else {}
        self.add("driver.branch_support", status, expected, actual, message, **extra)

    def _pin_check(self, pin: str) -> None:
        if not pin:
            return
        current = self.section("kernel").get("pin_file")
        ok = current == pin
        self.add(
            "driver.pin",
            "pass" if ok else self.bad,
            "%s pins the driver packages (%s)" % (PIN_FILE, pin.splitlines()[2]),
            "as managed" if ok else ("missing" if current is None else "edited"),
            "apt preferences keep every driver package at one version",
            self.fix,
        )

    def _next_boot_check(self) -> None:
        k = self.section("kernel")
        kernels = k.get("kernels") or []
        ko = k.get("nvidia_ko") or {}
        must = [x for x in (self.plat.kernel, k.get("default_kernel") or "") if x]
        must = sorted(set(must))
        missing = [x for x in kernels if not ko.get(x) and x in must]
        others = [x for x in kernels if not ko.get(x) and x not in must]
        if not kernels:
            status, actual = "skip", "no kernels under /lib/modules (container)"
        else:
            status = "pass" if not missing else self.bad
            actual = (
                ("missing for: " + " ".join(missing))
                if missing
                else ("present for " + " ".join(must))
            )
            if others:
                actual += "; older kernels without one (not judged): " + " ".join(others)
        self.add(
            "driver.next_boot",
            status,
            "an NVIDIA module for the running and the default boot kernel: " + " ".join(must),
            actual,
            "the next boot finds a module",
            "install the headers for the new kernel (the role installs the flavour's "
            "linux-headers meta package) and run dkms autoinstall, or " + self.fix,
        )

    def _driver_plan(
        self,
        ds: dict[str, Any],
        adopted: bool,
        pin: str,
        want_fm: bool,
        fm_names: list[str],
        reboot: bool,
    ) -> DriverPlan:
        plat = self.plat
        d = self.drv()
        b = str(d.get("branch"))
        v = str(d.get("version") or "")
        inst = self.installed
        change = bool(ds["other_branch"]) or (
            bool(v) and bool(ds["userspace"]) and ds["userspace"] != v
        )
        replace = bool(ds["canonical"]) and not adopted
        remove = list(ds["other_branch"])
        if replace:
            remove += [n for n in ds["canonical"] if n not in remove]
        fm_installed = sorted(n for n in inst if re.match(plat.fabricmanager_re(), n))
        if plat.family == "redhat":
            # one fabric manager name for every branch on EL (nvidia-fabric-manager): dnf keeps
            # another branch's installed one (`present`), and it would not start against the new
            # module; it goes with the other branch's packages and is installed again
            remove += [
                n
                for n in fm_installed
                if plat.package_branch(n, inst[n]["version"]) not in (None, b) and n not in remove
            ]
        fm_remove = [] if want_fm else fm_installed
        # another name's fabric manager goes after the install, unless it already went with the
        # other branch's packages before it: on EL a removal by name after the install would match
        # the new fabric manager's Provides (nvidia-fabric-manager provides nvidia-fabricmanager)
        fm_remove += [
            n
            for n in fm_installed
            if want_fm
            and n not in fm_names
            and n not in fm_remove
            and n not in remove
            and not n.startswith("cuda-drivers-fabricmanager")
        ]
        unhold = sorted(
            n
            for n in self.held
            if n in inst
            and plat.is_driver_package(n)
            and (change or replace or n in remove or n in fm_remove)
        )
        kernel_pkgs = plat.kernel_headers() if self.headers_required() else []
        # one transaction where NVIDIA's order allows: headers and DKMS with the first, the fabric
        # manager (at the driver's version through the same pin) with the last
        transactions = [
            list(t)
            for t in ([] if adopted else plat.driver_install(b, str(d.get("flavor")), v))
        ]
        extra_last = list(fm_names) if want_fm else []
        if want_fm and v and plat.family == "redhat":
            # the fabric manager at exactly the driver version (R3); its rpm has no epoch
            extra_last = ["%s-%s" % (n, v) for n in fm_names]
        if not transactions and (kernel_pkgs or extra_last):
            transactions = [[]]
        if transactions:
            transactions[0] = kernel_pkgs + transactions[0]
            transactions[-1] = transactions[-1] + extra_last
        persist: PersistencedPlan = (
            self.persistence_settings()
            if flag(d.get("persistence"))
            else {"dropin": "", "dropin_content": "", "install": [], "enable": False}
        )
        if plat.persistenced_is_virtual() or plat.family == "debian":
            persist[
                "install"
            ] = []  # Ubuntu: provided by nvidia-compute-utils; Debian: in the transaction
        hold = []
        if flag(d.get("hold")):
            hold = [
                n
                for n in self.hold_set(ds, want_fm, fm_names)
                if n not in self.held and n not in remove
            ]
        # installed driver packages of the branch at another version than the pinned one (an
        # upgrade past the pin, or an older pin): `state: latest` moves them to the pin's
        # candidate; `present` would leave them (apt keeps what satisfies the dependencies)
        resync = []
        if plat.apt and adopted and want_fm:
            # the fabric manager at another version than the adopted driver's
            resync = sorted(
                n
                for n in fm_names
                if n in inst and upstream_version(inst[n]["version"]) != ds["userspace"]
            )
        elif plat.apt and v and not adopted:
            resync = sorted(
                n
                for n in ds["family"]
                if n not in remove
                and n not in fm_remove
                and self._versioned(n)
                and upstream_version(inst[n]["version"]) != v
                and (not re.match(plat.fabricmanager_re(), n) or (want_fm and n in fm_names))
            )
        return {
            "dpkg_repair": self.dpkg_interrupted(),
            "dpkg_reinstall": self.dpkg_reinstall(),
            "adopted": adopted,
            "resync": resync,
            "change": change or replace,
            "remove": sorted(set(remove)),
            "unhold": unhold,
            "pin_file": PIN_FILE if pin else "",
            "pin_content": pin,
            "transactions": transactions,
            "fabricmanager_install": fm_names if want_fm else [],
            "fabricmanager_remove": sorted(set(fm_remove)),
            "persistenced": persist,
            "hold": hold,
            "kernel_packages": kernel_pkgs,
            "kernel_modules": self.kernel_modules_managed(),
            "blacklist_file": BLACKLIST_FILE,
            "blacklist_content": BLACKLIST,
            "initramfs": plat.initramfs_command(),
            "reboot_needed": reboot,
            "module_loaded": self.gpu.get("state") == "ok",
            "nouveau_loaded": "nouveau" in (self.section("kernel").get("loaded") or []),
            "lspci_available": bool(self.gpu.get("lspci_available")),
            "main_package": ds["main"],
        }

    def _driver_flavor(self, flavor: str, ds: dict[str, Any], adopted: bool) -> None:
        """driver.flavor: the open flavour's refusals (pre-Turing GPUs; NVIDIA's documented
        Ubuntu steps), then the flavour really installed (the kernel module packages) and loaded
        (/proc/driver/nvidia/version says "Open Kernel Module" for the open one)."""
        g = self.gpu
        b = str(self.drv().get("branch"))
        turing = g.get("turing_or_newer")
        inst = self.installed
        kinds = {n: kernel_module_flavour(n) for n in inst}
        has_open = sorted(n for n, k in kinds.items() if k == "open")
        has_prop = sorted(n for n, k in kinds.items() if k == "proprietary")
        loaded = loaded_module_flavour(self.section("kernel").get("nvidia_version") or "")
        other = "proprietary" if flavor == "open" else "open"
        wrong = has_prop if flavor == "open" else has_open
        right = has_open if flavor == "open" else has_prop
        actual = "installed: %s; loaded: %s" % (
            "open (%s)" % " ".join(has_open) if has_open and not has_prop
            else "proprietary (%s)" % " ".join(has_prop) if has_prop and not has_open
            else "both flavours (%s)" % " ".join(has_open + has_prop) if has_open
            else "no kernel module package",
            loaded or "unknown",
        )
        status, msg, fix = "pass", "%s kernel modules" % flavor, self.fix
        if flavor == "open" and turing is False:
            status, actual = "fail", "GPUs older than Turing; " + actual
            msg, fix = "the open flavour needs compute capability >= 7.5", (
                "use driver.flavor proprietary")
        elif flavor == "open" and self.plat.family == "ubuntu" and not adopted:
            status = "fail"
            msg = (
                "open kernel modules through NVIDIA's documented Ubuntu steps are refused: "
                "cuda-drivers-%(b)s pulls nvidia-driver-%(b)s, whose nvidia-dkms-%(b)s is the "
                "proprietary module, and its nvidia-kernel-source-%(b)s ships files that "
                "nvidia-kernel-open-%(b)s also ships (AWS's procedure adds dpkg "
                "--force-overwrite), so apt ends with both flavours and DKMS builds the "
                "proprietary one" % {"b": b}
            )
            fix = (
                "use driver.flavor proprietary, or preinstall Canonical's "
                "nvidia-driver-%s-open (adopted when it satisfies the stack)" % b
            )
        elif wrong:
            status = self.bad
            msg = "the %s flavour's module package is installed: %s (apt chose it)" % (
                other, " ".join(wrong))
            fix = "remove %s, then %s" % (" ".join(wrong), self.fix)
        elif not right and loaded == other:
            # seen on an H200 image whose driver came from outside any package: open module
            # loaded, no module package, stack proprietary (was: pass)
            status = self.bad
            msg = "the loaded module is the %s one and no %s module package is installed" % (
                other, flavor)
        elif right and loaded == other and ds.get("userspace") == g.get("driver_version"):
            status = self.bad
            msg = "the loaded module is the %s one although the %s flavour is installed" % (
                other, flavor)
            fix = "reboot, or rebuild the module (dkms autoinstall), then %s" % self.fix
        self.add(
            "driver.flavor",
            status,
            "%s kernel modules installed and loaded%s" % (
                flavor, "; every GPU Turing or newer" if flavor == "open" else ""),
            actual,
            msg,
            fix,
        )
