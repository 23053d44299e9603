"""Runner events -> per-host state: counts, current role/task, collected checks, facts, validation.

Pure: no I/O, no ansible_runner import. Fed one event dict at a time (live, or from recorded
`job_events/*.json`). Contract (docs/architecture.md): roles publish `<role>_checks` (list),
`<role>_report` (dict) and `validation_result` with set_fact; the last event wins per key.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from provisioner import report_model as model
from provisioner import support

CHECK_STATUSES = model.CHECK_STATUSES
HOST_STATUSES = model.HOST_STATUSES

# Tasks that fail a host because a check it recorded failed: no extra `<role>.task` check for them.
# The probe module fails with its checks in the result when a required check fails.
_ASSERTS = frozenset(
    {"assert", "ansible.builtin.assert", "fail", "ansible.builtin.fail", "ansible.legacy.assert",
     "provision.gpu.host_assess", "provision.gpu.host_lock"}
)
_MAX_MSG = 2000
_LOOP_MSGS = ("One or more items failed", "All items completed")


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "; ".join(_text(v) for v in value)
    return str(value)


# dpkg's own error and its indented reason ("No space left on device"): apt runs dpkg on a pty,
# so they reach the task's stdout, while apt's stderr says only "dpkg returned an error code (1)"
_DPKG_ERROR = re.compile(r"^dpkg: error.*(?:\n[ \t]+\S.*)*", re.MULTILINE)


def _dpkg_errors(res: dict[str, Any]) -> list[str]:
    return [m.group(0).strip() for m in _DPKG_ERROR.finditer(_text(res.get("stdout")))]


def _failure_message(res: dict[str, Any]) -> str:
    parts = [_text(res.get("msg"))]
    for key in ("stderr", "module_stderr"):
        if res.get(key):
            parts.append(_text(res[key]).strip())
    if (not parts[0] or parts[0] in _LOOP_MSGS) and res.get("results"):
        # a loop: Ansible's own msg says only that an item failed; the items say what failed
        # (apt's "Failed to fetch URL", the command's error, the lost connection)
        items = [r for r in res["results"]
                 if isinstance(r, dict) and (r.get("failed") or r.get("unreachable"))]
        parts = [p for r in items for p in (*_dpkg_errors(r), _text(r.get("msg")))] or parts
    else:
        parts = [*_dpkg_errors(res), *parts]
    msg = " | ".join(p for p in parts if p)
    return msg[:_MAX_MSG] or "task failed"


# The fact the collection's probe module (provision.gpu.host_assess) publishes its checks in; the
# role that owns each check id prefix is in the support table (provisioner/data/support.yml).
SHARED_CHECKS = "provision_checks"


def owner_of(raw: object) -> str:
    """The role that owns a check, from its id prefix (`driver.hold` -> nvidia_driver)."""
    cid = str(raw.get("id", "")) if isinstance(raw, dict) else ""
    prefix = cid.split(".", 1)[0]
    return support.role_of_component().get(prefix, prefix or "play")


def normalize_check(raw: object, role: str) -> dict[str, Any] | None:
    """A check as published by a role, made safe: all six keys, a known status."""
    if not isinstance(raw, dict) or not raw.get("id"):
        return None
    status = str(raw.get("status", "fail")).lower()
    if status not in CHECK_STATUSES:
        status = "fail"
    return {
        "id": str(raw["id"]),
        "status": status,
        "expected": raw.get("expected"),
        "actual": raw.get("actual"),
        "message": _text(raw.get("message")),
        "remediation": _text(raw.get("remediation")),
        "role": role,
        **_health_fields(raw),
    }


def _health_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """A health check's action and findings (issue 19), kept when present."""
    out: dict[str, Any] = {}
    if raw.get("action"):
        out["action"] = _text(raw["action"])
    findings = raw.get("findings")
    if isinstance(findings, list) and findings:
        out["findings"] = [f for f in findings if isinstance(f, dict)][:64]
    if raw.get("warning"):  # a passing check that needs attention (driver.branch_support)
        out["warning"] = _text(raw["warning"])
    return out


