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

from provisioner.report_model import CHECK_STATUSES, FACT_KEYS, HOST_STATUSES, Check, Report
from provisioner.state import atomic_write_text

REPORT_JSON = "report.json"
JUNIT_XML = "junit.xml"
PROM_FILE = "provision.prom"
INFO_LABELS = tuple(k for k in FACT_KEYS if k != "gpu_count")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def report_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def write_json(report: Report, path: Path) -> None:
    atomic_write_text(path, report_json(report))


# ---------------------------------------------------------------- junit.xml


def _gpu_of(finding: dict[str, Any]) -> dict[str, Any]:
    """The GPU a health finding names ({index, bus_id, uuid}), {} when it names none."""
    gpu = finding.get("gpu")
    return gpu if isinstance(gpu, dict) else {}


def _case_detail(check: Check) -> str:
    lines = [f"expected: {check.expected}", f"actual: {check.actual}"]
    if check.message:
        lines.append(f"message: {check.message}")
    if check.remediation:
        lines.append(f"remediation: {check.remediation}")
    if check.action:
        lines.append(f"action: {check.action}")
    for f in check.findings:
        gpu = _gpu_of(f)
        lines.append(
            f"finding: GPU {gpu.get('index')} {gpu.get('bus_id')} {gpu.get('uuid')}: "
            f"{f.get('figure')} (threshold {f.get('threshold')}), action {f.get('action')}"
        )
    return "\n".join(lines)


_HOST_CASE_STATUS = {
    "unreachable": "error", "interrupted": "error", "failed": "fail", "drift": "drift",
}


def junit_xml(report: Report) -> str:
    """One <testsuite> per host, one <testcase> per check; drift and fail are failures."""
    suites = ET.Element("testsuites", name=f"provision {report.command}".strip())
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    duration = float(report.duration_s or 0.0)
    for host, entry in report.hosts.items():
        suite = ET.SubElement(suites, "testsuite", name=host)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        checks = list(entry.checks)
        probe = entry.preflight or {}
        preflight_failed = probe.get("status") in ("unreachable", "failed")
        lost = entry.status == "interrupted" or (
            entry.status == "unreachable" and not preflight_failed
        )
        if lost or not checks:
            checks.append(
                Check(
                    id="provision.host",
                    status=_HOST_CASE_STATUS.get(entry.status, "pass"),
                    expected="reachable, converged",
                    actual=entry.status,
                    message=entry.message,
                )
            )
        for check in checks:
            classname = f"{host}.{check.role or 'provision'}"
            case = ET.SubElement(suite, "testcase", name=check.id, classname=classname)
            counts["tests"] += 1
            status = check.status
            if entry.status == "unreachable" and check.id.startswith("ssh."):
                status = "error"  # unreachable in the SSH preflight: an <error> (docs/cli.md)
            msg = check.message or f"{check.id}: {status}"
            if status in ("fail", "drift"):
                el = ET.SubElement(case, "failure", message=msg, type=status)
                el.text = _case_detail(check)
                counts["failures"] += 1
            elif status == "error":
                kind = "interrupted" if entry.status == "interrupted" else "unreachable"
                el = ET.SubElement(case, "error", message=msg, type=kind)
                el.text = _case_detail(check)
                counts["errors"] += 1
            elif status == "skip":
                ET.SubElement(case, "skipped", message=msg)
                counts["skipped"] += 1
            if check.warning:  # a passing check that needs attention: not a failure
                out = ET.SubElement(case, "system-out")
                out.text = f"warning: {check.warning}"
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="status", value=entry.status)
        for k, v in entry.facts.items():
            if v is not None and not isinstance(v, dict | list):
                ET.SubElement(props, "property", name=f"fact.{k}", value=str(v))
        # properties first, as consumers expect
        suite.remove(props)
        suite.insert(0, props)
        for k, v in counts.items():
            suite.set(k, str(v))
            total[k] += v
        suite.set("time", f"{duration:.3f}")
        suite.set("timestamp", report.started[:19])
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


