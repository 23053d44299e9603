"""The result's shape: goal entries, medians, the P7 projection, and the shape check that the smoke
test (tests/lab/test_bench_smoke.py) and the unit tests use.

Every goal entry is {"value": float|null, "goal": float|null, "unit": str, "met": bool|null,
"runs": [...]} plus optional detail keys; an entry that could not be measured has value and met
null, "measured": false and a "reason". Nothing is ever filled in that was not measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

GOAL_KEYS = ("P1", "P2", "check_cpu_s_per_host", "check_tasks_per_host", "P3", "P7", "P4")
RECORD_KEYS = ("help_startup_s", "first_ssh_s", "validation_s", "fleet_check")
GOALS: dict[str, tuple[float | None, str, str]] = {
    # key: (goal, unit, comparison) - met when value <= goal (all goals are upper bounds)
    "P1": (1.05, "ratio", "<="),
    "P2": (0.5, "ratio", "<="),
    "check_cpu_s_per_host": (1.5, "CPU-s/host", "<="),
    "check_tasks_per_host": (15.0, "tasks/host", "<="),
    "P3": (None, "s", ""),
    "P7": (3.0, "min", "<="),
    "P4": (1.0, "refreshes/host/run", "<="),
}


def median(values: Iterable[float]) -> float:
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("median of nothing")
    return float(statistics.median(vals))


def goal_entry(key: str, value: float, runs: Sequence[Any], **detail: Any) -> dict[str, Any]:  # noqa: ANN401
    goal, unit, _cmp = GOALS[key]
    met = None if goal is None else bool(value <= goal)
    return {
        "value": round(float(value), 4),
        "goal": goal,
        "unit": unit,
        "met": met,
        "runs": list(runs),
        "measured": True,
        **detail,
    }


def not_measured(key: str, reason: str, runs: Sequence[Any] = (), **detail: Any) -> dict[str, Any]:  # noqa: ANN401
    goal, unit, _cmp = GOALS[key]
    return {
        "value": None,
        "goal": goal,
        "unit": unit,
        "met": None,
        "runs": list(runs),
        "measured": False,
        "reason": reason,
        **detail,
    }


def record(value: float | None, unit: str, runs: Sequence[Any], reason: str = "", **detail: Any) -> dict[str, Any]:  # noqa: ANN401,E501
    """A figure recorded without a goal."""
    out: dict[str, Any] = {
        "value": None if value is None else round(float(value), 4),
        "goal": None,
        "unit": unit,
        "met": None,
        "runs": list(runs),
        "measured": value is not None,
        **detail,
    }
    if value is None:
        out["reason"] = reason or "not measured"
    return out


@dataclass(frozen=True)
class Projection:
    """A nightly check of `nodes` hosts from one controller with `cores` cores at `forks` forks.

    cpu_bound_s  = nodes x controller CPU-s per host / cores (the controller's cores all busy)
    wave_bound_s = ceil(nodes / forks) x per-host wall time (hosts run in waves of `forks`)
    projected    = the larger of the two: either the CPU or the waves limit the run.
    """

    nodes: int
    cores: int
    forks: int
    cpu_s_per_host: float
    wall_s_per_host: float

    @property
    def cpu_bound_s(self) -> float:
        return self.nodes * self.cpu_s_per_host / self.cores

    @property
    def waves(self) -> int:
        return math.ceil(self.nodes / self.forks)

    @property
    def wave_bound_s(self) -> float:
        return self.waves * self.wall_s_per_host

    @property
    def minutes(self) -> float:
        return max(self.cpu_bound_s, self.wave_bound_s) / 60.0

    @property
    def limit(self) -> str:
        return "controller CPU" if self.cpu_bound_s >= self.wave_bound_s else "waves of forks"

    def arithmetic(self) -> list[str]:
        return [
            f"CPU bound:   {self.nodes} hosts x {self.cpu_s_per_host:.3f} CPU-s/host / "
            f"{self.cores} cores = {self.cpu_bound_s:.1f} s",
            f"waves bound: ceil({self.nodes} / {self.forks} forks) = {self.waves} waves x "
            f"{self.wall_s_per_host:.2f} s/host = {self.wave_bound_s:.1f} s",
            f"projected:   max({self.cpu_bound_s:.1f}, {self.wave_bound_s:.1f}) s = "
            f"{self.minutes:.2f} min (limited by {self.limit})",
        ]


# ------------------------------------------------------------------------------------ shape check
def _type_problems(name: str, entry: dict[str, Any]) -> list[str]:
    value, goal, met, unit = entry["value"], entry["goal"], entry["met"], entry["unit"]
    checks = [
        (value is None or (isinstance(value, float) and not isinstance(value, bool)),
         f"value {value!r} is not a float"),
        (goal is None or isinstance(goal, float), f"goal {goal!r} is not a float"),
        (isinstance(unit, str) and bool(unit), f"unit {unit!r}"),
        (met is None or isinstance(met, bool), f"met {met!r} is not a bool"),
        (isinstance(entry["runs"], list), "runs is not a list"),
    ]
    return [f"{name}: {text}" for ok, text in checks if not ok]


def entry_problems(name: str, entry: Any) -> list[str]:  # noqa: ANN401
    """What is wrong with one entry's shape (empty when it is right)."""
    if not isinstance(entry, dict):
        return [f"{name}: not an object"]
    missing = [k for k in ("value", "goal", "unit", "met", "runs") if k not in entry]
    if missing:
        return [f"{name}: no {k!r}" for k in missing]
    problems = _type_problems(name, entry)
    if entry["value"] is None:
        if entry["met"] is not None:
            problems.append(f"{name}: met without a value")
        if not entry.get("reason"):
            problems.append(f"{name}: no value and no reason")
    elif entry["goal"] is not None and entry["met"] is None:
        problems.append(f"{name}: a value and a goal but no met")
    return problems


def _goal_problems(data: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for key in GOAL_KEYS:
        if key not in data:
            problems.append(f"no {key}")
            continue
        problems += entry_problems(key, data[key])
        expected = GOALS[key][0]
        if isinstance(data[key], dict) and data[key].get("goal") != expected:
            problems.append(f"{key}: goal {data[key].get('goal')!r}, expected {expected!r}")
    return problems


def _record_problems(records: Any) -> list[str]:  # noqa: ANN401
    if not isinstance(records, dict):
        return ["no records"]
    problems: list[str] = []
    for key in RECORD_KEYS:
        if key not in records:
            problems.append(f"records: no {key}")
        else:
            problems += entry_problems(f"records.{key}", records[key])
    return problems


def result_problems(data: Any) -> list[str]:  # noqa: ANN401
    """Shape problems of a whole result (bench/results/<date>.json)."""
    if not isinstance(data, dict):
        return ["not an object"]
    problems = _goal_problems(data) + _record_problems(data.get("records"))
    for key in ("machine", "settings"):
        if not isinstance(data.get(key), dict):
            problems.append(f"no {key}")
    if not isinstance(data.get("findings"), list):
        problems.append("no findings list")
    p3, p7 = data.get("P3"), data.get("P7")
    if isinstance(p3, dict) and p3.get("value") is not None and not p3.get("sizes"):
        problems.append("P3: no sizes")
    if isinstance(p7, dict) and p7.get("value") is not None and not p7.get("arithmetic"):
        problems.append("P7: no arithmetic")
    return problems
