# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The shape every component of the stack takes (issue 18): its checks, its judgement, its plan.

A component is one module under components/ that declares
- `NAME` (the component, as the probe's `components` option names it) and `ROLE` (the role that
  changes it; "" for read-only components such as health),
- `SECTIONS`: the fact sections of collect.py it reads,
- `CHECKS`: a tuple of CheckSpec, every check id it can report, with what it verifies and the
  remediation (`provision checks` is derived from these),
- `judge(ctx: Context) -> None`: adds check records (ctx.add), report facts (ctx.report) and the
  component's plan (ctx.plan[NAME]) from the collected facts and the stack,
- for a component a role changes, its plan record: a TypedDict (`DriverPlan`, ...) and
  PLAN_REPORT_ONLY, the record's fields no role reads with the reason (components.PLANS).

Pure Python, no I/O (Python 3.8+ on targets).
"""

from __future__ import absolute_import, annotations, division, print_function

from dataclasses import dataclass
from typing import Any

from ansible_collections.provision.gpu.plugins.module_utils.platforms import Platform

# The one action ladder of health findings (least to most disruptive), as NVIDIA Health
# Validation's recommended actions: docs.nvidia.com/health-validation/reference/verdict-schema
ACTIONS = ("none", "monitor", "drain", "reset_gpu", "reboot", "service")


@dataclass(frozen=True)
class CheckSpec:
    """One check id: what it verifies and what to do when it does not pass."""

    id: str
    verifies: str
    remediation: str
    # health checks: the most disruptive action a finding of this check can ask for
    action: str = ""

    def entry(self) -> dict[str, str]:
        out = {"verifies": self.verifies, "remediation": self.remediation}
        if self.action:
            out["action"] = self.action
        return out


class Context(object):
    """One evaluation: facts, stack and mode in; check records, report facts and plans out."""

    def __init__(self, facts: dict[str, Any], stack: dict[str, Any], check_mode: bool) -> None:
        self.facts = facts
        self.stack = stack
        self.check_mode = check_mode
        o = facts.get("os") or {}
        self.plat = Platform(o.get("os_release") or {}, o.get("arch") or "", o.get("kernel") or "")
        self.host = str(stack.get("host") or "HOST")
        self.checks: list[dict[str, Any]] = []
        self.report: dict[str, Any] = {}
        self.plan: dict[str, Any] = {}

    @property
    def bad(self) -> str:
        """The status of a state that differs from the stack: drift in check mode, else fail."""
        return "drift" if self.check_mode else "fail"

    @property
    def fix(self) -> str:
        return "run `provision --host %s`" % self.host

    def add(
        self,
        cid: str,
        status: str,
        expected: str | None,
        actual: str | None,
        message: str,
        remediation: str = "",
        **extra: Any,  # noqa: ANN401 - extra record fields (health: action, gpus, findings)
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "id": cid,
            "status": status,
            "expected": expected,
            "actual": actual,
            "message": message,
            "remediation": remediation if status != "pass" else "",
        }
        record.update(extra)
        self.checks.append(record)
        return record

    def section(self, name: str) -> dict[str, Any]:
        value = self.facts.get(name)
        return value if isinstance(value, dict) else {}