def prom_text(report: Report) -> str:
    """node_exporter textfile format."""
    cmd = report.command
    hosts = report.hosts
    out: list[str] = []

    def family(name: str, help_text: str, rows: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} gauge")
        out.extend(f"{name}{labels} {_num(v)}" for labels, v in rows)

    family(
        "provision_check_status",
        "Check result per host and check: 1 for the check's current status, 0 for the others.",
        [
            (_labels(host=h, check=c.id, status=s), 1.0 if c.status == s else 0.0)
            for h, e in hosts.items()
            for c in e.checks
            for s in CHECK_STATUSES
        ],
    )
    family(
        "provision_check_warning",
        "Checks that pass but need attention (driver.branch_support past NVIDIA's end of "
        "support): one series per host and check, value is always 1.",
        [(_labels(host=h, check=c.id), 1.0) for h, e in hosts.items() for c in e.checks
         if c.warning],
    )
    family(
        "provision_host_status",
        "Host result of the run: 1 for the host's status, 0 for the others.",
        [
            (_labels(host=h, status=s), 1.0 if e.status == s else 0.0)
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
                    **{k: "" if e.facts.get(k) is None else e.facts[k] for k in INFO_LABELS},
                ),
                1.0,
            )
            for h, e in hosts.items()
        ],
    )
    gpu_rows = []
    for h, e in hosts.items():
        n = e.facts.get("gpu_count")
        if isinstance(n, int | float) and not isinstance(n, bool):
            gpu_rows.append((_labels(host=h), float(n)))
    family("provision_host_gpu_count", "GPUs found on the host.", gpu_rows)
    family(
        "provision_health_finding",
        "Health findings (issue 19): one series per GPU and check, with the action of the ladder "
        "(monitor, drain, reset_gpu, reboot, service); value is always 1.",
        [
            (
                _labels(
                    host=h,
                    check=c.id,
                    action=f.get("action") or c.action,
                    gpu="" if gpu.get("index") is None else gpu.get("index"),
                    bus_id=gpu.get("bus_id") or "",
                    uuid=gpu.get("uuid") or "",
                ),
                1.0,
            )
            for h, e in hosts.items()
            for c in e.checks
            for f in c.findings
            for gpu in [_gpu_of(f)]
        ],
    )
    family(
        "provision_run_timestamp_seconds",
        "Unix time the run finished.",
        [(_labels(command=cmd), float(report.finished_ts or 0.0))],
    )
    family(
        "provision_run_duration_seconds",
        "Wall time of the run.",
        [(_labels(command=cmd), float(report.duration_s or 0.0))],
    )
    family(
        "provision_run_exit_code",
        "Exit code of the run (0 ok, 1 failed, 3 unreachable, 5 drift, ...).",
        [(_labels(command=cmd), float(report.exit_code or 0))],
    )
    family(
        "provision_build_info",
        "Version of provision that wrote this file (value is always 1).",
        [(_labels(version=report.version), 1.0)],
    )
    return "\n".join(out) + "\n"


REPORT_FILES = (REPORT_JSON, JUNIT_XML, PROM_FILE)


def write_all(report: Report, directory: Path) -> list[Path]:
    """report.json, junit.xml and provision.prom into `directory` as one set: all three are
    rendered and written to temporary files first, then renamed into place; a failure leaves
    the previous set whole (was: a partial set, one file new and the others old)."""
    import os  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    directory.mkdir(parents=True, exist_ok=True)
    texts = [report_json(report), junit_xml(report), prom_text(report)]
    paths = [directory / name for name in REPORT_FILES]
    for path in paths:
        if path.is_dir():  # the one thing that makes a rename fail once the files are written
            raise IsADirectoryError(f"{path} is a directory")
    temps: list[Path] = []
    try:
        for path, text in zip(paths, texts, strict=True):
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
            temps.append(Path(name))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            temps[-1].chmod(0o644)
        for temp, path in zip(temps, paths, strict=True):
            temp.replace(path)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
    return paths
