"""Report writers: report.json, junit.xml (a testsuite per host), provision.prom (textfile).

All writes are atomic (temp file + rename), so node_exporter's textfile collector and CI never
read a half-written file.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner.events import CHECK_STATUSES, HOST_STATUSES
from provisioner.state import atomic_write_text

REPORT_JSON = "report.json"
JUNIT_XML = "junit.xml"
PROM_FILE = "provision.prom"
FACT_KEYS = (
    "gpu_count",
    "gpu_model",
    "driver_version",
    "cuda_version",
    "cudnn_version",
    "nccl_version",
    "torch_version",
    "torch_cuda",
)
INFO_LABELS = tuple(k for k in FACT_KEYS if k != "gpu_count")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def host_entry(
    *,
    status: str,
    checks: list[dict[str, Any]],
    facts: dict[str, Any],
    validation: dict[str, Any] | None,
    counts: dict[str, int] | None = None,
    message: str = "",
    preflight: dict[str, Any] | None = None,
) -> dict[str, Any]:
    full_facts = {k: facts.get(k) for k in FACT_KEYS}
    full_facts.update({k: v for k, v in facts.items() if k not in full_facts})
    entry: dict[str, Any] = {
        "status": status,
        "checks": checks,
        "facts": full_facts,
        "validation": validation,
        "counts": counts or {},
        "message": message,
    }
    if preflight is not None:
        entry["preflight"] = preflight
    return entry


def summarize(hosts: dict[str, dict[str, Any]]) -> dict[str, int]:
    out = {s: 0 for s in HOST_STATUSES}
    for h in hosts.values():
        out[h["status"]] = out.get(h["status"], 0) + 1
    out["hosts"] = len(hosts)
    return out


def write_json(report: dict[str, Any], path: Path) -> None:
    atomic_write_text(path, json.dumps(report, indent=2) + "\n")


# ---------------------------------------------------------------- junit.xml


def _case_detail(check: dict[str, Any]) -> str:
    lines = [
        f"expected: {check.get('expected')}",
        f"actual: {check.get('actual')}",
    ]
    if check.get("message"):
        lines.append(f"message: {check['message']}")
    if check.get("remediation"):
        lines.append(f"remediation: {check['remediation']}")
    return "\n".join(lines)


def junit_xml(report: dict[str, Any]) -> str:
    """One <testsuite> per host, one <testcase> per check; drift and fail are failures."""
    suites = ET.Element("testsuites", name=f"provision {report.get('command', '')}".strip())
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    duration = float(report.get("duration_s") or 0.0)
    for host, entry in report.get("hosts", {}).items():
        suite = ET.SubElement(suites, "testsuite", name=host)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        checks = list(entry.get("checks") or [])
        probe = entry.get("preflight") or {}
        preflight_failed = probe.get("status") in ("unreachable", "failed")
        if (entry["status"] == "unreachable" and not preflight_failed) or not checks:
            checks.append(
                {
                    "id": "provision.host",
                    "status": {"unreachable": "error", "failed": "fail", "drift": "drift"}.get(
                        entry["status"], "pass"
                    ),
                    "expected": "reachable, converged",
                    "actual": entry["status"],
                    "message": entry.get("message") or "",
                    "remediation": "",
                }
            )
        for check in checks:
            classname = f"{host}.{check.get('role') or 'provision'}"
            case = ET.SubElement(suite, "testcase", name=str(check["id"]), classname=classname)
            counts["tests"] += 1
            status = check["status"]
            if entry["status"] == "unreachable" and str(check["id"]).startswith("ssh."):
                status = "error"  # unreachable in the SSH preflight: an <error> (docs/cli.md)
            msg = str(check.get("message") or f"{check['id']}: {status}")
            if status in ("fail", "drift"):
                el = ET.SubElement(case, "failure", message=msg, type=status)
                el.text = _case_detail(check)
                counts["failures"] += 1
            elif status == "error":
                el = ET.SubElement(case, "error", message=msg, type="unreachable")
                el.text = _case_detail(check)
                counts["errors"] += 1
            elif status == "skip":
                ET.SubElement(case, "skipped", message=msg)
                counts["skipped"] += 1
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="status", value=str(entry["status"]))
        for k, v in (entry.get("facts") or {}).items():
            if v is not None and not isinstance(v, dict | list):
                ET.SubElement(props, "property", name=f"fact.{k}", value=str(v))
        # properties first, as consumers expect
        suite.remove(props)
        suite.insert(0, props)
        for k, v in counts.items():
            suite.set(k, str(v))
            total[k] += v
        suite.set("time", f"{duration:.3f}")
        suite.set("timestamp", str(report.get("started", ""))[:19])
        suite.set("hostname", host)
    for k, v in total.items():
        suites.set(k, str(v))
    suites.set("time", f"{duration:.3f}")
    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"


# ---------------------------------------------------------------- provision.prom


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: object) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


def _num(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def prom_text(report: dict[str, Any]) -> str:
    """node_exporter textfile format."""
    cmd = str(report.get("command", ""))
    hosts: dict[str, dict[str, Any]] = report.get("hosts", {})
    out: list[str] = []

    def family(name: str, help_text: str, rows: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} gauge")
        out.extend(f"{name}{labels} {_num(v)}" for labels, v in rows)

    family(
        "provision_check_status",
        "Check result per host and check: 1 for the check's current status, 0 for the others.",
        [
            (_labels(host=h, check=c["id"], status=s), 1.0 if c["status"] == s else 0.0)
            for h, e in hosts.items()
            for c in e.get("checks") or []
            for s in CHECK_STATUSES
        ],
    )
    family(
        "provision_host_status",
        "Host result of the run: 1 for the host's status, 0 for the others.",
        [
            (_labels(host=h, status=s), 1.0 if e["status"] == s else 0.0)
            for h, e in hosts.items()
            for s in HOST_STATUSES
        ],
    )
    family(
        "provision_host_info",
        "Versions found on the host, as labels (value is always 1).",
        [
            (
                _labels(
                    host=h,
                    **{k: "" if (e.get("facts") or {}).get(k) is None else e["facts"][k]
                       for k in INFO_LABELS},
                ),
                1.0,
            )
            for h, e in hosts.items()
        ],
    )
    gpu_rows = []
    for h, e in hosts.items():
        n = (e.get("facts") or {}).get("gpu_count")
        if isinstance(n, int | float) and not isinstance(n, bool):
            gpu_rows.append((_labels(host=h), float(n)))
    family("provision_host_gpu_count", "GPUs found on the host.", gpu_rows)
    family(
        "provision_run_timestamp_seconds",
        "Unix time the run finished.",
        [(_labels(command=cmd), float(report.get("finished_ts") or 0.0))],
    )
    family(
        "provision_run_duration_seconds",
        "Wall time of the run.",
        [(_labels(command=cmd), float(report.get("duration_s") or 0.0))],
    )
    family(
        "provision_run_exit_code",
        "Exit code of the run (0 ok, 1 failed, 3 unreachable, 5 drift, ...).",
        [(_labels(command=cmd), float(report.get("exit_code") or 0))],
    )
    family(
        "provision_build_info",
        "Version of provision that wrote this file (value is always 1).",
        [(_labels(version=report.get("version", "")), 1.0)],
    )
    return "\n".join(out) + "\n"


def write_all(report: dict[str, Any], directory: Path) -> list[Path]:
    """report.json, junit.xml and provision.prom into `directory`, each atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / REPORT_JSON, directory / JUNIT_XML, directory / PROM_FILE]
    write_json(report, paths[0])
    atomic_write_text(paths[1], junit_xml(report))
    atomic_write_text(paths[2], prom_text(report))
    return paths