@dataclass
class HostState:
    name: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    ignored: int = 0
    unreachable: bool = False
    unreachable_msg: str = ""
    role: str = ""
    task: str = ""
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    # role fact key -> list of checks (last event wins); order of first appearance kept
    check_lists: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    synthesized: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] | None = None

    @property
    def checks(self) -> list[dict[str, Any]]:
        merged: dict[str, dict[str, Any]] = {}
        for lst in self.check_lists.values():
            for c in lst:
                merged[c["id"]] = c
        for c in self.synthesized:
            merged.setdefault(c["id"], c)
        return list(merged.values())

    def has_check_status(self, status: str) -> bool:
        return any(c["status"] == status for c in self.checks)

    def status(self, *, check_mode: bool = False) -> str:
        if self.unreachable:
            return "unreachable"
        if self.failed or self.has_check_status("fail"):
            return "failed"
        if self.has_check_status("drift") or (check_mode and self.changed):
            return "drift"
        if self.changed:
            return "changed"
        return "ok"

    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started


@dataclass
class TaskResult:
    """What a progress renderer needs to print one line per task result."""

    host: str
    outcome: str  # ok | changed | failed | skipped | unreachable | ignored
    role: str
    task: str
    message: str = ""


EARLY_LINES = 5  # ansible-playbook's output lines kept from before the first host result

_Handler = Callable[["RunState", HostState, dict[str, Any]], TaskResult | None]


