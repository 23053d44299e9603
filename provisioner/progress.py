"""Progress on stderr (live table on a TTY, one plain line per task result otherwise) and the
final per-host summary.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from provisioner.events import RunState, TaskResult
from provisioner.report_model import HostReport, Report
from provisioner.ssh_preflight import SshProbeResult

_MARK = {
    "ok": "ok",
    "changed": "changed",
    "failed": "FAILED",
    "skipped": "skipped",
    "unreachable": "UNREACHABLE",
    "ignored": "failed (ignored)",
}


def plain_line(r: TaskResult) -> str:
    where = f"{r.role} : {r.task}" if r.role else r.task
    msg = f" | {r.message.splitlines()[0][:300]}" if r.message else ""
    return f"{r.host} | {_MARK.get(r.outcome, r.outcome)} | {where}{msg}"


class Progress:
    """Feeds events to a RunState and renders them."""

    def __init__(
        self,
        state: RunState,
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
        verbosity: int = 0,
    ) -> None:
        self.state = state
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.verbosity = verbosity
        self._live: Any = None
        self._start = time.monotonic()

    def __enter__(self) -> Progress:
        if self.live:
            from rich.console import Console  # noqa: PLC0415 - lazy
            from rich.live import Live  # noqa: PLC0415

            console = Console(file=self.stream)
            self._live = Live(self._table(), console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(None, None, None)
            self._live = None

    def on_event(self, event: dict[str, Any]) -> None:
        result = self.state.feed(event)
        line: str | None = None
        if self.verbosity > 1:
            line = str(event.get("stdout") or "") or None  # Ansible's own output, every event
        elif result is not None and (result.outcome != "skipped" or self.verbosity > 0):
            line = plain_line(result)
        if self._live is not None:
            if line is not None and self.verbosity > 0:
                self._live.console.print(line, markup=False, highlight=False)
            elif result is not None and result.outcome in ("failed", "unreachable"):
                self._live.console.print(f"[red]{plain_line(result)}[/red]", markup=True)
            self._live.update(self._table())
            return
        if line is not None:
            print(line, file=self.stream, flush=True)

    def _table(self) -> Any:  # noqa: ANN401 - a rich renderable
        from rich.table import Table  # noqa: PLC0415

        t = Table(title=f"provision: {self.state.play or 'starting'}", expand=False)
        t.add_column("host", no_wrap=True, min_width=8, max_width=32, overflow="ellipsis")
        t.add_column("role", no_wrap=True, min_width=6, max_width=16, overflow="ellipsis")
        t.add_column("task", no_wrap=True, min_width=10, max_width=36, overflow="ellipsis")
        for col in ("ok", "changed", "failed", "elapsed"):
            t.add_column(col, no_wrap=True, justify="right", min_width=len(col))
        for h in self.state.hosts.values():
            failed = ("unreachable" if h.unreachable else str(h.failed))
            t.add_row(h.name, h.role, h.task, str(h.ok), str(h.changed), failed,
                      f"{h.elapsed():.0f}s")
        return t


def ssh_preflight_lines(results: list[SshProbeResult]) -> list[str]:
    lines = []
    for r in results:
        if r.status == "ok" and r.scope == "connection":
            lines.append(
                f"preflight {r.host}: ok ({r.os_name or r.os_id}, {r.arch}, kernel {r.kernel}; "
                f"GPUs, driver and Python read by the check) in {r.seconds:.1f}s"
            )
        elif r.status == "ok":
            others = len(r.gpus) - r.gpu_count
            gpus = f"{r.gpu_count} GPU(s)" + (f" + {others} other NVIDIA" if others else "")
            gpus = gpus if r.lspci_available else "lspci n/a"
            drv = r.driver_version or "no driver"
            lines.append(
                f"preflight {r.host}: ok ({r.os_name or r.os_id}, {r.arch}, kernel {r.kernel}, "
                f"python {r.python}, {gpus}, {drv}) in {r.seconds:.1f}s"
            )
        elif r.status == "skipped":
            lines.append(f"preflight {r.host}: skipped ({r.message})")
        else:
            lines.append(f"preflight {r.host}: {r.status.upper()} at {r.stage}: {r.message}")
        lines.extend(f"preflight {r.host}: warning: {w}" for w in r.warnings)
    return lines


def summary_table(report: Report, stream: TextIO) -> None:
    """The final per-host summary (always printed)."""
    rows = []
    for name, e in report.hosts.items():
        c = e.counts
        bad = [f"{x.id}={x.status}" for x in e.bad_checks()]
        rows.append(
            [
                name,
                e.status,
                str(c.get("ok", "-")),
                str(c.get("changed", "-")),
                str(c.get("failed", "-")),
                f"{sum(1 for x in e.checks if x.status == 'pass')}/{len(e.checks)}",
                str(e.facts.get("driver_version") or "-"),
                ", ".join(bad)[:80] or e.message[:80],
            ]
        )
    header = ["host", "status", "ok", "changed", "failed", "checks", "driver", "problems"]
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
              for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    print(fmt.format(*header), file=stream)
    for r in rows:
        print(fmt.format(*r), file=stream)
    for name, e in report.hosts.items():
        headline = validation_headline(e.validation)
        if headline:
            print(f"{name}: {headline}", file=stream)
    # `check` shows every drift with expected and actual; other runs the first few per host
    for line in problem_lines(report.hosts, per_host=None if report.command == "check" else 12):
        print(line, file=stream)
    s = report.summary
    parts = [f"{s.get(k, 0)} {k}" for k in ("ok", "changed", "drift", "failed", "unreachable")]
    if s.get("interrupted"):
        parts.append(f"{s['interrupted']} interrupted")
    print(
        f"{report.command} {report.run_id}: {s.get('hosts', 0)} host(s): "
        + ", ".join(parts)
        + f"; {report.duration_s:.1f}s; exit {report.exit_code}",
        file=stream,
    )
    if report.artifacts:
        print(f"Artifacts: {report.artifacts}", file=stream)
    for path in report.report_files:
        print(f"Report: {path}", file=stream)


def _num(value: object, digits: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "n/a"
    return f"{value:.{digits}f}"


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def validation_headline(v: dict[str, Any] | None) -> str | None:
    """One line from report.json `validation` (the validation program's node result): all-reduce
    busbw vs its threshold, DDP scaling efficiency, straggler ratio, loss first -> last."""
    if not isinstance(v, dict) or not v:
        return None
    thr, ar = _dict(v.get("thresholds")), _dict(v.get("allreduce"))
    summary = _dict(_dict(v.get("ddp")).get("summary"))
    passed = v.get("passed")
    status = v.get("status") or ("pass" if passed is True else "fail" if passed is False else None)
    busbw = ar.get("judged_busbw_gbps", v.get("allreduce_busbw_gbps"))
    limit = thr.get("allreduce_busbw_gbps")
    parts = [f"all-reduce busbw {_num(busbw, 2)} GB/s"
             + (f" (threshold >= {_num(limit, 2)})" if limit is not None else " (not judged)")]
    if summary:
        eff, eff_min = summary.get("scaling_efficiency"), thr.get("ddp_scaling_efficiency")
        ratios = [r for r in (summary.get("rank_perf_ratio") or {}).values()
                  if isinstance(r, int | float)]
        ratio_min = thr.get("straggler_ratio")
        parts.append(f"DDP scaling efficiency {_num(eff, 2)}"
                     + (f" (min {_num(eff_min, 2)})" if eff_min is not None else ""))
        parts.append(f"straggler ratio {_num(min(ratios) if ratios else None, 2)}"
                     + (f" (min {_num(ratio_min, 2)})" if ratio_min is not None else ""))
        parts.append(f"loss {_num(summary.get('loss_first'), 3)} -> "
                     f"{_num(summary.get('loss_last'), 3)}")
    return f"validation {str(status or 'n/a').upper()}: " + ", ".join(parts)


def problem_lines(hosts: dict[str, HostReport], per_host: int | None = 12) -> list[str]:
    """Each failing or drifting check with expected, actual and the remediation hint."""
    lines: list[str] = []
    for name, e in hosts.items():
        bad = e.bad_checks()
        for c in bad[:per_host]:
            lines.append(
                f"{name}: {c.id} {c.status.upper()}: expected {c.expected!r}, "
                f"actual {c.actual!r}" + (f"; {c.message}" if c.message else "")
            )
            if c.remediation:
                lines.append(f"{' ' * len(name)}  fix: {c.remediation}")
            if c.action:
                lines.append(f"{' ' * len(name)}  action: {c.action}")
        if per_host is not None and len(bad) > per_host:
            lines.append(f"{name}: ... {len(bad) - per_host} more in report.json")
        lines.extend(f"{name}: {c.id} WARNING: {c.warning}" for c in e.checks if c.warning)
    return lines


def json_summary(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2)
