#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Ansible module provision.gpu.host_assess: assess a GPU host against the stack in one round trip.

One task of a role: wait (bounded) until the host is free (cloud-init, the package manager's locks),
refresh the run's host lock, probe the host once (collect.py), judge it (evaluate.py) and return
the check records, report facts and each component's change plan. Read-only; it was called
stack_probe before issue 18 (the name said only the probing).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_assess
short_description: Wait for a GPU host, probe it once, judge it against the stack, plan changes
description:
  - Optionally first waits for the host to be free (O(wait_timeout_s)) and refreshes the run's host
    lock (O(lock_run_id)), so a role needs one task, one round trip, before it changes anything.
  - Gathers, in one pass on the host, what the roles of provision.gpu need to know (packages and
    versions, holds and versionlocks, alternatives and /usr/local/cuda, profile.d and ld.so.conf
    entries, NVIDIA modules per kernel, Secure Boot, nouveau, nvidia-persistenced and fabric manager
    unit states, GPU facts from nvidia-smi and lspci, the torch probe inside the venv), and
    judges it in pure Python against the stack.
  - Component C(health) is the quick GPU health tier (nvidia-smi -q, the kernel log's NVRM Xid
    lines, /proc/driver/nvidia/version, nvidia-smi nvlink -s/-e), read-only and passive (never
    -pm, -r, -rac or a counter reset); a health finding above C(monitor) is C(fail), also in
    check mode.
  - Returns the check records (C(provision_checks)), report facts (C(provision_report)), the change
    plan the roles carry out (C(provision_plan)) and the GPU facts (C(nvidia_gpu)).
  - Read-only; supports check mode, where a difference from the stack is C(drift), not C(fail).
options:
  stack:
    description: The desired state, as the gpu_stack role composes it (C(gpu_stack_desired)).
    type: dict
    required: true
  components:
    description:
      - What to probe and judge. C(health_deep) (NVIDIA DCGM's C(dcgmi diag -r N), N and its hard
        timeout from the stack's C(dcgm.diag_level) and C(dcgm.diag_timeout_s)) loads the GPUs and
        runs only when named; it is never in the default.
    type: list
    elements: str
    choices: [preflight, repo, driver, cuda, cudnn, nccl, env, pytorch, health, health_deep]
    default: [preflight, repo, driver, cuda, cudnn, nccl, env, pytorch, health]
  require:
    description:
      - Check ids (or C(prefix.*) patterns) that must not C(fail); when one does, the task fails
        with every failing check's message (the checks are still returned). Never in check mode.
    type: list
    elements: str
    default: []
  wait_timeout_s:
    description:
      - Before probing, wait at most this long for C(cloud-init status --wait) and for the package
        manager's locks (dpkg, rpm) to be free; fail naming the lock holder's pid and name when
        the bound passes. 0 does not wait. Not in check mode.
    type: int
    default: 0
  publish:
    description:
      - Check ids (or C(prefix.*) patterns) published in C(provision_checks); the others are
        judged but not reported (the validation role probes the driver only for C(driver.reboot),
        and a validation run reports validation, not the driver's compliance).
    type: list
    elements: str
    default: ["*"]
  converge:
    description:
      - Converge from the check. Judges every component given and returns
        C(provision_converged), a map component -> true when every check of the component passes
        (or does not apply) and every component it builds on converged too (the environment
        follows the toolkit, PyTorch the driver; the repository runs whenever the driver, toolkit
        or a library does, as it finishes an interrupted dpkg run and refreshes their index).
      - The playbook skips the roles of converged components; their checks are published here,
        so the report stays complete. On the Red Hat family the repository never converges (its
        prerequisites, dnf plugins, EPEL and CRB, have no check).
    type: bool
    default: false
  return_facts:
    description: Also return the raw collected facts as C(provision_probe) (debugging).
    type: bool
    default: false
  lock_run_id:
    description:
      - The run holding the host's lock (provision.gpu.host_lock); the probe refreshes its sign of
        life so the lock is not taken for a dead run's. "" does nothing. Not in check mode.
    type: str
    default: ""
author:
  - provision authors
"""

EXAMPLES = r"""
- name: Probe the driver state and plan the changes
  provision.gpu.host_assess:
    stack: "{{ gpu_stack_desired }}"
    components: [driver]
    require: [driver.secure_boot]
"""

RETURN = r"""
ansible_facts:
  description: provision_checks (list), provision_report (dict), provision_plan (dict per
    component), nvidia_gpu (dict, when GPU facts were collected), provision_probe (dict, with
    return_facts).
  returned: always
  type: dict
"""

import fnmatch
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.gpu.plugins.module_utils import collect as c
from ansible_collections.provision.gpu.plugins.module_utils import evaluate as ev
from ansible_collections.provision.gpu.plugins.module_utils import lock as lk

COMPONENTS = list(ev.COMPONENTS)


class ModuleIO(c.HostIO):
    """Commands through subprocess with a clean locale and an optional timeout."""

    def __init__(self, module):
        self.module = module

    def run(self, argv, timeout=None, env=None):
        exe = argv[0]
        if not os.path.isabs(exe):
            found = self.which(exe)
            if found is None:
                return 127, "", "%s: command not found" % exe
            exe = found
        environ = dict(os.environ, LC_ALL="C", LANG="C")
        environ.update(env or {})
        try:
            proc = subprocess.Popen(
                [exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ
            )
        except OSError as exc:
            return 127, "", str(exc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return -9, "", "timed out after %s s" % timeout
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def policy_names(stack):
    """Packages whose apt policy the checks read: the toolkit, the driver metas, the headers."""
    cuda = str((stack.get("cuda") or {}).get("version"))
    branch = str((stack.get("driver") or {}).get("branch"))

    def names(plat):
        out = [
            plat.toolkit_package(cuda),
            "cuda-drivers-%s" % branch,
            "nvidia-driver-%s" % branch,
            "nvidia-driver-cuda",
        ]
        out.extend(plat.kernel_headers())
        return out

    return names


# What each component builds on: it converges only when these converged too.
CONVERGE_AFTER = {
    "env": ("cuda",),
    "pytorch": ("driver",),
}
# The components that install from NVIDIA's repository: when one of them runs, the repository's role
# runs first (it finishes an interrupted dpkg run and refreshes the package index they read).
REPO_USERS = ("driver", "cuda", "cudnn", "nccl")
# Components whose roles have change tasks no check sees on that OS family: they always run.
NEVER_CONVERGED = {("repo", "redhat")}


def converged_components(components, checks, family):
    """component -> True when its checks all pass (or skip: not applicable), it has at least one,
    the components it builds on converged, and, for the repository, every component that installs
    from it converged too (its role refreshes the package index they read)."""
    own = {}
    for comp in components:
        if comp == "preflight":
            continue
        mine = [x for x in checks if x["id"].split(".", 1)[0] == comp]
        own[comp] = bool(mine) and all(x["status"] in ("pass", "skip") for x in mine)
        if (comp, family) in NEVER_CONVERGED:
            own[comp] = False
    done = {}
    for comp in [x for x in COMPONENTS if x in own]:  # what a component builds on comes first
        after = CONVERGE_AFTER.get(comp, ())
        done[comp] = own[comp] and all(done.get(d, False) for d in after)
    if "repo" in done:
        done["repo"] = done["repo"] and all(done.get(c, False) for c in REPO_USERS)
    return done


def main():
    module = AnsibleModule(
        argument_spec={
            "stack": {"type": "dict", "required": True},
            "components": {
                "type": "list",
                "elements": "str",
                "choices": COMPONENTS + list(ev.ON_REQUEST),
                "default": COMPONENTS,
            },
            "require": {"type": "list", "elements": "str", "default": []},
            "wait_timeout_s": {"type": "int", "default": 0},
            "publish": {"type": "list", "elements": "str", "default": ["*"]},
            "return_facts": {"type": "bool", "default": False},
            "converge": {"type": "bool", "default": False},
            "lock_run_id": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    stack = module.params["stack"]
    components = module.params["components"]
    io = ModuleIO(module)
    params = {
        "disk_path": (stack.get("preflight") or {}).get("disk_path"),
        "cuda_version": (stack.get("cuda") or {}).get("version"),
        "env_profile_file": (stack.get("env") or {}).get("profile_file"),
        "env_users": (stack.get("env") or {}).get("users") or ["root"],
        "pytorch_python": (stack.get("pytorch") or {}).get("python"),
        "pytorch_venv": (stack.get("pytorch") or {}).get("venv"),
        "dcgm_level": (stack.get("dcgm") or {}).get("diag_level"),
        "dcgm_timeout_s": (stack.get("dcgm") or {}).get("diag_timeout_s"),
    }
    if module.params["lock_run_id"] and not module.check_mode:
        lk.refresh(module.params["lock_run_id"])
    waited = None
    if module.params["wait_timeout_s"] > 0 and not module.check_mode:
        os_facts = c.os_section(io, params)
        family = c.Platform(os_facts["os_release"], os_facts["arch"], os_facts["kernel"]).family
        waited = c.wait_for_host(io, family, module.params["wait_timeout_s"])
        if not waited["ok"]:
            check = {
                "id": "preflight.package_manager",
                "status": "fail",
                "expected": "cloud-init done and the package manager free within %d s"
                % module.params["wait_timeout_s"],
                "actual": waited["message"],
                "message": waited["message"],
                "remediation": "wait for the first-boot work to finish, then rerun",
            }
            module.fail_json(
                msg=waited["message"], ansible_facts={"provision_checks": [check]}, waited=waited
            )
    sections = ev.sections_for(components)
    if "repo" in components:
        plat_facts = c.os_section(io, params)
        plat = c.Platform(plat_facts["os_release"], plat_facts["arch"], plat_facts["kernel"])
        if plat.family == "redhat":
            params["repo_id"] = "cuda-%s-%s" % (plat.repo_dir, plat.arch_dir)
    facts = c.collect(sections, params, io, policy_names=policy_names(stack))
    result = ev.evaluate(components, facts, stack, check_mode=module.check_mode)
    patterns = list(module.params["publish"])
    converged = {}
    if module.params["converge"]:
        plat_facts = facts.get("os") or {}
        family = c.Platform(
            plat_facts.get("os_release") or {}, plat_facts.get("arch") or "", ""
        ).family
        converged = converged_components(components, result["checks"], family)
        patterns += ["%s.*" % comp for comp, done in converged.items() if done]
    published = [
        check
        for check in result["checks"]
        if any(fnmatch.fnmatchcase(check["id"], pattern) for pattern in patterns)
    ]
    ansible_facts = {
        "provision_checks": published,
        "provision_report": result["report"],
        "provision_plan": result["plan"],
    }
    if module.params["converge"]:
        ansible_facts["provision_converged"] = converged
    if "gpu" in facts:
        ansible_facts["nvidia_gpu"] = facts["gpu"]
    if module.params["return_facts"]:
        ansible_facts["provision_probe"] = facts
    failing = []
    if module.params["require"] and not module.check_mode:
        for check in result["checks"]:
            if check["status"] == "fail" and any(
                fnmatch.fnmatchcase(check["id"], pattern) for pattern in module.params["require"]
            ):
                failing.append(check)
    if failing:
        module.fail_json(
            msg="; ".join("%s: %s" % (x["id"], x["message"]) for x in failing),
            ansible_facts=ansible_facts,
            failed_checks=[x["id"] for x in failing],
        )
    module.exit_json(changed=False, ansible_facts=ansible_facts, waited=waited)


if __name__ == "__main__":
    main()
