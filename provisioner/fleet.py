"""Fleet view of validation results (issue 19 item 3): a host whose all-reduce bus bandwidth is
more than a set percentage below the median of the hosts with the same GPU model.

A relative rule next to the stack's absolute floor (`validation.thresholds.allreduce_busbw_gbps`):
a floor set for the slowest acceptable host misses one that is well below its peers yet above the
floor; the median of the same GPU model moves with the fleet's driver, NCCL and topology.
Pure functions over a stored Report (report.json): no I/O.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from provisioner.report_model import HostReport, Report

# How far below the median of its GPU model a host's busbw may fall before it is flagged, in %.
# Source: huggingface/gpu-fryer:README.md (`--tflops-tolerance`, default 10: a GPU more than 10 %
# below the best GPU of the system fails). Adapted to hosts and to the median, which is less strict
# than the best: one fast host does not move it, and a majority of healthy peers defines it.
# Confidence: medium (the 10 % is gpu-fryer's for TFLOPS; no published figure for NCCL busbw).
BUSBW_BELOW_MEDIAN_PCT = 10.0
# A median of one or two hosts says nothing about what is typical: smaller groups are listed, not
# judged.
MIN_PEERS = 3


@dataclass(frozen=True)
class BusbwRow:
    """One host's all-reduce busbw against the median of its GPU model."""

    host: str
    gpu_model: str
    busbw_gbps: float
    median_gbps: float | None  # None: fewer than MIN_PEERS hosts of this model have a value
    peers: int
    below_pct: float | None
    flagged: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu_model": self.gpu_model,
            "busbw_gbps": self.busbw_gbps,
            "median_gbps": self.median_gbps,
            "peers": self.peers,
            "below_median_pct": self.below_pct,
            "flagged": self.flagged,
        }


def host_busbw(entry: HostReport) -> float | None:
    """The all-reduce busbw (GB/s) the validation judged on this host, else None: the same value
    the summary prints (report.json `validation.allreduce.judged_busbw_gbps`, older reports
    `validation.allreduce_busbw_gbps`)."""
    v: dict[str, Any] = entry.validation if isinstance(entry.validation, dict) else {}
    raw = v.get("allreduce")
    ar: dict[str, Any] = raw if isinstance(raw, dict) else {}
    value = ar.get("judged_busbw_gbps", v.get("allreduce_busbw_gbps"))
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def busbw_rows(report: Report, below_pct: float = BUSBW_BELOW_MEDIAN_PCT) -> list[BusbwRow]:
    """Every host with a busbw, grouped by GPU model (report facts `gpu_model`), sorted by model
    and host; a host is flagged when it is more than `below_pct` % below its group's median."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for name, entry in report.hosts.items():
        value = host_busbw(entry)
        if value is not None:
            model = str(entry.facts.get("gpu_model") or "unknown")
            groups.setdefault(model, []).append((name, value))
    rows = []
    for model in sorted(groups):
        members = sorted(groups[model])
        median = statistics.median(v for _h, v in members) if len(members) >= MIN_PEERS else None
        for name, value in members:
            below = None if median is None else round((median - value) / median * 100.0, 1)
            rows.append(
                BusbwRow(
                    host=name,
                    gpu_model=model,
                    busbw_gbps=value,
                    median_gbps=median,
                    peers=len(members),
                    below_pct=below,
                    flagged=below is not None and below > below_pct,
                )
            )
    return rows


def format_rows(rows: list[BusbwRow], below_pct: float) -> list[str]:
    """Terminal lines: one per GPU model, then one per host (FLAG on the flagged ones)."""
    lines: list[str] = []
    model = None
    for r in rows:
        if r.gpu_model != model:
            model = r.gpu_model
            if r.median_gbps is None:
                lines.append(
                    f"{model}: {r.peers} host(s), median not judged (fewer than {MIN_PEERS})"
                )
            else:
                lines.append(
                    f"{model}: {r.peers} hosts, median {r.median_gbps:.2f} GB/s, "
                    f"flag below {100.0 - below_pct:g} % of it"
                )
        mark = "FLAG" if r.flagged else "ok" if r.median_gbps is not None else "-"
        below = f" ({r.below_pct:.1f} % below median)" if r.below_pct is not None else ""
        if r.below_pct is not None and r.below_pct < 0:
            below = f" ({-r.below_pct:.1f} % above median)"
        lines.append(f"  {mark:<4} {r.host}  {r.busbw_gbps:.2f} GB/s{below}")
    return lines
