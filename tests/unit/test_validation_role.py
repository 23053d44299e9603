"""The validation role's README table, argument spec and defaults agree; the playbook and the
role's task file hold the contract (check ids, facts, check-mode safety)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "validation"
ROW = re.compile(r"^\| `(?P<name>[a-z_0-9]+)` \| (?P<type>\w+) \| `(?P<default>[^`]*)` \|")


def _fmt(value: object) -> str:
    if value == "":
        return '""'
    if isinstance(value, bool):
        return str(value).lower()
    if value == {}:
        return "{}"
    return str(value)


def _options() -> dict:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    return spec["argument_specs"]["main"]["options"]


def test_readme_table_matches_argument_spec_and_defaults() -> None:
    options = _options()
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    readme = (ROLE / "README.md").read_text(encoding="utf-8")
    rows = {m["name"]: m for m in map(ROW.match, readme.splitlines()) if m}
    assert set(rows) == set(options) == set(defaults)
    for name, opt in options.items():
        assert name.startswith("validation_")
        assert rows[name]["type"] == opt["type"], name
        assert rows[name]["default"].replace("\\|", "|") == _fmt(defaults[name]), name
        if "default" in opt:
            assert opt["default"] == defaults[name], name


def test_issue_variables_exist() -> None:
    for name in ("validation_enabled", "validation_backend", "validation_nproc_per_node",
                 "validation_timeout_s", "validation_init_timeout_s",
                 "validation_network_interface", "validation_master_port",
                 "validation_multinode", "validation_thresholds", "validation_python"):
        assert name in _options(), name


def test_tasks_publish_the_contract_and_change_nothing() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text(encoding="utf-8"))
    text = (ROLE / "tasks" / "main.yml").read_text(encoding="utf-8")
    for cid in ("validation.allreduce", "validation.ddp", "validation.multinode"):
        assert cid in text
    assert "validation_result:" in text and "validation_checks:" in text

    def walk(items):
        for t in items:
            yield t
            for key in ("block", "rescue", "always"):
                yield from walk(t.get(key, []))

    for t in walk(tasks):
        mods = [k for k in t if k.startswith("ansible.builtin.")]
        assert len(mods) <= 1, t.get("name")
        if mods and mods[0] in ("ansible.builtin.command", "ansible.builtin.copy",
                                "ansible.builtin.tempfile", "ansible.builtin.file",
                                "ansible.builtin.async_status"):
            assert t.get("changed_when") is False, t["name"]
            assert t.get("check_mode") is False, t["name"]
    # the run is bounded by coreutils timeout and torchrun never restarts a failed group
    assert "'timeout', '-k', '10', validation_timeout_s" in text
    assert "'--max-restarts', '0'" in text
    assert "'--rdzv-backend', 'static'" in text


def test_program_module_list_matches_files() -> None:
    listed = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    shipped = sorted(p.name for p in (ROLE / "files" / "provision_validate").glob("*.py"))
    assert sorted(listed["__validation_modules"]) == shipped


def test_validate_playbook_gathers_gpu_facts_then_runs_the_role() -> None:
    play = yaml.safe_load((REPO / "playbooks" / "validate.yml").read_text(encoding="utf-8"))[0]
    names = [next(k for k in t if k not in ("name", "check_mode")) for t in play["tasks"]]
    assert names == ["provision.gpu.nvidia_gpu_facts", "ansible.builtin.include_role"]
    role = play["tasks"][1]["ansible.builtin.include_role"]["name"]
    assert role in ("validation", "provision.gpu.validation")
