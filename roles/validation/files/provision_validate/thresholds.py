"""Threshold lookup by (GPU model, topology, GPU count, backend); no torch, no YAML required.

The data file (thresholds.yml) is YAML; the role converts it to JSON on the controller so targets
need no PyYAML. ``load()`` reads either (YAML only if PyYAML is importable).
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any, List, Tuple, Union

OVERRIDE_KEYS = ("allreduce_busbw_gbps", "ddp_scaling_efficiency", "straggler_ratio")
TOPOLOGIES = ("nvswitch", "nvlink", "pcie", "network", "none")
CPU_NOTE = "backend gloo on CPU: GPU thresholds not applicable"

# a row's "gpus": one count, or an inclusive [lo, hi] range (numbers or numeric strings)
GpuCount = Union[int, str, List[Union[int, str]], Tuple[Union[int, str], ...], None]


def load(path: str) -> dict[str, Any]:
    """Read the threshold data (JSON, or YAML when PyYAML is available)."""
    text = Path(path).read_text(encoding="utf-8")
    data: dict[str, Any]
    try:
        data = json.loads(text)
    except ValueError:
        import yaml  # noqa: PLC0415 - optional: only YAML input needs PyYAML (targets get JSON)

        data = yaml.safe_load(text)
    return data


def _count_matches(spec: GpuCount, count: int) -> bool:
    if spec is None:
        return True
    if isinstance(spec, (list, tuple)):
        lo, hi = spec
        return int(lo) <= count <= int(hi)
    return int(spec) == count


def _model_matches(patterns: list[str] | None, model: str) -> bool:
    if not patterns:
        return True
    m = (model or "").lower()
    return any(fnmatch.fnmatchcase(m, p.lower()) for p in patterns)


def row_matches(row: dict[str, Any], model: str, topology: str, count: int, backend: str) -> bool:
    if row.get("backend", "nccl") != backend:
        return False
    if backend == "gloo":
        return True
    return (
        _model_matches(row.get("models"), model)
        and (row.get("topology") in (None, topology))
        and _count_matches(row.get("gpus"), count)
    )


def lookup(  # noqa: PLR0917 - the lookup key, then overrides: callers pass all positionally
    data: dict[str, Any], model: str | None, topology: str | None, count: int, backend: str,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Thresholds that apply to this node.

    Returns a dict with allreduce_busbw_gbps, ddp_scaling_efficiency, straggler_ratio (numbers or
    None = not judged), row (matched row id or None), source, confidence, note, and
    ``overridden`` (the keys replaced by ``overrides``).
    """
    defaults = data.get("defaults", {})
    topo = topology if topology in TOPOLOGIES else "none"
    found = None
    for row in data.get("rows", []):
        if row_matches(row, model or "", topo, int(count), backend):
            found = row
            break
    eff_default = (defaults.get("ddp_scaling_efficiency") or {}).get(topo)
    result: dict[str, Any] = {
        "backend": backend,
        "model": model,
        "topology": topo,
        "gpus": int(count),
        "row": None,
        "allreduce_busbw_gbps": None,
        "ddp_scaling_efficiency": eff_default if backend != "gloo" else None,
        "straggler_ratio": defaults.get("straggler_ratio", 0.7),
        "bandwidth_retries": int(defaults.get("bandwidth_retries", 1)),
        "source": None,
        "confidence": None,
        "note": "",
        "overridden": [],
    }
    if found is not None:
        result["row"] = found.get("id")
        for key in OVERRIDE_KEYS:
            if key in found:
                result[key] = found[key]
        result["source"] = " ".join(str(found.get("source", "")).split())
        result["confidence"] = found.get("confidence")
    if backend == "gloo":
        result["note"] = CPU_NOTE
    elif found is None and topo == "network":
        result["note"] = (
            "multi-node NCCL: busbw is bound by the NICs (~0.92-0.96 x NICs x rate per node, "
            "NVIDIA/nccl-tests:doc/PERFORMANCE.md bus bandwidth); reported, not judged unless "
            "gpu_stack_validation_thresholds sets "
            "allreduce_busbw_gbps")
    elif found is None:
        result["note"] = (
            f"no threshold row for {model or 'unknown GPU'} x{int(count)} ({topo}, {backend}): "
            f"bandwidth reported, not judged; scaling efficiency judged against the {topo} default"
        )
    for key, value in (overrides or {}).items():
        if key not in OVERRIDE_KEYS:
            raise ValueError(
                f"unknown threshold override {key!r} (allowed: {', '.join(OVERRIDE_KEYS)})"
            )
        if value is None or value == "":
            continue
        result[key] = float(value)
        result["overridden"].append(key)
    if result["overridden"]:
        result["source"] = (
            f"override ({', '.join(result['overridden'])}) over {result['row'] or 'no row'}")
    return result
