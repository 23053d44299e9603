"""The report model: one run's result, shared by session, reports, progress and history.

report.json is `Report.to_dict()`; history files are read back with `Report.from_dict()`, which
accepts reports of earlier versions (missing keys take their defaults) and raises
`ReportFormatError` for anything that is not a report (a JSON list, a host that is not a mapping).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHECK_STATUSES = ("pass", "drift", "fail", "skip")
# `interrupted`: the host's Ansible run did not finish (Ctrl-C or SIGTERM during the play)
HOST_STATUSES = ("ok", "changed", "drift", "failed", "unreachable", "interrupted")
# What training really uses is torch's own (bundled) NCCL and cuDNN, not the system NCCL and cuDNN
# packages (the default torch bundles a newer cuDNN major than the system package): both are
# reported, named so that neither is read as the other.
FACT_KEYS = (
    "gpu_count",
    "gpu_model",
    "driver_version",
    "cuda_version",
    "system_cudnn_version",
    "system_nccl_version",
    "torch_version",
    "torch_cuda",
    "torch_bundled_cudnn_version",
    "torch_bundled_nccl_version",
)
SUMMARY_KEYS = ("hosts", *HOST_STATUSES)


class ReportFormatError(ValueError):
    """A document that is not a provision report."""


def _mapping(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReportFormatError(f"{what}: expected a mapping, got {type(value).__name__}")
    return value


def _text(value: object) -> str:
    return "" if value is None else str(value)


@dataclass
class Check:
    """One check of a host: `{id, status, expected, actual, message, remediation, role}`."""

    id: str
    status: str
    expected: Any = None
    actual: Any = None
    message: str = ""
    remediation: str = ""
    role: str = ""
    # health checks (issue 19): the action of the ladder (monitor .. service) and one finding
    # per GPU {gpu: {index, bus_id, uuid}, figure, threshold, action, message}
    action: str = ""
    findings: list[dict[str, Any]] = field(default_factory=list)
    # a passing check that still needs attention (driver.branch_support past NVIDIA's end of
    # support): shown in the summary, junit.xml and provision.prom; the status and exit code stay
    warning: str = ""

    @property
    def bad(self) -> bool:
        return self.status in ("fail", "drift")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "expected": self.expected,
            "actual": self.actual,
            "message": self.message,
            "remediation": self.remediation,
            "role": self.role,
            **({"action": self.action} if self.action else {}),
            **({"findings": self.findings} if self.findings else {}),
            **({"warning": self.warning} if self.warning else {}),
        }

    @classmethod
    def from_dict(cls, raw: object) -> Check:
        d = _mapping(raw, "check")
        if not d.get("id"):
            raise ReportFormatError("check without an id")
        return cls(
            id=str(d["id"]),
            status=_text(d.get("status")) or "fail",
            expected=d.get("expected"),
            actual=d.get("actual"),
            message=_text(d.get("message")),
            remediation=_text(d.get("remediation")),
            role=_text(d.get("role")),
            action=_text(d.get("action")),
            findings=[f for f in d.get("findings") or [] if isinstance(f, dict)]
            if isinstance(d.get("findings"), list)
            else [],
            warning=_text(d.get("warning")),
        )


def full_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """The documented fact keys first (None when a host did not report them), then the rest."""
    out = {k: facts.get(k) for k in FACT_KEYS}
    out.update({k: v for k, v in facts.items() if k not in out})
    return out


@dataclass
class HostReport:
    """One host of a run."""

    status: str
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    message: str = ""
    preflight: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.facts = full_facts(self.facts)

    def bad_checks(self) -> list[Check]:
        return [c for c in self.checks if c.bad]

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "status": self.status,
            "checks": [c.to_dict() for c in self.checks],
            "facts": dict(self.facts),
            "validation": self.validation,
            "counts": dict(self.counts),
            "message": self.message,
        }
        if self.preflight is not None:
            entry["preflight"] = self.preflight
        return entry

    @classmethod
    def from_dict(cls, raw: object, name: str = "host") -> HostReport:
        d = _mapping(raw, f"host {name}")
        checks = d.get("checks") or []
        if not isinstance(checks, list):
            raise ReportFormatError(f"host {name}: checks is not a list")
        validation = d.get("validation")
        preflight = d.get("preflight")
        return cls(
            status=_text(d.get("status")) or "failed",
            checks=[Check.from_dict(c) for c in checks],
            facts=dict(_mapping(d.get("facts") or {}, f"host {name}: facts")),
            validation=validation if isinstance(validation, dict) else None,
            counts={str(k): int(v) for k, v in (d.get("counts") or {}).items()
                    if isinstance(v, int)},
            message=_text(d.get("message")),
            preflight=preflight if isinstance(preflight, dict) else None,
        )


@dataclass
class HostDiff:
    """What changed for one host between two reports."""

    host: str
    status: tuple[str | None, str | None] = (None, None)
    new_problems: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return (
            self.status[0] == self.status[1]
            and not (self.new_problems or self.resolved or self.versions or self.other)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": {"before": self.status[0], "after": self.status[1]},
            "new_problems": self.new_problems,
            "resolved": self.resolved,
            "versions": self.versions,
            "other": self.other,
        }


@dataclass
class Changes:
    """`check`: what changed per host since the previous check of the same hosts."""

    since: str | None
    hosts: list[HostDiff] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "hosts": [d.to_dict() for d in self.hosts]}


def summarize(hosts: dict[str, HostReport]) -> dict[str, int]:
    out = dict.fromkeys(HOST_STATUSES, 0)
    for h in hosts.values():
        out[h.status] = out.get(h.status, 0) + 1
    out["hosts"] = len(hosts)
    return out


@dataclass
class Report:
    """One run: what report.json, junit.xml, provision.prom, the summary and the history hold."""

    command: str
    run_id: str
    hosts: dict[str, HostReport] = field(default_factory=dict)
    version: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    started: str = ""
    finished: str = ""
    finished_ts: float = 0.0
    duration_s: float = 0.0
    check_mode: bool = False
    run_status: str = "successful"
    ansible_rc: int = 0
    exit_code: int = 0
    stack: dict[str, Any] = field(default_factory=dict)
    stack_source: str = ""
    stack_warnings: list[str] = field(default_factory=list)
    artifacts: str | None = None
    changes: Changes | None = None
    report_files: list[str] = field(default_factory=list)
    schema: int = 1
    tool: str = "provision"

    @property
    def summary(self) -> dict[str, int]:
        return summarize(self.hosts)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema,
            "tool": self.tool,
            "version": self.version,
            "versions": dict(self.versions),
            "command": self.command,
            "run_id": self.run_id,
            "started": self.started,
            "finished": self.finished,
            "finished_ts": self.finished_ts,
            "duration_s": self.duration_s,
            "check_mode": self.check_mode,
            "run_status": self.run_status,
            "ansible_rc": self.ansible_rc,
            "exit_code": self.exit_code,
            "stack": self.stack,
            "stack_source": self.stack_source,
            "stack_warnings": list(self.stack_warnings),
            "artifacts": self.artifacts,
            "summary": self.summary,
            "hosts": {name: h.to_dict() for name, h in self.hosts.items()},
        }
        if self.changes is not None:
            out["changes"] = self.changes.to_dict()
        if self.report_files:
            out["report_files"] = list(self.report_files)
        return out

    @classmethod
    def from_dict(cls, raw: object) -> Report:
        d = _mapping(raw, "report")
        hosts = _mapping(d.get("hosts") or {}, "report hosts")
        changes = d.get("changes")
        try:
            return cls(
                command=_text(d.get("command")),
                run_id=_text(d.get("run_id")),
                hosts={str(n): HostReport.from_dict(h, str(n)) for n, h in hosts.items()},
                version=_text(d.get("version")),
                versions={str(k): str(v) for k, v in (d.get("versions") or {}).items()},
                started=_text(d.get("started")),
                finished=_text(d.get("finished")),
                finished_ts=float(d.get("finished_ts") or 0.0),
                duration_s=float(d.get("duration_s") or 0.0),
                check_mode=bool(d.get("check_mode")),
                run_status=_text(d.get("run_status")) or "successful",
                ansible_rc=int(d.get("ansible_rc") or 0),
                exit_code=int(d.get("exit_code") or 0),
                stack=dict(d.get("stack") or {}),
                stack_source=_text(d.get("stack_source")),
                stack_warnings=[str(w) for w in d.get("stack_warnings") or []],
                artifacts=None if d.get("artifacts") is None else str(d["artifacts"]),
                changes=_changes(changes) if isinstance(changes, dict) else None,
                report_files=[str(p) for p in d.get("report_files") or []],
                schema=int(d.get("schema") or 1),
                tool=_text(d.get("tool")) or "provision",
            )
        except ReportFormatError:
            raise
        except (TypeError, AttributeError, ValueError) as exc:
            raise ReportFormatError(f"report: {exc}") from exc


def _changes(d: dict[str, Any]) -> Changes:
    out = Changes(since=None if d.get("since") is None else str(d["since"]))
    for h in d.get("hosts") or []:
        if isinstance(h, dict):
            st = h.get("status") or {}
            out.hosts.append(HostDiff(
                host=str(h.get("host")),
                status=(st.get("before"), st.get("after")),
                new_problems=list(h.get("new_problems") or []),
                resolved=list(h.get("resolved") or []),
                versions=list(h.get("versions") or []),
                other=list(h.get("other") or []),
            ))
    return out
