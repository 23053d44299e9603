"""Lab: the collection run as an AWX job template runs it, with plain `ansible-playbook` from the
repository root (the project directory), an inventory laid out like inventory/example/, and the
stack passed as extra vars from `provision stack show --vars` (docs/awx.md). No provision CLI, no
ansible-runner, no ANSIBLE_ROLES_PATH / ANSIBLE_COLLECTIONS_PATH: the playbook-adjacent
playbooks/collections link must be enough.

What it asserts is the outcome, not how the roles get there: the play recap (no failed or
unreachable host), and every check the roles report (facts `provision_checks` / `<role>_checks`,
docs/architecture.md) passes, validation included; then the "Check" job type (`--check
playbooks/check.yml`) on the provisioned host reports no drift and changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from test_roles_helpers import REPO

BIN = Path(sys.executable).parent

# AWX collects job events through its own callback; this one records the same things: the stats
# of the play recap, every reported check (by host and id), and failed tasks.
RECORDER = '''
import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record_outcome"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.checks = {}
        self.failed = []

    def _facts(self, host, res):
        for item in [res, *(res.get("results") or [])]:
            if not isinstance(item, dict):
                continue
            for key, value in (item.get("ansible_facts") or {}).items():
                if key.endswith("_checks") and isinstance(value, list):
                    for check in value:
                        if isinstance(check, dict) and "id" in check:
                            self.checks.setdefault(host, {})[check["id"]] = check

    def v2_runner_on_ok(self, result):
        self._facts(result._host.get_name(), result._result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self.failed.append({"host": result._host.get_name(), "task": result.task_name,
                                "msg": str(result._result.get("msg", ""))[:500]})

    def v2_playbook_on_stats(self, stats):
        out = {"stats": {h: stats.summarize(h) for h in sorted(stats.processed)},
               "checks": self.checks, "failed": self.failed}
        with open(os.environ["RECORD_OUTCOME_FILE"], "w", encoding="utf-8") as f:
            json.dump(out, f)
'''


def example_shaped_inventory(fleet: Any, directory: Path) -> Path:
    """inventory/example/ with the lab host in place of gpu01/gpu02, plus how to reach it."""
    example = yaml.safe_load((REPO / "inventory/example/hosts.yml").read_text(encoding="utf-8"))
    group = example["all"]["children"]["gpu_servers"]
    host = fleet.hosts[0]
    group["hosts"] = {host.name: {"ansible_host": host.address}}
    assert group["vars"]["ansible_user"] == host.user and group["vars"]["ansible_become"] is True
    (directory / "group_vars").mkdir(parents=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(example, sort_keys=False), encoding="utf-8")
    lab_vars = {
        # what an AWX machine credential and inventory variables would carry
        "ansible_ssh_private_key_file": str(host.key),
        "ansible_ssh_common_args": (
            f"-o UserKnownHostsFile={fleet.known_hosts} -o StrictHostKeyChecking=yes"
        ),
        "ansible_python_interpreter": "/usr/bin/python3",
        **yaml.safe_load(fleet.extra_vars_path.read_text(encoding="utf-8")),  # lab: no modprobe
    }
    (directory / "group_vars" / "gpu_servers.yml").write_text(
        (REPO / "inventory/example/group_vars/gpu_servers.yml").read_text(encoding="utf-8")
        + yaml.safe_dump(lab_vars, sort_keys=False),
        encoding="utf-8",
    )
    return directory


def short_home() -> Path:
    home = Path(tempfile.gettempdir()) / f"pa-home-{os.getpid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    return home


def ansible_playbook(
    tmp: Path, name: str, inventory: Path, extra_vars: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    (tmp / "callbacks").mkdir(exist_ok=True)
    (tmp / "callbacks" / "record_outcome.py").write_text(RECORDER, encoding="utf-8")
    outcome = tmp / f"{name}.json"
    env = {
        "PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
        # a short HOME, as a real user's: OpenSSH's ControlPath under ~/.ansible/cp must fit a
        # Unix socket name (108 bytes), which pytest's tmp_path does not
        "HOME": str(short_home()),
        "LANG": "C.UTF-8",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CALLBACK_PLUGINS": str(tmp / "callbacks"),
        "ANSIBLE_CALLBACKS_ENABLED": "record_outcome",
        "RECORD_OUTCOME_FILE": str(outcome),
    }
    proc = subprocess.run(
        ["nice", "-n", "10", str(BIN / "ansible-playbook"), "-i", str(inventory),
         "-e", f"@{extra_vars}", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )
    data = json.loads(outcome.read_text(encoding="utf-8")) if outcome.exists() else {}
    return proc, data


def test_site_yml_as_an_awx_job_then_check_yml_as_a_check_job(
    fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    host = fleet.hosts[0].name
    inventory = example_shaped_inventory(fleet, tmp_path / "inventory")
    stack_vars = subprocess.run(
        [str(BIN / "provision"), "stack", "show", "--vars", "--stack", str(fleet.stack_path)],
        capture_output=True, text=True, check=True,
    ).stdout
    extra_vars = tmp_path / "stack-vars.yml"
    extra_vars.write_text(stack_vars, encoding="utf-8")
    assert yaml.safe_load(stack_vars), "provision stack show --vars printed no variables"

    # job template 1: playbooks/site.yml, job type Run
    proc, run = ansible_playbook(tmp_path, "site", inventory, extra_vars, "playbooks/site.yml")
    log = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, log
    assert "PLAY RECAP" in proc.stdout
    stats = run["stats"][host]
    assert stats["failures"] == 0 and stats["unreachable"] == 0, stats
    assert stats["ok"] > 0 and stats["changed"] > 0, stats  # a bare host: things were installed
    assert run["failed"] == [], run["failed"]
    checks = run["checks"][host]
    not_passing = {i: c for i, c in checks.items() if c.get("status") not in ("pass", "skip")}
    assert not_passing == {}, json.dumps(not_passing, indent=1)
    passed = {i for i, c in checks.items() if c.get("status") == "pass"}
    assert any(i.startswith("validation.") for i in passed), sorted(passed)

    # check.yml refuses to run as job type Run (without --check) ...
    proc, refused = ansible_playbook(
        tmp_path, "check-run", inventory, extra_vars, "playbooks/check.yml"
    )
    assert proc.returncode != 0
    assert refused["stats"][host]["failures"] == 1, refused["stats"]
    # ... and as job type Check it finds the host compliant and changes nothing
    proc, check = ansible_playbook(
        tmp_path, "check", inventory, extra_vars, "--check", "playbooks/check.yml"
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    stats = check["stats"][host]
    assert stats["failures"] == 0 and stats["unreachable"] == 0 and stats["changed"] == 0, stats
    drift = {i: c for i, c in check["checks"][host].items() if c.get("status") in ("drift", "fail")}
    assert drift == {}, json.dumps(drift, indent=1)
