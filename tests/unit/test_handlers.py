"""Issue 11 item 3: a host that fails after the nouveau blacklist changed must not lose the
initramfs rebuild. Two mechanisms, either one enough: the play forces handlers on failure, and the
driver role flushes them right after its last notifying task (before the long installs that follow
and before the reboot). The lab cannot rebuild an initramfs (no kernel), so this reads the plays and
the role as Ansible will run them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
HANDLER = "Rebuild the initramfs"


def _tasks(path: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load(path.read_text(encoding="utf-8")) or [])


def _notifies(task: dict[str, Any]) -> bool:
    notify = task.get("notify") or []
    return HANDLER in ([notify] if isinstance(notify, str) else notify)


def test_the_handler_exists_and_the_full_run_forces_handlers() -> None:
    handlers = _tasks(REPO / "roles/nvidia_driver/handlers/main.yml")
    assert HANDLER in [h["name"] for h in handlers]
    plays = _tasks(REPO / "playbooks/site.yml")
    with_roles = [p for p in plays if p.get("roles") or p.get("tasks")]
    assert with_roles
    for play in with_roles:
        assert play.get("force_handlers") is True, play["name"]


def test_every_install_path_flushes_the_initramfs_handler_after_notifying_it() -> None:
    files = sorted((REPO / "roles/nvidia_driver/tasks").glob("install-*.yml"))
    assert {f.name for f in files} >= {"install-apt.yml", "install-dnf.yml"}
    for path in files:
        tasks = _tasks(path)
        notifying = [i for i, t in enumerate(tasks) if _notifies(t)]
        assert notifying, f"{path.name}: nothing notifies {HANDLER!r}"
        flushes = [
            i
            for i, t in enumerate(tasks)
            if t.get("ansible.builtin.meta") == "flush_handlers" and i > max(notifying)
        ]
        assert flushes, f"{path.name}: no flush_handlers after the last notify of {HANDLER!r}"
