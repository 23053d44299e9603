"""What changed between two reports, per host: new problems, resolved ones, version changes."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from provisioner.report_model import FACT_KEYS, Check, HostDiff, HostReport, Report

__all__ = ["HostDiff", "diff_host", "diff_reports", "format_diff"]


def _checks(entry: HostReport | None) -> dict[str, Check]:
    return {c.id: c for c in (entry.checks if entry else [])}


def diff_host(host: str, old: HostReport | None, new: HostReport | None) -> HostDiff:
    d = HostDiff(host, (old.status if old else None, new.status if new else None))
    if old is None:
        d.other.append("host not in the earlier run")
    if new is None:
        d.other.append("host not in the later run")
    oc, nc = _checks(old), _checks(new)
    for cid, c in nc.items():
        before = oc[cid].status if cid in oc else None
        if c.bad and before != c.status:
            d.new_problems.append(
                f"{cid}: {before or 'absent'} -> {c.status} "
                f"(expected {c.expected!r}, actual {c.actual!r})"
            )
        elif before in ("drift", "fail") and not c.bad:
            d.resolved.append(f"{cid}: {before} -> {c.status}")
    _health_diff(d, oc, nc)
    for cid, c in oc.items():
        if cid not in nc and old is not None and new is not None and c.bad:
            d.other.append(f"{cid}: {c.status} -> not reported")
    if old is not None and new is not None:
        of, nf = old.facts, new.facts
        for k in FACT_KEYS:
            if of.get(k) != nf.get(k) and (of.get(k) is not None or nf.get(k) is not None):
                d.versions.append(f"{k}: {of.get(k)} -> {nf.get(k)}")
    return d


def diff_reports(old: Report, new: Report) -> list[HostDiff]:
    names = list(new.hosts) + [h for h in old.hosts if h not in new.hosts]
    return [diff_host(h, old.hosts.get(h), new.hosts.get(h)) for h in names]


def format_diff(diffs: list[HostDiff], *, only_changed: bool = True) -> list[str]:
    lines: list[str] = []
    for d in diffs:
        if only_changed and d.empty:
            continue
        before, after = (s or "absent" for s in d.status)  # a host in one run only
        head = f"{d.host}: {before} -> {after}" if before != after else f"{d.host}: {after}"
        lines.append(head)
        lines.extend(f"  new problem: {x}" for x in d.new_problems)
        lines.extend(f"  resolved: {x}" for x in d.resolved)
        lines.extend(f"  version: {x}" for x in d.versions)
        lines.extend(f"  {x}" for x in d.other)
    return lines


# ------------------------------------------------------------------ health findings (issue 19)


def _finding_key(cid: str, f: dict[str, object]) -> str:
    gpu = f.get("gpu") if isinstance(f.get("gpu"), dict) else {}
    assert isinstance(gpu, dict)
    where = gpu.get("uuid") or gpu.get("bus_id") or "host"
    return f"{cid} {where}: {f.get('figure')} (action {f.get('action')})"


def _health_diff(d: HostDiff, old: dict[str, Check], new: dict[str, Check]) -> None:
    """New and resolved health findings (per GPU and figure), beside the check-level lines."""

    def keys(checks: dict[str, Check]) -> set[str]:
        return {
            _finding_key(cid, f)
            for cid, c in checks.items()
            if cid.startswith("health.")
            for f in c.findings
            if isinstance(f, dict) and f.get("action") not in (None, "", "none")
        }

    before, after = keys(old), keys(new)
    d.new_problems.extend(f"health finding: {k}" for k in sorted(after - before))
    d.resolved.extend(f"health finding: {k}" for k in sorted(before - after))


def expected_gpu_counts(
    reports: Iterable[Report], hosts: Collection[str] | None = None
) -> dict[str, int]:
    """Host -> GPU count of its newest passing report (reports newest first): the expected
    count of health.gpu_count when the inventory sets none. With `hosts`, reading stops once each
    of them has a count (a nightly check over a passing fleet reads one report, not thirty)."""
    out: dict[str, int] = {}
    wanted = set(hosts) if hosts is not None else None
    for rep in reports:
        for host, entry in rep.hosts.items():
            count = entry.facts.get("gpu_count")
            if host in out or entry.status not in ("ok", "changed"):
                continue
            if isinstance(count, int) and count > 0:
                out[host] = count
        if wanted is not None and wanted <= out.keys():
            break
    return out
