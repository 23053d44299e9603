# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Parse `dcgmi diag -r N --json` (NVIDIA DCGM's diagnostic) into one record per test and GPU.

Pure Python (3.8+ on targets), no I/O. The format is DCGM's JsonOutput (NVIDIA/DCGM:
nvvs/src/JsonOutput.cpp): {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests":
[{"name", "results": [{"gpu_ids" (or "gpu_id"), "status", "warnings", "info"}]}]}], "version",
"runtime_error"?}}. DCGM 4 names each result by "entity_group" / "entity_id" instead of "gpu_ids"
(NVIDIA/DCGM#215); a root named "DCGM Diagnostic" is accepted too (third-party parsers expect it
from DCGM 4; no whole DCGM 4 document is in public captures). Software tests carry one result for
all GPUs ("0,1,...,7"); the others one per GPU.

Verdicts are conservative: a test is `pass` only when DCGM says Pass and recorded no error behind it
(NVIDIA/DCGM#284: the memory test records DCGM_FR_MEMORY_ALLOC and still says PASS); a skipped test
(NVIDIA/DCGM#55, #139) is `skip` with DCGM's reason, never pass; a status we do not know is
`unknown`.
"""

from __future__ import absolute_import, annotations, division, print_function

import json
from typing import Any

ROOT_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
STATUS = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
}


def _json_start(text: str) -> str:
    """DCGM may print a line before the JSON (NVIDIA/DCGM JsonResultTests "real output")."""
    start = text.find("{")
    return text[start:] if start >= 0 else ""


def _gpus(result: dict[str, Any]) -> list[int]:
    if "entity_id" in result:  # DCGM 4: one result per entity (NVIDIA/DCGM#215)
        if str(result.get("entity_group") or "GPU").upper() != "GPU":
            return []
        raw: Any = result.get("entity_id")
        return [raw] if isinstance(raw, int) else [int(raw)] if str(raw).isdigit() else []
    raw = result.get("gpu_ids", result.get("gpu_id"))
    if isinstance(raw, int):
        return [raw]
    out: list[int] = []
    for part in str(raw if raw is not None else "").split(","):
        if part.strip().isdigit():
            out.append(int(part))
    return out


def _messages(value: Any) -> list[str]:  # noqa: ANN401 - JSON
    out: list[str] = []
    for item in value if isinstance(value, list) else [value] if value else []:
        if isinstance(item, dict):
            text = item.get("warning") or item.get("message") or ""
            code = item.get("error_id", item.get("error_code"))
            out.append(("%s (error %s)" % (text, code)) if code not in (None, "") else str(text))
        elif item:
            out.append(str(item))
    return out


def _has_error(value: Any) -> bool:  # noqa: ANN401 - JSON
    """A warning entry with a DCGM error id, or naming a DCGM_FR_ failure reason."""
    for item in value if isinstance(value, list) else [value] if value else []:
        if isinstance(item, dict):
            code = item.get("error_id", item.get("error_code"))
            if code not in (None, "", 0) or "DCGM_FR_" in str(item.get("warning", "")):
                return True
        elif "DCGM_FR_" in str(item):
            return True
    return False


def parse_diag(text: str) -> dict[str, Any]:
    """{"ok": bool, "error": str, "version", "runtime_error", "results": [{category, test, gpus,
    dcgm_status, status, reason}]}; `status` is pass/fail/warn/skip/unknown as judged here."""
    out: dict[str, Any] = {"ok": False, "error": "", "version": "", "runtime_error": ""}
    out["results"] = []
    body = _json_start(text or "")
    if not body:
        out["error"] = "no JSON in the dcgmi output"
        return out
    try:
        data = json.loads(body)
    except ValueError as exc:
        out["error"] = "dcgmi output is not JSON: %s" % exc
        return out
    root: Any = None
    if isinstance(data, dict):
        for key in ROOT_KEYS:
            if isinstance(data.get(key), dict):
                root = data[key]
                break
    if root is None:
        out["error"] = "no 'DCGM GPU Diagnostic' object in the dcgmi output"
        return out
    out["version"] = str(root.get("version") or "")
    out["runtime_error"] = str(root.get("runtime_error") or data.get("runtime_error") or "")
    for category in root.get("test_categories") or []:
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM 3.1 writes null entries between tests
            for result in test.get("results") or []:
                if not isinstance(result, dict):
                    continue
                out["results"].append(_result(str(category.get("category") or ""), test, result))
    out["ok"] = bool(out["results"]) and not out["runtime_error"]
    if not out["results"] and not out["error"]:
        out["error"] = out["runtime_error"] or "the diagnostic reported no test results"
    return out


def _result(category: str, test: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    raw = str(result.get("status") or "").strip()
    status = STATUS.get(raw.lower(), "unknown")
    warnings = _messages(result.get("warnings"))
    info = _messages(result.get("info"))
    reason = "; ".join(warnings + info)
    if status == "pass" and _has_error(result.get("warnings")):
        status = "unknown"
        reason = "DCGM says Pass but recorded an error: %s" % "; ".join(warnings)
    elif status == "skip" and not reason:
        reason = "DCGM skipped the test and gave no reason"
    elif status == "unknown":
        reason = "DCGM status %r not understood%s" % (raw, ("; " + reason) if reason else "")
    return {
        "category": category,
        "test": str(test.get("name") or ""),
        "gpus": _gpus(result),
        "dcgm_status": raw,
        "status": status,
        "reason": reason,
    }
