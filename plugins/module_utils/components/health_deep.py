# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The deep health tier: NVIDIA DCGM's diagnostic (`dcgmi diag -r N --json`), on request only.

`provision check --deep` (and `provision validate`, unless --no-deep) probes with this component;
collect.py's `dcgm` section runs the diagnostic under a hard timeout and parses it (dcgm.py). The
verdict never says pass for what did not pass: a skipped test (NVIDIA/DCGM#55, #139), a status we
do not understand, or a Pass with an error recorded behind it (NVIDIA/DCGM#284) make the check
`skip` with DCGM's reason; a host without DCGM gets `skip` saying so. Nothing is faked.
"""

from __future__ import absolute_import, annotations, division, print_function

from typing import Any

from ansible_collections.provision.gpu.plugins.module_utils.components.base import (
    ACTIONS,
    CheckSpec,
    Context,
)

NAME = "health_deep"
ROLE = ""
SECTIONS = ("dcgm", "gpu")
# DCGM run levels: 1 seconds, 2 about 2 min, 3 about 15 min, 4 extended (45 min to 2 h on 8 GPUs):
# docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html; the AWS GPU cluster
# health check suite (aws-samples/awsome-distributed-training) runs level 2 with a 15 min timeout.
DEFAULT_LEVEL = 1
DEFAULT_TIMEOUT_S = 900
INSTALL = (
    "set dcgm.install: true in the stack and run provision (the nvidia_driver role installs "
    "datacenter-gpu-manager-4-cuda<CUDA major> from NVIDIA's CUDA repository), "
    "or install it yourself"
)

CHECKS = (
    CheckSpec(
        "health.dcgm",
        "NVIDIA DCGM (dcgmi) is installed, so the deep health tier can run",
        INSTALL,
        action="none",
    ),
    CheckSpec(
        "health.dcgm_diag",
        "`dcgmi diag -r N` (N = dcgm.diag_level) finished within dcgm.diag_timeout_s and every "
        "test passed on every GPU; skipped tests and passes with an error behind them do not pass",
        "read DCGM's message per GPU; drain the node, act as the finding says, rerun "
        "`provision check --deep`",
        action="reset_gpu",
    ),
)

# The action for a failed DCGM test: a row remap pending or a page retired needs a GPU reset
# (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt); any other failed test drains the node until
# DCGM's own next step (its message) is done and the diagnostic passes again.
ACTION_OF_TEST = {"page retirement/row remap": "reset_gpu"}


def gpu_names(ctx: Context) -> dict[int, str]:
    out: dict[int, str] = {}
    for g in ctx.section("gpu").get("gpus") or []:
        if isinstance(g, dict) and isinstance(g.get("index"), int):
            out[g["index"]] = "GPU %d (%s, %s)" % (
                g["index"],
                g.get("pci_bus_id") or "bus id unknown",
                g.get("uuid") or "uuid unknown",
            )
    return out


def judge(ctx: Context) -> None:
    d = ctx.section("dcgm")
    if not d.get("requested"):
        return
    level = d.get("level", DEFAULT_LEVEL)
    if not d.get("installed"):
        msg = "DCGM is not installed on this host (no dcgmi on PATH): the deep tier did not run"
        ctx.add("health.dcgm", "skip", "dcgmi installed", "not installed", msg, INSTALL)
        ctx.add(
            "health.dcgm_diag", "skip", "dcgmi diag -r %s passed" % level, "not run", msg, INSTALL
        )
        return
    ctx.add("health.dcgm", "pass", "dcgmi installed", d.get("path"), "dcgmi at %s" % d.get("path"))
    expected = "dcgmi diag -r %s: every test passed on every GPU" % level
    spec = CHECKS[1]
    if d.get("timed_out"):
        msg = "dcgmi diag -r %s did not finish within %s s (stopped): result unknown" % (
            level,
            d.get("timeout_s"),
        )
        msg += " (action: drain)"
        ctx.add(
            "health.dcgm_diag", "skip", expected, "timed out", msg, spec.remediation, action="drain"
        )
        return
    parsed = d.get("parsed") or {}
    if not parsed.get("results"):
        why = parsed.get("error") or "no results"
        detail = (d.get("stderr") or "").strip().splitlines()[-1:] or [""]
        msg = "dcgmi diag -r %s exited %s without results: %s %s" % (
            level,
            d.get("rc"),
            why,
            detail[0],
        )
        ctx.add("health.dcgm_diag", "skip", expected, "no results", msg.strip(), spec.remediation)
        return
    names = gpu_names(ctx)
    findings: list[dict[str, Any]] = []
    for r in parsed["results"]:
        if r["status"] == "pass":
            continue
        gpus = r.get("gpus") or []
        if r["status"] == "fail":
            action = ACTION_OF_TEST.get(r["test"].lower(), "drain")
        elif r["status"] == "warn":
            action = "monitor"
        else:
            action = "none"
        findings.append(
            {
                "test": r["test"],
                "category": r["category"],
                "status": r["status"],
                "gpus": gpus,
                "gpu": ", ".join(names.get(g, "GPU %d" % g) for g in gpus) or "all GPUs",
                "reason": r["reason"],
                "action": action,
            }
        )
    failed = [f for f in findings if f["status"] == "fail"]
    unsure = [f for f in findings if f["status"] in ("skip", "unknown")]
    ran = len(parsed["results"])
    if failed:
        status, shown = "fail", failed
    elif unsure or parsed.get("runtime_error"):
        status, shown = "skip", unsure
    else:
        status, shown = "pass", [f for f in findings if f["status"] == "warn"]
    parts = [
        "%s %s on %s: %s" % (f["test"], f["status"], f["gpu"], f["reason"] or "-") for f in shown
    ]
    if parsed.get("runtime_error"):
        parts.append("DCGM runtime error: %s" % parsed["runtime_error"])
    if status == "pass":
        msg = "dcgmi diag -r %s (DCGM %s): %d results passed" % (
            level,
            parsed.get("version") or "?",
            ran,
        )
        if parts:
            msg += "; warnings: " + "; ".join(parts)
    else:
        msg = "dcgmi diag -r %s (DCGM %s): %s" % (
            level,
            parsed.get("version") or "?",
            "; ".join(parts),
        )
    action = max((f["action"] for f in shown), key=ACTIONS.index, default="none")
    actual = "%d failed, %d skipped/unknown of %d" % (len(failed), len(unsure), ran)
    extra: dict[str, Any] = {"findings": findings}
    if status != "pass":
        extra["action"] = action
        if action != "none":
            msg += " (action: %s)" % action
    ctx.add("health.dcgm_diag", status, expected, actual, msg, spec.remediation, **extra)