class RunState:
    """Accumulates events of one playbook run."""

    def __init__(self, *, check_mode: bool = False) -> None:
        self.check_mode = check_mode
        self.hosts: dict[str, HostState] = {}
        self.play: str = ""
        self.role: str = ""
        self.task: str = ""
        self.stats_seen = False
        # ansible-playbook's own output before any host result (an import error, "ERROR! ..."):
        # the last lines, to say why a run ended before a host ran
        self.early_output: list[str] = []

    def host(self, name: str) -> HostState:
        if name not in self.hosts:
            self.hosts[name] = HostState(name=name)
        return self.hosts[name]

    def feed(self, event: dict[str, Any]) -> TaskResult | None:
        """Apply one event; returns a TaskResult for per-task-result events."""
        kind = str(event.get("event", ""))
        data: dict[str, Any] = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = str(data.get("play", ""))
        elif kind == "playbook_on_task_start":
            self.role = str(data.get("role") or "")
            self.task = str(data.get("task") or "")
        elif kind == "playbook_on_stats":
            self.stats_seen = True
            now = time.monotonic()
            for h in self.hosts.values():
                h.finished = h.finished or now
        elif data.get("host") and kind in self._HANDLERS:
            handler = self._HANDLERS[kind]
            return handler(self, self.host(str(data["host"])), data)
        elif kind in ("verbose", "error") and not self.hosts:
            lines = [ln.strip() for ln in str(event.get("stdout") or "").splitlines()]
            self.early_output = [*self.early_output, *(ln for ln in lines if ln)][-EARLY_LINES:]
        return None

    def early_error(self) -> str:
        """The last line ansible-playbook printed before any host result ('' when none)."""
        return self.early_output[-1] if self.early_output else ""

    def _on_start(self, h: HostState, data: dict[str, Any]) -> None:
        h.role, h.task = str(data.get("role") or ""), str(data.get("task") or "")

    def _on_ok(self, h: HostState, data: dict[str, Any]) -> TaskResult:
        role, task = str(data.get("role") or ""), str(data.get("task") or "")
        res: dict[str, Any] = data.get("res") or {}
        self._collect(h, res, role)
        if res.get("changed"):
            h.changed += 1
            if self.check_mode:
                self._pending(h, role, task)
            return TaskResult(h.name, "changed", role, task)
        h.ok += 1
        return TaskResult(h.name, "ok", role, task)

    def _on_failed(self, h: HostState, data: dict[str, Any]) -> TaskResult:
        role, task = str(data.get("role") or ""), str(data.get("task") or "")
        msg = _failure_message(data.get("res") or {})
        if data.get("ignore_errors"):
            h.ignored += 1
            return TaskResult(h.name, "ignored", role, task, msg)
        h.failed += 1
        res = data.get("res") or {}
        if isinstance(res, dict):
            self._collect(h, res, role)  # a failing probe still returns its checks and facts
        self._synthesize_failure(h, role, task, str(data.get("task_action") or ""), msg)
        return TaskResult(h.name, "failed", role, task, msg)

    def _on_skipped(self, h: HostState, data: dict[str, Any]) -> TaskResult:
        h.skipped += 1
        role, task = str(data.get("role") or ""), str(data.get("task") or "")
        return TaskResult(h.name, "skipped", role, task)

    def _on_unreachable(self, h: HostState, data: dict[str, Any]) -> TaskResult:
        h.unreachable = True
        h.unreachable_msg = _failure_message(data.get("res") or {})
        return TaskResult(
            h.name, "unreachable", str(data.get("role") or ""), str(data.get("task") or ""),
            h.unreachable_msg,
        )

    _HANDLERS: ClassVar[dict[str, _Handler]] = {
        "runner_on_start": _on_start,
        "runner_on_ok": _on_ok,
        "runner_on_failed": _on_failed,
        "runner_on_skipped": _on_skipped,
        "runner_on_unreachable": _on_unreachable,
    }

    def _collect(self, h: HostState, res: dict[str, Any], role: str) -> None:
        facts = res.get("ansible_facts")
        if not isinstance(facts, dict):
            return
        for key, value in facts.items():
            if key == SHARED_CHECKS and isinstance(value, list):
                # the collection's probe publishes partial lists (one role's component at a time):
                # merged by check id, a later record of an id replacing the earlier one
                merged = {c["id"]: c for c in h.check_lists.get(key, [])}
                for v in value:
                    c = normalize_check(v, owner_of(v))
                    if c:
                        merged[c["id"]] = c
                h.check_lists[key] = list(merged.values())
            elif key.endswith("_checks") and isinstance(value, list):
                owner = key[: -len("_checks")]
                checks = [c for c in (normalize_check(v, owner) for v in value) if c]
                h.check_lists[key] = checks
            elif key.endswith("_report") and isinstance(value, dict):
                h.facts.update(value)
            elif key == "validation_result" and isinstance(value, dict):
                h.validation = value

    def _synthesize_failure(
        self, h: HostState, role: str, task: str, action: str, msg: str
    ) -> None:
        # A role that recorded a failing check fails the host with an assert: no extra check.
        if action in _ASSERTS and h.has_check_status("fail"):
            return
        h.synthesized.append(
            {
                "id": f"{role or 'play'}.task",
                "status": "fail",
                "expected": "task succeeds",
                "actual": f"failed: {task}" if task else "failed",
                "message": msg,
                "remediation": "see the task error above; rerun with -v for details",
                "role": role or "play",
            }
        )

    def _pending(self, h: HostState, role: str, task: str) -> None:
        """In check mode a task that would change the host is drift, reported as a check."""
        cid = f"{role or 'play'}.pending"
        for c in h.synthesized:
            if c["id"] == cid:
                c["actual"] = f"{c['actual']}; {task}"
                return
        h.synthesized.append(
            {
                "id": cid,
                "status": "drift",
                "expected": "no change needed",
                "actual": f"would change: {task}",
                "message": f"{role or 'play'}: tasks would change the host",
                "remediation": "run `provision` on this host to converge it",
                "role": role or "play",
            }
        )

    def apply_stats(self, stats: dict[str, dict[str, int]]) -> None:
        """Final stats from ansible-runner: make sure hosts only seen there exist and flags hold."""
        for host, n in (stats.get("dark") or {}).items():
            if n:
                h = self.host(host)
                h.unreachable = True
        for key in ("ok", "changed", "failures", "skipped"):
            for host in stats.get(key) or {}:
                self.host(host)
