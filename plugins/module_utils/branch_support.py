# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""driver.branch_support: is the stack's driver branch still supported by NVIDIA?

The table is the matrix's driver.branches (provisioner/data/matrix.yml, passed to the probe as the
role variable gpu_stack_driver_support): branch -> kind (LTSB, PB), end_of_support (YYYY-MM, the
last month NVIDIA fixes bugs and security issues in the branch) and source. A branch past it still
runs CUDA, so the check passes, with a warning that names the date, its source and the supported
branches; the reports show the warning and the exit code stays.

Pure Python (Python 3.8+ on targets).
"""

from __future__ import absolute_import, annotations, division, print_function

from typing import Any


def judge(branch: str, table: Any, month: str) -> tuple[str, str | None, str | None, str, str]:  # noqa: ANN401
    """(status, expected, actual, message, warning) for `branch` in `month` (YYYY-MM)."""
    table = table if isinstance(table, dict) else {}
    info = table.get(branch)
    if not isinstance(info, dict) or not info.get("end_of_support"):
        return (
            "skip",
            None,
            None,
            "branch %s is not in the matrix's driver.branches: end of support unknown" % branch,
            "",
        )
    end, kind = str(info["end_of_support"]), str(info.get("kind") or "")
    expected = "branch %s supported by NVIDIA" % branch
    if month <= end:
        return (
            "pass",
            expected,
            "supported (%s, until %s)" % (kind, end),
            "NVIDIA still fixes bugs and security issues in branch %s" % branch,
            "",
        )
    supported = [
        "%s (%s, supported until %s)" % (b, v.get("kind"), v.get("end_of_support"))
        for b, v in sorted(table.items())
        if isinstance(v, dict)
        and str(v.get("end_of_support") or "") >= month
        and str(b).isdigit()
        and branch.isdigit()
        and int(b) >= int(branch)
    ]
    warning = (
        "driver branch %s is past NVIDIA's end of support (%s, support ended %s: %s); it gets "
        "no bug or security fixes; set driver.branch to a supported branch: %s"
        % (
            branch,
            kind,
            end,
            info.get("source") or "the matrix",
            ", ".join(supported) or "none known",
        )
    )
    return "pass", expected, "past end of support (%s, ended %s)" % (kind, end), warning, warning
