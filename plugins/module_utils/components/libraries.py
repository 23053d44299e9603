# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The cuDNN and NCCL components: pinned, held library packages built for the stack's CUDA (roles
cudnn, nccl through cuda_library).
"""

from __future__ import absolute_import, annotations, division, print_function

from typing import TypedDict

from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    CheckSpec,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    Facts,
    flag,
)
from ansible_collections.provision.gpu.plugins.module_utils.platforms import (
    upstream_version,
)

NAMES = ("cudnn", "nccl",)
ROLE = "cuda_library"

CHECKS = (
    CheckSpec(
        "cudnn.hold",
        "the cuDNN packages are held",
        "run `provision` on the host",
    ),
    CheckSpec(
        "cudnn.version",
        "libcudnn (+ -dev) at the stack's version, built for the stack's CUDA",
        "run `provision` on the host",
    ),
    CheckSpec(
        "nccl.hold",
        "the NCCL packages are held",
        "run `provision` on the host",
    ),
    CheckSpec(
        "nccl.version",
        (
            "libnccl2 and libnccl-dev at the stack's version, built for the stack's CUDA"
        ),
        "run `provision` on the host",
    ),
)


class LibraryPlan(TypedDict):
    """provision_plan.cudnn and provision_plan.nccl: what the cuda_library role carries out."""

    packages: list[str]
    version: str
    install: list[str]  # package=version (apt) or package-version (dnf)
    unhold: list[str]
    hold: list[str]
    needs_install: bool


# LibraryPlan fields no role reads, each with the reason (tests/unit/test_plan_fields.py)
PLAN_REPORT_ONLY = {
    "packages": "the library's packages, already in install, hold and unhold with their versions",
    "version": "the stack's version, already in install",
}


class Libraries(Facts):
    """Judges cudnn, nccl (methods of the one Judge: evaluate.py)."""

    # ------------------------------------------------------------------ cuDNN and NCCL
    def library(self, component: str) -> None:
        names, version = self.plat.library_packages(component, self.stack)
        inst = self.installed
        cfg = self.stack.get(component) or {}
        label = "cuDNN" if component == "cudnn" else "NCCL"
        wrong = [n for n in names if n not in inst or inst[n]["version"] != version]
        actual = ", ".join(
            "%s %s" % (n, inst[n]["version"] if n in inst else "not installed") for n in names
        )
        self.add(
            "%s.version" % component,
            "pass" if not wrong else self.bad,
            "%s = %s" % (", ".join(names), version),
            actual,
            "%s %s for CUDA %s"
            % (label, cfg.get("version"), (self.stack.get("cuda") or {}).get("version"))
            if not wrong
            else "wrong %s build: %s" % (label, " ".join(wrong)),
            self.fix,
        )
        hold_on = flag(cfg.get("hold"))
        unheld = [n for n in names if n not in self.held]
        self.add(
            "%s.hold" % component,
            "skip" if not hold_on else ("pass" if not unheld else self.bad),
            "held: %s" % " ".join(names),
            ("not held: " + " ".join(unheld)) if unheld else "held",
            "%s packages held against unattended upgrades" % label,
            self.fix,
        )
        sep = "-" if self.plat.family == "redhat" else "="
        unhold = sorted(n for n in names if n in self.held and n in wrong)
        record: LibraryPlan = {
            "packages": names,
            "version": version,
            "install": ["%s%s%s" % (n, sep, version) for n in names],
            "unhold": unhold,
            # what is not held now, and what the run unholds for the version change
            "hold": sorted(n for n in names if n not in self.held or n in unhold)
            if hold_on
            else [],
            "needs_install": bool(wrong),
        }
        self.plan[component] = record
        main = inst.get(names[0])
        self.report.update(
            {
                "system_%s_version" % component: upstream_version(main["version"])
                if main
                else None,
                "system_%s_package_version" % component: main["version"] if main else None,
            }
        )
