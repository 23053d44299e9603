"""The plan records (issue 18): each changing component's judge builds a typed record (a TypedDict
in its module, components.PLANS), and the roles read only what the record declares.

A role that reads `provision_plan.<component>.<field>` of a field the record does not have, or
that no judge writes, would read an undefined value at run time, on a real host, not here; a
record field that no role reads is either documented as report-only (PLAN_REPORT_ONLY, with the
reason) or dead."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import probe_fakes as pf
from ansible_collections.provision.gpu.plugins.module_utils.components import PLANS

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = ["repo", "driver", "cuda", "cudnn", "nccl", "env", "pytorch"]
FIELD = r"[a-z_]+(?:\.[a-z_]+)?"  # a field, or a field of a nested record (driver.persistenced.x)


def _read_by_roles() -> dict[str, set[str]]:
    """component -> the plan fields ("field" or "field.sub") the roles' YAML reads."""
    reads: dict[str, set[str]] = {}
    for path in (REPO / "roles").rglob("*.yml"):
        text = path.read_text(encoding="utf-8")
        for comp, field in re.findall(r"provision_plan\.([a-z_]+)\.(" + FIELD + ")", text):
            reads.setdefault(comp, set()).add(field)
        for field in re.findall(r"__cuda_library_plan\.(" + FIELD + ")", text):
            for lib in ("cudnn", "nccl"):
                reads.setdefault(lib, set()).add(field)
    return reads


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and hasattr(hint, "__required_keys__")


def _fields(record: Any, prefix: str = "") -> set[str]:
    """A record's fields, with "field.sub" for the fields of a nested record."""
    out = set()
    for name, hint in typing.get_type_hints(record).items():
        out.add(prefix + name)
        if _is_record(hint):
            out |= _fields(hint, prefix + name + ".")
    return out


def _conforms(value: Any, hint: Any) -> bool:
    """value is of the type the record declares (str, bool, lists, dicts, nested records)."""
    if hint is Any:
        return True
    if _is_record(hint):
        hints = typing.get_type_hints(hint)
        return (
            isinstance(value, dict)
            and hint.__required_keys__ <= set(value)
            and set(value) <= set(hints)
            and all(_conforms(v, hints[k]) for k, v in value.items())
        )
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in args)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items()
        )
    return isinstance(value, hint)  # str, bool, NoneType


def _plans() -> list[dict[str, Any]]:
    """The plans of every component's judge over fresh and installed hosts of each OS, in a run
    and in check mode."""
    hosts = [pf.FakeHost().gpus(), pf.FakeHost(pf.ROCKY_9).gpus(), pf.FakeHost(pf.DEBIAN_11).gpus(),
             pf.FakeHost().gpus(version="550.54.15"), pf.FakeHost().gpus(nvswitch=False)]
    return [
        pf.judge(host, COMPONENTS, check_mode=check_mode)["plan"]
        for host in hosts
        for check_mode in (False, True)
    ]


def _written_by_judges() -> dict[str, set[str]]:
    """component -> the plan fields its judge returns (nested records' fields as "field.sub")."""
    written: dict[str, set[str]] = {}
    for plan in _plans():
        for comp, fields in plan.items():
            for name, value in fields.items():
                written.setdefault(comp, set()).add(name)
                if isinstance(value, dict):
                    written[comp] |= {name + "." + sub for sub in value}
    return written


def test_every_plan_field_a_role_reads_is_written_by_its_judge() -> None:
    reads, written = _read_by_roles(), _written_by_judges()
    assert {"driver", "repo", "cuda", "pytorch", "cudnn", "env"} <= set(reads)  # the scan works
    assert "persistenced.dropin" in reads["driver"]  # and sees a nested record's fields
    missing = {c: sorted(f - written.get(c, set())) for c, f in reads.items()}
    assert {c: f for c, f in missing.items() if f} == {}


def test_every_plan_field_a_role_reads_is_a_field_of_its_record() -> None:
    reads = _read_by_roles()
    assert set(reads) <= set(PLANS)  # every plan a role reads has a record
    undeclared = {c: sorted(f - _fields(PLANS[c][0])) for c, f in reads.items()}
    assert {c: f for c, f in undeclared.items() if f} == {}


def test_every_record_field_is_read_by_a_role_or_documented_as_report_only() -> None:
    reads = _read_by_roles()
    for comp, (record, report_only) in PLANS.items():
        read = {f.split(".", 1)[0] for f in reads.get(comp, set())}
        fields = set(typing.get_type_hints(record))
        assert fields - read - set(report_only) == set(), comp  # read, or documented
        assert set(report_only) <= fields - read, comp  # the documentation is not stale
        assert all(why.strip() for why in report_only.values()), comp


def test_the_judges_build_the_records_they_declare() -> None:
    """Every plan is its component's record at run time: the required keys, no other keys, each
    value of the declared type (a TypedDict is the dict the module publishes, key for key)."""
    plans = _plans()
    assert all(set(plan) == set(COMPONENTS) for plan in plans)
    for plan in plans:
        for comp, value in plan.items():
            record = PLANS[comp][0]
            assert _conforms(value, record), (comp, value)
    # the family-specific repository keys are there on their family only
    assert {"list_file", "keyring_deb"} <= set(plans[0]["repo"])
    assert "repo_id" not in plans[0]["repo"]
    assert {"repo_id", "repo_file", "gpgkey"} <= set(plans[2]["repo"])  # Rocky 9, a run


def test_the_conformance_check_can_fail() -> None:
    driver = PLANS["driver"][0]
    good = _plans()[0]["driver"]
    assert _conforms(good, driver)
    assert not _conforms({**good, "surplus": 1}, driver)
    assert not _conforms({k: v for k, v in good.items() if k != "remove"}, driver)
    assert not _conforms({**good, "remove": "nvidia-driver-535"}, driver)
    assert not _conforms({**good, "persistenced": {**good["persistenced"], "enable": "yes"}},
                         driver)
