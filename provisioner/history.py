"""What changed between two reports, per host: new problems, resolved ones, version changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provisioner.reports import FACT_KEYS

_BAD = ("drift", "fail")


@dataclass
class HostDiff:
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


def _checks(entry: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in (entry or {}).get("checks") or []}


def diff_host(host: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> HostDiff:
    d = HostDiff(host, ((old or {}).get("status"), (new or {}).get("status")))
    if old is None:
        d.other.append("host not in the earlier run")
    if new is None:
        d.other.append("host not in the later run")
    oc, nc = _checks(old), _checks(new)
    for cid, c in nc.items():
        before = oc.get(cid, {}).get("status")
        if c["status"] in _BAD and before != c["status"]:
            d.new_problems.append(
                f"{cid}: {before or 'absent'} -> {c['status']} "
                f"(expected {c.get('expected')!r}, actual {c.get('actual')!r})"
            )
        elif before in _BAD and c["status"] not in _BAD:
            d.resolved.append(f"{cid}: {before} -> {c['status']}")
    for cid, c in oc.items():
        if cid not in nc and old is not None and new is not None and c["status"] in _BAD:
            d.other.append(f"{cid}: {c['status']} -> not reported")
    of, nf = (old or {}).get("facts") or {}, (new or {}).get("facts") or {}
    if old is not None and new is not None:
        for k in FACT_KEYS:
            if of.get(k) != nf.get(k) and (of.get(k) is not None or nf.get(k) is not None):
                d.versions.append(f"{k}: {of.get(k)} -> {nf.get(k)}")
    return d


def diff_reports(old: dict[str, Any], new: dict[str, Any]) -> list[HostDiff]:
    oh: dict[str, Any] = old.get("hosts", {})
    nh: dict[str, Any] = new.get("hosts", {})
    names = list(nh) + [h for h in oh if h not in nh]
    return [diff_host(h, oh.get(h), nh.get(h)) for h in names]


def format_diff(diffs: list[HostDiff], *, only_changed: bool = True) -> list[str]:
    lines: list[str] = []
    for d in diffs:
        if only_changed and d.empty:
            continue
        before, after = d.status
        head = f"{d.host}: {before} -> {after}" if before != after else f"{d.host}: {after}"
        lines.append(head)
        lines.extend(f"  new problem: {x}" for x in d.new_problems)
        lines.extend(f"  resolved: {x}" for x in d.resolved)
        lines.extend(f"  version: {x}" for x in d.versions)
        lines.extend(f"  {x}" for x in d.other)
    return lines
