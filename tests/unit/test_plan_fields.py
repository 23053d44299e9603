"""Every plan field a role reads exists in the plan its component's judge returns (issue 18): a role
that reads `provision_plan.<component>.<field>` of a field no judge writes would read an undefined
value at run time, on a real host, not here."""

from __future__ import annotations

import re
from pathlib import Path

import probe_fakes as pf

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = ["repo", "driver", "cuda", "cudnn", "nccl", "env", "pytorch"]


def _read_by_roles() -> dict[str, set[str]]:
    """component -> the plan fields the roles' YAML reads."""
    reads: dict[str, set[str]] = {}
    for path in (REPO / "roles").rglob("*.yml"):
        text = path.read_text(encoding="utf-8")
        for comp, field in re.findall(r"provision_plan\.([a-z_]+)\.([a-z_]+)", text):
            reads.setdefault(comp, set()).add(field)
        for field in re.findall(r"__cuda_library_plan\.([a-z_]+)", text):
            for lib in ("cudnn", "nccl"):
                reads.setdefault(lib, set()).add(field)
    return reads


def _written_by_judges() -> dict[str, set[str]]:
    """component -> the plan fields its judge returns, over fresh and installed hosts of each OS."""
    written: dict[str, set[str]] = {}
    hosts = [pf.FakeHost().gpus(), pf.FakeHost(pf.ROCKY_9).gpus(), pf.FakeHost(pf.DEBIAN_11).gpus(),
             pf.FakeHost().gpus(version="550.54.15"), pf.FakeHost().gpus(nvswitch=False)]
    for host in hosts:
        for check_mode in (False, True):
            plan = pf.judge(host, COMPONENTS, check_mode=check_mode)["plan"]
            for comp, fields in plan.items():
                if isinstance(fields, dict):
                    written.setdefault(comp, set()).update(fields)
    return written


def test_every_plan_field_a_role_reads_is_written_by_its_judge() -> None:
    reads, written = _read_by_roles(), _written_by_judges()
    assert {"driver", "repo", "cuda", "pytorch", "cudnn"} <= set(reads)  # the scan sees the roles
    missing = {c: sorted(f - written.get(c, set())) for c, f in reads.items()}
    assert {c: f for c, f in missing.items() if f} == {}
