"""Threshold lookup by (GPU model, topology, GPU count, backend); no torch, no YAML required.

The data file (thresholds.yml) is YAML; the role converts it to JSON on the controller so targets
need no PyYAML. ``load()`` reads either (YAML only if PyYAML is importable).
"""

from __future__ import annotations

import fnmatch
import json

OVERRIDE_KEYS = ("allreduce_busbw_gbps", "ddp_scaling_efficiency", "straggler_ratio")
TOPOLOGIES = ("nvswitch", "nvlink", "pcie", "network", "none")
CPU_NOTE = "backend gloo on CPU: GPU thresholds not applicable"


def load(path: str) -> dict:
    """Read the threshold data (JSON, or YAML when PyYAML is available)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return json.loads(text)
    except ValueError:
        import yaml  # only needed for YAML input

        return yaml.safe_load(text)


def _count_matches(spec, count: int) -> bool:
    if spec is None:
        return True
    if isinstance(spec, (list, tuple)):
        lo, hi = spec
        return int(lo) <= count <= int(hi)
    return int(spec) == count


def _model_matches(patterns, model: str) -> bool:
    if not patterns:
        return True
    m = (model or "").lower()
    return any(fnmatch.fnmatchcase(m, p.lower()) for p in patterns)


def row_matches(row: dict, model: str, topology: str, count: int, backend: str) -> bool:
    if row.get("backend", "nccl") != backend:
        return False
    if backend == "gloo":
        return True
    return (
        _model_matches(row.get("models"), model)
        and (row.get("topology") in (None, topology))
        and _count_matches(row.get("gpus"), count)
    )


def lookup(data: dict, model: str | None, topology: str | None, count: int, backend: str,
           overrides: dict | None = None) -> dict:
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
    result = {
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
            "performance-anchors.md); reported, not judged unless validation_thresholds sets "
            "allreduce_busbw_gbps")
    elif found is None:
        result["note"] = (
            "no threshold row for %s x%d (%s, %s): bandwidth reported, not judged; scaling "
            "efficiency judged against the %s default"
            % (model or "unknown GPU", int(count), topo, backend, topo)
        )
    for key, value in (overrides or {}).items():
        if key not in OVERRIDE_KEYS:
            raise ValueError(
                "unknown threshold override %r (allowed: %s)" % (key, ", ".join(OVERRIDE_KEYS))
            )
        if value is None or value == "":
            continue
        result[key] = float(value)
        result["overridden"].append(key)
    if result["overridden"]:
        result["source"] = "override (%s) over %s" % (
            ", ".join(result["overridden"]), result["row"] or "no row")
    return result
