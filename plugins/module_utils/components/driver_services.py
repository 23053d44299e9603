# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The driver component's services (role nvidia_driver): nvidia-persistenced, NVIDIA's fabric
manager on NVSwitch systems, DCGM's host engine. Methods of the one Judge through Driver
(driver.py); their checks are in driver.CHECKS.
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import TypedDict

from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    Facts,
    flag,
)
from ansible_collections.provision.gpu.plugins.module_utils.platforms import (
    upstream_version,
)

PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/provision.conf"


class PersistencedPlan(TypedDict):
    """How nvidia-persistenced is made to keep persistence mode on (persistence_settings)."""

    dropin: str  # the systemd drop-in's path, "" when none is needed
    dropin_content: str
    install: list[str]  # packages to install for the daemon ([] where another package ships it)
    enable: bool  # enable the unit (false for a static unit: udev starts it)


class DriverServices(Facts):
    """Judges the driver's services (methods of the one Judge: evaluate.py, through Driver)."""

    def _want_fabricmanager(self) -> bool:
        policy = str(self.drv().get("fabricmanager") or "auto")
        if policy == "always":
            return True
        if policy == "never":
            return False
        return bool(self.gpu.get("nvswitch_present"))

    def persistence_settings(self) -> PersistencedPlan:
        """How persistence mode is made to hold on this OS. Ubuntu's packaged unit is static
        (started by udev when the driver binds), has StopWhenUnneeded=true and runs
        --no-persistence-mode (canonical/nvidia-graphics-drivers:debian/templates/
        nvidia-compute-utils-flavour.nvidia-persistenced.service.in): a drop-in turns persistence
        mode on, as NVIDIA/ansible-role-nvidia-driver's override does. EL's and Debian's units have
        [Install] and no such flag: enabled and started, no drop-in (unless the packaged command
        does carry --no-persistence-mode)."""
        u = self.section("units").get("nvidia-persistenced") or {}
        packaged = list(u.get("packaged_exec_start") or [])
        if self.plat.persistenced_is_virtual():
            command = [
                "/usr/bin/nvidia-persistenced",
                "--user",
                "nvidia-persistenced",
                "--persistence-mode",
                "--verbose",
            ]
        elif "--no-persistence-mode" in packaged:
            command = [
                ("--persistence-mode" if a == "--no-persistence-mode" else a) for a in packaged
            ]
        else:
            command = []
        content = ""
        if command:
            content = (
                "# Managed by provision (nvidia_driver role): persistence mode on. The packaged\n"
                "# unit runs --no-persistence-mode; StopWhenUnneeded=false keeps the daemon when\n"
                "# it was started by hand rather than by udev.\n"
                "[Unit]\nStopWhenUnneeded=false\n\n[Service]\nExecStart=\nExecStart=%s\n"
                % " ".join(command)
            )
        return {
            "dropin": PERSISTENCED_DROPIN if command else "",
            "dropin_content": content,
            "install": [] if self.plat.persistenced_is_virtual() else ["nvidia-persistenced"],
            # a static unit cannot be enabled: udev starts it
            "enable": not self.plat.persistenced_is_virtual()
            and (u.get("enabled") or "") not in ("static", "masked"),
        }

    def _persistence_check(self) -> None:
        d = self.drv()
        if not flag(d.get("persistence")):
            self.add(
                "driver.persistence",
                "skip",
                "persistence not managed (disabled)",
                None,
                "persistence mode",
                "",
            )
            return
        u = self.section("units").get("nvidia-persistenced") or {}
        gpus = self.gpu.get("gpus") or []
        modes = sorted({str(x.get("persistence_mode")) for x in gpus}) or ["no GPUs listed"]
        s = self.persistence_settings()
        dropin_ok = (
            not s["dropin"]
            or self.section("units").get("persistenced_dropin") == s["dropin_content"]
        )
        unit_ok = u.get("active") == "active" and (u.get("enabled") in ("enabled", "static"))
        gpu_ok = bool(gpus) and all(x.get("persistence_mode") == "Enabled" for x in gpus)
        ok = unit_ok and gpu_ok and dropin_ok
        self.add(
            "driver.persistence",
            "pass" if ok else self.bad,
            "nvidia-persistenced active with --persistence-mode; persistence mode Enabled on "
            "every GPU",
            "unit %s/%s%s; GPUs: %s"
            % (
                u.get("enabled") or "?",
                u.get("active") or "?",
                "" if dropin_ok else "; drop-in missing or edited",
                ",".join(modes),
            ),
            "persistence mode",
            self.fix,
        )

    def _fabricmanager_check(
        self, want: bool, names: list[str], user: str, expected_version: str
    ) -> None:
        inst = self.installed
        fm_inst = sorted(n for n in inst if re.match(self.plat.fabricmanager_re(), n))
        fm = self.section("units").get("nvidia-fabricmanager") or {}
        main = names[0]
        fm_ver = upstream_version(inst[main]["version"]) if main in inst else ""
        if want:
            ok = (
                bool(user)
                and fm_ver == user
                and fm.get("active") == "active"
                and all(n in inst for n in names)
            )
            status = "pass" if ok else ("fail" if fm_ver and user and fm_ver != user else self.bad)
            self.add(
                "driver.fabricmanager",
                status,
                "%s %s active" % (" ".join(names), user or expected_version),
                "%s %s %s" % (" ".join(fm_inst) or "not installed", fm_ver, fm.get("active", "?")),
                "fabric manager must equal the driver version on NVSwitch systems",
                self.fix,
            )
        elif (
            not self.gpu.get("lspci_available")
            and not self.gpu.get("nvlink_ruled_out")
            and str(self.drv().get("fabricmanager") or "auto") == "auto"
        ):
            # minimal images lack lspci: an HGX A100 (no Fabric section in nvidia-smi -q) is then
            # not seen as an NVSwitch system; the role installs pciutils and probes again
            self.add(
                "driver.fabricmanager",
                self.bad,
                "NVSwitch presence known (lspci)",
                "lspci missing (pciutils not installed)",
                "cannot tell whether NVSwitch is present without lspci",
                self.fix,
            )
        else:
            self.add(
                "driver.fabricmanager",
                "pass" if not fm_inst else self.bad,
                "no fabric manager (no NVSwitch)",
                " ".join(fm_inst) or "not installed",
                "fabric manager only where NVSwitch is present",
                self.fix,
            )

    def _dcgm_check(self, state: str) -> None:
        """With dcgm.install in the stack: NVIDIA DCGM's package for the stack's CUDA major is
        installed, and its host engine (nvidia-dcgm) runs where the package ships the unit and the
        driver's module is loaded (the deep health tier's `dcgmi diag` needs both)."""
        if not flag((self.stack.get("dcgm") or {}).get("install"), False):
            self.add("driver.dcgm", "skip", None, None, "DCGM is not part of the stack", "")
            return
        major = str((self.stack.get("cuda") or {}).get("version") or "").split(".")[0]
        name = "datacenter-gpu-manager-4-cuda%s" % major
        unit = self.section("units").get("nvidia-dcgm") or {}
        installed = name in self.installed
        shipped = unit.get("load", "not-found") != "not-found"
        running = unit.get("active") == "active" and unit.get("enabled") == "enabled"
        ok = installed and (running or not shipped or state != "ok")
        self.add(
            "driver.dcgm",
            "pass" if ok else self.bad,
            "%s installed, nvidia-dcgm enabled and active" % name,
            "%s; nvidia-dcgm %s/%s" % (
                "installed" if installed else "not installed",
                unit.get("enabled") or "-", unit.get("active") or "-",
            ),
            "NVIDIA DCGM (dcgm.install in the stack) for the deep health tier",
            self.fix,
        )
