# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Judge the collected facts against the stack: check records, report facts and the change plan.

Pure functions (Python 3.8+, no I/O): `evaluate(components, facts, stack, check_mode)` returns
{"checks": [...], "report": {...}, "plan": {component: {...}}}. A check is
{id, status, expected, actual, message, remediation}; status pass | drift | fail | skip. In check
mode a state that differs from the stack is `drift`; broken state (driver/library mismatch, Secure
Boot blocking unsigned modules, an unsupported OS) is `fail` in both modes. The plan tells the roles
what to change (package transactions, files to write, holds), so that every decision is here, in
Python and unit-tested, and the roles only carry it out with ansible.builtin modules.

Each component's judgement lives in its module under components/ (preflight, repo, driver, cuda,
libraries, env, pytorch; health and health_deep in the registry's shape); the Judge here is their
union over one Context.
"""

from __future__ import absolute_import, annotations, division, print_function

from typing import Any

from ansible_collections.provision.gpu.plugins.module_utils.components import ON_REQUEST, REGISTRY
from ansible_collections.provision.gpu.plugins.module_utils.components.cuda import Cuda
from ansible_collections.provision.gpu.plugins.module_utils.components.driver import Driver
from ansible_collections.provision.gpu.plugins.module_utils.components.env import (
    Env,
    profile_script,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.facts import flag, vtuple
from ansible_collections.provision.gpu.plugins.module_utils.components.libraries import Libraries
from ansible_collections.provision.gpu.plugins.module_utils.components.preflight import Preflight
from ansible_collections.provision.gpu.plugins.module_utils.components.pytorch import (
    Pytorch,
    cudnn_text,
)
from ansible_collections.provision.gpu.plugins.module_utils.components.repo import Repo
from ansible_collections.provision.gpu.plugins.module_utils.flavour import (
    kernel_module_flavour,
    loaded_module_flavour,
)

__all__ = [
    "COMPONENTS",
    "SECTIONS",
    "Judge",
    "cudnn_text",
    "evaluate",
    "flag",
    "kernel_module_flavour",
    "loaded_module_flavour",
    "profile_script",
    "sections_for",
    "vtuple",
]


# the components judged here, then the ones in the new shape (components/, by registry); the
# ones judged only when asked for by name (`provision check --deep`) are never in the default
COMPONENTS = (
    "preflight", "repo", "driver", "cuda", "cudnn", "nccl", "env", "pytorch",
    *[name for name in REGISTRY if name not in ON_REQUEST],
)

# what each component reads
SECTIONS = {
    "preflight": ("disk", "packages", "policy", "kernel", "secure_boot", "gpu", "python"),
    "repo": ("sources", "policy", "packages"),
    "driver": ("packages", "policy", "kernel", "secure_boot", "units", "gpu"),
    "cuda": ("packages", "alternatives"),
    "cudnn": ("packages",),
    "nccl": ("packages",),
    "env": ("env", "alternatives"),
    "pytorch": ("gpu", "torch"),
}

SECTIONS.update({name: module.SECTIONS for name, module in REGISTRY.items()})

def sections_for(components: list[str]) -> list[str]:
    out: list[str] = []
    for c in components:
        for s in SECTIONS.get(c, ()):
            if s not in out:
                out.append(s)
    return out

class Judge(Preflight, Repo, Driver, Cuda, Libraries, Env, Pytorch):
    """One evaluation: facts + stack + mode -> checks, report, plan (each component's methods
    live in its module under components/)."""

def evaluate(
    components: list[str], facts: dict[str, Any], stack: dict[str, Any], check_mode: bool
) -> dict[str, Any]:
    judge = Judge(facts, stack, check_mode)
    for component in components:
        if component in REGISTRY:
            REGISTRY[component].judge(judge)
        elif component in ("cudnn", "nccl"):
            judge.library(component)
        else:
            getattr(judge, component)()
    return {"checks": judge.checks, "report": judge.report, "plan": judge.plan}
