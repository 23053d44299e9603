"""The validation role's README table, argument spec and defaults agree; the playbook and the
role's task file hold the contract (check ids, facts, check-mode safety)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "validation"
ROW = re.compile(r"^\| `(?P<name>[a-z_0-9]+)` \| (?P<type>\w+) \| `(?P<default>[^`]*)` \|")


def _options() -> dict:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    return spec["argument_specs"]["main"]["options"]


def test_issue_variables_exist() -> None:
    """The role's own knobs; enabled/backend/nproc/timeout/interface/thresholds are the stack's
    (gpu_stack_validation_*, shared through the gpu_stack role)."""
    for name in ("validation_init_timeout_s", "validation_master_port", "validation_multinode",
                 "validation_python"):
        assert name in _options(), name
    shared = yaml.safe_load((REPO / "roles" / "gpu_stack" / "defaults" / "main.yml").read_text())
    for name in ("enabled", "backend", "nproc_per_node", "timeout_s", "network_interface",
                 "thresholds"):
        assert f"gpu_stack_validation_{name}" in shared, name


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
        mods = [k for k in t if k.startswith(("ansible.builtin.", "provision.gpu."))]
        assert len(mods) <= 1, t.get("name")
        if mods and mods[0] in ("ansible.builtin.command", "ansible.builtin.copy",
                                "ansible.builtin.tempfile", "ansible.builtin.file",
                                "ansible.builtin.async_status"):
            assert t.get("changed_when") is False, t["name"]
            assert t.get("check_mode") is False, t["name"]
    # the run is bounded by coreutils timeout and torchrun never restarts a failed group
    assert "'timeout', '-k', '10', gpu_stack_validation_timeout_s" in text
    assert "'--max-restarts', '0'" in text
    assert "'--rdzv-backend', 'static'" in text


def test_program_is_copied_as_files() -> None:
    """The program travels as the package's own files (copy of files/provision_validate/), not as
    a JSON bundle unpacked by inline Python."""
    text = (ROLE / "tasks" / "main.yml").read_text(encoding="utf-8")
    assert "src: provision_validate/" in text
    assert "bundle" not in text
    assert (ROLE / "files" / "provision_validate" / "__main__.py").is_file()


def test_validate_playbook_runs_the_role_which_probes_the_driver_first() -> None:
    play = yaml.safe_load((REPO / "playbooks" / "validate.yml").read_text(encoding="utf-8"))[0]
    assert play["roles"] == [{"role": "provision.gpu.validation"}]
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text(encoding="utf-8"))
    probes = [t for t in tasks if "provision.gpu.host_assess" in t]
    assert probes and probes[0]["provision.gpu.host_assess"]["components"] == ["driver"]
