"""Converge from the check (issue 22): a provisioning run skips the role of a component whose checks
all pass. Safe by construction: every task that can change a host names, in a `# checked by:` line
above it, the check ids that would see its target differ; a change task without one fails here
(then either a check is added, or the task moves where it always runs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import conftest  # noqa: F401 - puts the collection on sys.path
import pytest
import yaml
from ansible_collections.provision.gpu.plugins.module_utils import check_catalogue as catalog
from ansible_collections.provision.gpu.plugins.modules import host_assess as sp

REPO = Path(__file__).resolve().parents[2]
# role -> the components whose convergence skips it (playbooks/site.yml)
GATED = {
    "nvidia_repo": ("repo",),
    "nvidia_driver": ("driver",),
    "cuda_toolkit": ("cuda",),
    "cuda_library": ("cudnn", "nccl"),
    "cudnn": ("cudnn",),
    "nccl": ("nccl",),
    "cuda_env": ("env",),
    "pytorch": ("pytorch",),
}
READ_ONLY = {
    "provision.gpu.host_assess", "provision.gpu.host_lock", "ansible.builtin.set_fact",
    "ansible.builtin.assert", "ansible.builtin.debug", "ansible.builtin.include_tasks",
    "ansible.builtin.import_tasks", "ansible.builtin.include_role", "ansible.builtin.import_role",
    "ansible.builtin.meta", "ansible.builtin.fail", "ansible.builtin.stat", "ansible.builtin.slurp",
    "ansible.builtin.include_vars", "ansible.builtin.validate_argument_spec",
    "ansible.builtin.wait_for", "ansible.builtin.wait_for_connection", "ansible.builtin.pause",
    "ansible.builtin.getent", "ansible.builtin.package_facts", "ansible.builtin.setup",
    "ansible.builtin.async_status",
}
TASK_KEYS = {
    "name", "when", "loop", "loop_control", "register", "changed_when", "failed_when", "check_mode",
    "notify", "tags", "become", "vars", "block", "rescue", "always", "until", "retries", "delay",
    "environment", "no_log", "ignore_errors", "listen", "async", "poll", "delegate_to", "run_once",
    "args", "throttle", "timeout", "any_errors_fatal", "become_user",
}


def _tasks(items: Any) -> list[dict[str, Any]]:
    out = []
    for t in items or []:
        if not isinstance(t, dict):
            continue
        for key in ("block", "rescue", "always"):
            out += _tasks(t.get(key))
        if "block" not in t:
            out.append(t)
    return out


def change_tasks() -> list[tuple[str, Path, dict[str, Any], str | None]]:
    """(role, file, task, its `# checked by:` text or None) for every task that can change a host
    in a role a converged component skips."""
    found = []
    for role in GATED:
        for path in sorted((REPO / "roles" / role).glob("*/*.yml")):
            if path.parent.name not in ("tasks", "handlers"):
                continue
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            for task in _tasks(yaml.safe_load(text)):
                module = next((k for k in task if k not in TASK_KEYS), None)
                if module in READ_ONLY or str(task.get("changed_when")).lower() == "false":
                    continue
                head = re.compile(r"\s*- name: ['\"]?" + re.escape(task["name"]) + r"['\"]?")
                at = next(i for i, ln in enumerate(lines) if head.fullmatch(ln))
                above = lines[at - 1].strip() if at else ""
                note = above.split("# checked by:", 1)[1].strip() if "# checked by:" in above \
                    else None
                found.append((role, path, task, note))
    return found


def test_the_scan_sees_the_change_tasks() -> None:
    names = {t["name"] for _, _, t, _ in change_tasks()}
    assert "Pin the driver packages to the branch or version (apt preferences)" in names
    assert "Write the login-shell profile script" in names
    assert "Reboot to load the NVIDIA driver" in names  # handlers too
    assert len(names) > 40


def test_every_change_task_names_the_checks_that_see_its_target() -> None:
    ids = set(catalog.CATALOG)
    problems = []
    repo_notes = {t["name"]: n for r, _, t, n in change_tasks() if r == "nvidia_repo"}
    for role, path, task, note in change_tasks():
        where = f"{path.relative_to(REPO)}: {task['name']}"
        if note is None:
            problems.append(f"{where}: no `# checked by:` line")
            continue
        if note == "never (EL)":
            # allowed only where the probe never converges the component on the Red Hat family
            if not ("dnf" in path.name and all((c, "redhat") in sp.NEVER_CONVERGED
                                                for c in GATED[role])):
                problems.append(f"{where}: 'never (EL)' but the component converges on EL")
            continue
        allowed = set(GATED[role])
        for comp in GATED[role]:
            allowed |= set(sp.CONVERGE_AFTER.get(comp, ()))
        for cid in note.split():
            if cid not in ids:
                problems.append(f"{where}: {cid} is not a check id")
            elif cid.split(".")[0] not in allowed and repo_notes.get(task["name"]) != note:
                # another component's check only for a repair its own role does first
                problems.append(f"{where}: {cid} is not a check of {role}'s component")
    assert problems == []


def test_site_skips_exactly_the_gated_roles_of_converged_components() -> None:
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text(encoding="utf-8"))
    play = next(p for p in site if p["name"] == "Provision the GPU training stack")
    block = next(t for t in play["tasks"] if t.get("name") == "Provision")["block"]
    gates = {(t.get("ansible.builtin.import_role") or t["ansible.builtin.include_role"])["name"]
             .split(".")[-1]: t.get("when")
             for t in block
             if "ansible.builtin.import_role" in t or "ansible.builtin.include_role" in t}
    # a gated role is included (one skipped task when converged) and its tasks carry its tag
    for t in block:
        if "ansible.builtin.include_role" in t:
            role = t["ansible.builtin.include_role"]["name"].split(".")[-1]
            assert t["ansible.builtin.include_role"]["apply"]["tags"] == [role] == t["tags"]
    for role, comps in GATED.items():
        if role == "cuda_library":
            continue  # included by the cudnn and nccl roles
        assert gates[role] == f"not (provision_converged.{comps[0]} | default(false))", role
    assert gates["preflight"] is None
    assert gates["validation"] == "gpu_stack_validation_enabled | bool"


def _checks(**status: str) -> list[dict[str, str]]:
    comps = ["repo", "driver", "cuda", "cudnn", "nccl", "env", "pytorch"]
    return [{"id": f"{c}.x", "status": status.get(c, "pass")} for c in comps]


ALL = ["preflight", "repo", "driver", "cuda", "cudnn", "nccl", "env", "pytorch"]


def test_all_passing_converges_every_component() -> None:
    done = sp.converged_components(ALL, _checks(), "debian")
    assert done == dict.fromkeys(ALL[1:], True)


@pytest.mark.parametrize(("bad", "runs"), [
    ({"pytorch": "drift"}, {"pytorch"}),
    ({"env": "fail"}, {"env"}),
    ({"cuda": "fail"}, {"cuda", "env", "repo"}),
    ({"driver": "drift"}, {"driver", "pytorch", "repo"}),
    ({"nccl": "fail"}, {"nccl", "repo"}),
    ({"repo": "drift"}, {"repo"}),
])
def test_a_component_that_differs_runs_with_what_builds_on_it(bad: dict[str, str],
                                                              runs: set[str]) -> None:
    done = sp.converged_components(ALL, _checks(**bad), "debian")
    assert {c for c, ok in done.items() if not ok} == runs


def test_the_repository_always_runs_on_el_and_a_component_without_checks_never_converges() -> None:
    done = sp.converged_components(ALL, _checks(), "redhat")
    assert {c for c, ok in done.items() if not ok} == {"repo"}
    checks = [x for x in _checks() if x["id"] != "cuda.x"]
    done = sp.converged_components(ALL, checks, "debian")
    assert {c for c, ok in done.items() if not ok} == {"cuda", "env", "repo"}
