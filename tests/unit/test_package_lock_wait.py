"""Issue 20 item 8: every role that changes packages waits (bounded) for the dpkg/apt or rpm locks
before its first package step, not only the first three roles: a fresh cloud instance runs
unattended-upgrades for minutes, past apt's own 60 s lock timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
PACKAGE_MODULES = ("ansible.builtin.apt", "ansible.builtin.dnf", "ansible.builtin.package")


def _tasks(path: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load(path.read_text(encoding="utf-8")) or [])


def _changes_packages(role: Path) -> bool:
    for path in (role / "tasks").glob("*.yml"):
        for task in _tasks(path):
            if any(m in task for m in PACKAGE_MODULES):
                return True
    return False


def test_every_role_with_a_package_step_waits_for_the_package_locks_first() -> None:
    roles = [r for r in sorted(ROLES.iterdir()) if (r / "tasks").is_dir() and _changes_packages(r)]
    assert {r.name for r in roles} >= {
        "nvidia_repo",
        "nvidia_driver",
        "cuda_toolkit",
        "cuda_library",
        "pytorch",
    }
    for role in roles:
        tasks = _tasks(role / "tasks" / "main.yml")
        first_probe = next(t for t in tasks if "provision.gpu.host_assess" in t)
        first_probe_at = tasks.index(first_probe)
        first_package = next(
            (i for i, t in enumerate(tasks) if any(m in t for m in PACKAGE_MODULES)), len(tasks)
        )
        assert first_probe_at < first_package, role.name
        args = first_probe["provision.gpu.host_assess"]
        assert args.get("wait_timeout_s") == "{{ gpu_stack_wait_timeout_s }}", (role.name, args)
