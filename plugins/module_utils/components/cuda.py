# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The CUDA toolkit component: the toolkit package and the /usr/local/cuda alternatives (role
cuda_toolkit).
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import Any, TypedDict

from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    CheckSpec,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import (
    Facts,
    flag,
)

NAMES = ("cuda",)
ROLE = "cuda_toolkit"

CHECKS = (
    CheckSpec(
        "cuda.nvcc",
        "nvcc --version reports the stack's CUDA release",
        "run `provision` on the host",
    ),
    CheckSpec(
        "cuda.symlink",
        "/usr/local/cuda points at the stack's toolkit (update-alternatives)",
        "run `provision` on the host",
    ),
    CheckSpec(
        "cuda.toolkit",
        (
            "cuda-toolkit-<major>-<minor> of the stack is installed (never the floating "
            "`cuda` or `cuda-<x>-<y>` metas, which pull a driver)"
        ),
        "run `provision` on the host",
    ),
)


class CudaPlan(TypedDict):
    """provision_plan.cuda: what the cuda_toolkit role carries out."""

    install: str  # the toolkit package (cuda-toolkit-<major>-<minor>)
    prefix: str  # /usr/local/cuda-<version>
    # {name, link, path, register, set}: the alternatives to register and set
    alternatives: list[dict[str, Any]]
    remove_traps: list[str]  # installed metas that would pull a driver


# CudaPlan fields no role reads, each with the reason (tests/unit/test_plan_fields.py)
PLAN_REPORT_ONLY = {
    "prefix": "the toolkit's directory, also each alternative's path",
    "remove_traps": "the installed floating metas the cuda.toolkit check names; no role removes "
    "them (they can hold the driver), the check's remediation asks for it",
}


class Cuda(Facts):
    """Judges cuda (methods of the one Judge: evaluate.py)."""

    # ------------------------------------------------------------------ CUDA toolkit
    def cuda(self) -> None:
        plat = self.plat
        c = self.stack.get("cuda") or {}
        version = str(c.get("version"))
        tk = plat.toolkit_package(version)
        inst = self.installed
        traps = [t for t in plat.toolkit_traps(version) if t in inst]
        toolkits = sorted(n for n in inst if re.match(r"^cuda-toolkit-\d+-\d+$", n))
        ok = tk in inst and not traps
        self.add(
            "cuda.toolkit",
            "pass" if ok else self.bad,
            "%s installed; never %s" % (tk, " or ".join(plat.toolkit_traps(version))),
            ("%s %s" % (tk, inst[tk]["version"]) if tk in inst else "%s not installed" % tk)
            + (("; trap packages installed: " + " ".join(traps)) if traps else "")
            + "; toolkits: "
            + " ".join(toolkits),
            "CUDA toolkit %s" % version,
            self.fix,
        )
        alt = self.section("alternatives")
        prefix = "/usr/local/cuda-%s" % version
        set_default = flag(c.get("set_default"))
        link = alt.get("usr_local_cuda")
        self.add(
            "cuda.symlink",
            "skip" if not set_default else ("pass" if link == prefix else self.bad),
            "/usr/local/cuda -> %s" % prefix,
            "/usr/local/cuda -> %s" % (link or "missing"),
            "default toolkit",
            self.fix,
        )
        release = alt.get("nvcc_release")
        self.add(
            "cuda.nvcc",
            "pass" if release == version else self.bad,
            "nvcc release %s" % version,
            ("nvcc release %s, V%s" % (release, alt.get("nvcc_version")))
            if release
            else "nvcc not runnable at %s/bin/nvcc" % prefix,
            "nvcc --version",
            self.fix,
        )
        major = version.split(".", maxsplit=1)[0]
        alternatives = []
        if set_default:
            for name, linkpath in (
                ("cuda", "/usr/local/cuda"),
                ("cuda-%s" % major, "/usr/local/cuda-%s" % major),
            ):
                info = alt.get(name) or {}
                # /usr/local/cuda replaced by hand (`ln -sfn /usr/local/cuda-11.3 /usr/local/cuda`)
                # leaves the alternatives database at the stack's toolkit: --set then rewrites the
                # link (update-alternatives repairs a master link that no longer points into
                # /etc/alternatives), so a link that resolves elsewhere is set again
                relink = name == "cuda" and link != prefix
                alternatives.append(
                    {
                        "name": name,
                        "link": linkpath,
                        "path": prefix,
                        "register": prefix not in (info.get("choices") or {}),
                        "set": info.get("current") != prefix or relink,
                    }
                )
        spec = tk
        record: CudaPlan = {
            "install": spec,
            "prefix": prefix,
            "alternatives": alternatives,
            "remove_traps": traps,
        }
        self.plan["cuda"] = record
        self.report.update(
            {
                "cuda_version": release,
                "nvcc_version": alt.get("nvcc_version"),
                "cuda_toolkits": toolkits,
            }
        )
