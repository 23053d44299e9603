"""`provision --local`: options, the local inventory, and the resume after a driver reboot (unit
file, state, systemctl calls) with a recording stand-in for systemctl and a temporary root."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from provisioner import inventory as inv
from provisioner import local, session
from provisioner.cli import cli
from provisioner.exitcodes import UsageProblem
from provisioner.report_model import Check, HostReport, Report
from provisioner.runner import RunRequest, RunResult
from provisioner.settings import Settings
from provisioner.state import StateDir

REPO = Path(__file__).resolve().parents[2]


class FakeSystem(local.System):
    """systemd in a temporary directory: systemctl calls are recorded, `enable`/`disable` make
    and remove the wants link, `reboot` only records."""

    def __init__(self, root: Path, *, boot: str = "boot-1", systemd: bool = True,
                 fail: Sequence[str] = ()) -> None:
        (root / "proc").mkdir(parents=True, exist_ok=True)
        (root / "proc" / "boot_id").write_text(boot + "\n", encoding="utf-8")
        if systemd:
            (root / "run-systemd").mkdir(exist_ok=True)
        self.fail = set(fail)
        self.wants = root / "etc" / "multi-user.target.wants"
        super().__init__(
            unit_dir=root / "etc",
            boot_id_file=root / "proc" / "boot_id",
            systemd_marker=root / "run-systemd",
            run=self._systemctl,
            euid=lambda: 0,
            hostname=lambda: "gpu07",
        )

    def _systemctl(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        verb = argv[1]
        if verb in self.fail:
            return subprocess.CompletedProcess(list(argv), 1, "", f"{verb} refused")
        if verb == "enable":
            self.wants.mkdir(parents=True, exist_ok=True)
            (self.wants / argv[2]).symlink_to(self.unit_dir / argv[2])
        elif verb == "disable":
            (self.wants / argv[2]).unlink(missing_ok=True)
        return subprocess.CompletedProcess(list(argv), 0, "", "")

    def reboot(self, boot: str) -> None:
        self.boot_id_file.write_text(boot + "\n", encoding="utf-8")

    @property
    def enabled(self) -> bool:
        return (self.wants / local.UNIT_NAME).is_symlink()

    def verbs(self) -> list[str]:
        return [c[1] for c in self.calls]


def reboot_report(reboot: str = "fail", run_id: str = "20260101T000000.000Z-run-abc") -> Report:
    checks = [
        Check(id="driver.version", status="pass"),
        Check(id="driver.reboot", status=reboot, actual="reboot required: driver_not_loaded"),
        Check(id="validation.allreduce", status="fail" if reboot == "fail" else "pass"),
    ]
    status = "failed" if reboot == "fail" else "changed"
    return Report(command="run", run_id=run_id, hosts={"gpu07": HostReport(status, checks)},
                  exit_code=1 if reboot == "fail" else 0)


def local_settings(tmp_path: Path, **kw: Any) -> Settings:
    stack = tmp_path / "in" / "stack.yml"
    stack.parent.mkdir(parents=True, exist_ok=True)
    stack.write_text("schema: 1\nname: site\n", encoding="utf-8")
    base: dict[str, Any] = {"local": True, "stack_path": stack,
                            "report_dir": tmp_path / "reports",
                            "extra_vars": ("gpu_stack_kernel_modules=false",
                                           "site_token=s3cr3t-value")}
    base.update(kw)
    return Settings(command="run", **base)


# ------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "extra",
    [["--host", "gpu01"], ["-i", "inv.yml"], ["--wait", "5m"], ["--user", "x"],
     ["--known-hosts", "kh"], ["--accept-new-host-keys"], ["--port", "2222"], ["--become"],
     ["--no-become"], ["-K"]],
)
def test_local_refuses_the_options_that_reach_remote_hosts(extra: list[str]) -> None:
    r = CliRunner().invoke(cli, ["--local", *extra], prog_name="provision")
    assert r.exit_code == 2, r.output
    assert "--local provisions this machine itself" in r.output


def test_local_is_an_option_of_check_and_validate_but_not_preflight() -> None:
    for sub in ("check", "validate"):
        r = CliRunner().invoke(cli, [sub, "--help"], prog_name="provision")
        assert "--local" in r.output
    r = CliRunner().invoke(cli, ["preflight", "--local"], prog_name="provision")
    assert r.exit_code == 2 and "nothing to probe" in r.output, r.output


def test_local_needs_root(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    system.euid = lambda: 1000
    with pytest.raises(UsageProblem, match="--local runs as root"):
        local.check(local_settings(tmp_path), {}, system)


def test_local_refuses_a_reboot_in_the_middle_of_the_play(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match="nvidia_driver_reboot_local=true would reboot"):
        local.check(local_settings(tmp_path), {"nvidia_driver_reboot_local": "true"},
                    FakeSystem(tmp_path))


def test_the_local_inventory_is_this_machine_over_the_local_connection(tmp_path: Path) -> None:
    tg = session.resolve_targets(local_settings(tmp_path), FakeSystem(tmp_path))
    (t,) = tg.targets
    assert (t.name, t.address, t.connection) == ("gpu07", "localhost", "local")
    doc = yaml.safe_load(inv.inventory_yaml(tg.targets))
    assert doc["all"]["children"]["gpu_servers"]["hosts"] == {
        "gpu07": {"ansible_host": "localhost", "ansible_connection": "local",
                  "ansible_become": False}
    }


# ------------------------------------------------------------------------- quoting


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("/opt/provision/bin/provision", "/opt/provision/bin/provision"),
        ("--report-dir", "--report-dir"),
        ("@/var/lib/provision/resume/x.json", "@/var/lib/provision/resume/x.json"),
        ("/srv/my stacks/a.yml", '"/srv/my stacks/a.yml"'),
        ("100%", "\"100%%\""),
        ("$HOME", '"$$HOME"'),
        ('say "hi"\\', '"say \\"hi\\"\\\\"'),
    ],
)
def test_systemd_quote(arg: str, quoted: str) -> None:
    assert local.systemd_quote(arg) == quoted


# ------------------------------------------------------------------------- arranging the resume


def test_a_needed_reboot_writes_the_resume_unit_enables_it_and_reboots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    system = FakeSystem(tmp_path / "sys")
    state = tmp_path / "state"
    s = local_settings(tmp_path, tags="nvidia_driver,validation", verbosity=1)
    out = local.after_run(s, reboot_report(), state, system, print, resumed=None)
    assert out is not None and out.arranged and out.rebooting
    assert system.verbs() == ["daemon-reload", "enable", "reboot"]
    assert system.enabled

    unit = system.unit_path.read_text(encoding="utf-8")
    st = json.loads(local.state_file(state).read_text(encoding="utf-8"))
    assert st["run_id"] == "20260101T000000.000Z-run-abc"
    assert st["boot_id"] == "boot-1" and st["attempt"] == 1
    d = local.resume_dir(state)
    assert f"ConditionPathExists={d / 'state.json'}" in unit
    assert "Type=oneshot" in unit and "WantedBy=multi-user.target" in unit
    assert f"Environment=PROVISION_STATE_DIR={state}" in unit
    exec_line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    assert exec_line == "ExecStart=" + " ".join(st["command"])
    cmd = st["command"]
    assert cmd[cmd.index("--local") - 1].endswith("provision") or cmd[1:3] == ["-m", "provisioner"]
    assert cmd[cmd.index("--stack") + 1] == str(d / "stack.yml")
    assert cmd[cmd.index("--report-dir") + 1] == str((tmp_path / "reports").resolve())
    assert cmd[cmd.index("--tags") + 1] == "nvidia_driver,validation"
    assert cmd[cmd.index("-e") + 1] == f"@{d / 'extra-vars.json'}"
    assert "-v" in cmd
    # the stack is a copy (a /tmp stack would not survive the boot); -e values only in a 0600 file
    assert (d / "stack.yml").read_text(encoding="utf-8") == "schema: 1\nname: site\n"
    assert json.loads((d / "extra-vars.json").read_text(encoding="utf-8")) == {
        "gpu_stack_kernel_modules": "false", "site_token": "s3cr3t-value"}  # as -e gave them
    assert "s3cr3t-value" not in unit
    for f in ("extra-vars.json", "state.json", "stack.yml"):
        assert stat.S_IMODE((d / f).stat().st_mode) == 0o600, f
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    said = capsys.readouterr().out
    assert "reboot required to load the NVIDIA driver" in said
    assert f"{local.UNIT_NAME} (enabled) runs" in said and "rebooting now" in said


@pytest.mark.parametrize(
    ("kw", "reboot"),
    [({"no_reboot": True}, "fail"), ({"check_mode": True}, "fail"), ({}, "pass")],
)
def test_no_resume_without_a_needed_reboot_or_under_no_reboot_and_check(
    tmp_path: Path, kw: dict[str, Any], reboot: str
) -> None:
    system = FakeSystem(tmp_path / "sys")
    out = local.after_run(local_settings(tmp_path, **kw), reboot_report(reboot),
                          tmp_path / "state", system, print, resumed=None)
    assert out is None
    assert system.calls == []
    assert not system.unit_path.exists()
    assert not local.state_file(tmp_path / "state").exists()


def test_without_systemd_it_says_to_reboot_by_hand(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path / "sys", systemd=False)
    lines: list[str] = []
    out = local.after_run(local_settings(tmp_path), reboot_report(), tmp_path / "state",
                          system, lines.append, resumed=None)
    assert out is not None and not out.arranged and not out.rebooting
    assert "does not run systemd" in lines[0] and "provision --local" in lines[0]
    assert system.calls == [] and not system.unit_path.exists()


def test_a_failed_enable_undoes_the_unit_and_does_not_reboot(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path / "sys", fail=("enable",))
    lines: list[str] = []
    out = local.after_run(local_settings(tmp_path), reboot_report(), tmp_path / "state",
                          system, lines.append, resumed=None)
    assert out is not None and not out.arranged
    assert "reboot" not in system.verbs()
    assert not system.unit_path.exists()
    assert not local.resume_dir(tmp_path / "state").exists()
    assert "`systemctl enable provision-resume.service` failed (enable refused)" in lines[-1]


# ------------------------------------------------------------------------- the resumed run


def arranged(tmp_path: Path) -> tuple[FakeSystem, Path]:
    system = FakeSystem(tmp_path / "sys")
    state = tmp_path / "state"
    local.after_run(local_settings(tmp_path), reboot_report(), state, system, print,
                    resumed=None)
    system.calls.clear()
    return system, state


def test_after_the_boot_the_resumed_run_disables_and_removes_the_unit(tmp_path: Path) -> None:
    system, state = arranged(tmp_path)
    system.reboot("boot-2")
    lines: list[str] = []
    resumed = local.begin(state, system, lines.append)
    assert resumed is not None and resumed.run_id == "20260101T000000.000Z-run-abc"
    # no daemon-reload while the unit's own run goes on (it would drop the unit's settings)
    assert system.verbs() == ["disable"]
    assert not system.enabled
    assert not local.resume_dir(state).exists()  # the -e copy (secrets) is gone too
    assert lines[0].startswith("resuming after the reboot that run 20260101T000000.000Z-run-abc")
    # the run's end: the unit file goes too
    assert system.unit_path.exists()
    assert local.after_run(local_settings(tmp_path), reboot_report("pass"), state, system,
                           lines.append, resumed=resumed) is None
    assert not system.unit_path.exists()
    assert system.verbs() == ["disable"]
    # nothing left: a later run is an ordinary one
    assert local.begin(state, system, lines.append) is None


def test_the_resumed_run_never_reboots_a_second_time(tmp_path: Path) -> None:
    system, state = arranged(tmp_path)
    system.reboot("boot-2")
    resumed = local.begin(state, system, print)
    system.calls.clear()
    lines: list[str] = []
    out = local.after_run(local_settings(tmp_path), reboot_report(run_id="second"), state,
                          system, lines.append, resumed=resumed)
    assert out is not None and not out.arranged and not out.rebooting
    assert system.calls == []
    assert not system.unit_path.exists()
    assert "still needs a reboot after the reboot that run 20260101T000000.000Z-run-abc" in lines[0]


def test_a_run_in_the_same_boot_replaces_a_pending_resume(tmp_path: Path) -> None:
    system, state = arranged(tmp_path)  # the reboot did not happen
    lines: list[str] = []
    assert local.begin(state, system, lines.append) is None
    assert "has not rebooted since; this run replaces it" in lines[0]
    assert not system.enabled and not local.state_file(state).exists()


# ------------------------------------------------------------------------- through execute()


def test_execute_local_runs_without_ssh_and_arranges_the_resume(
    tmp_path: Path, demo_content: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests: list[RunRequest] = []
    inventories: list[str] = []

    def run_fn(req: RunRequest, on_event: Any) -> RunResult:
        requests.append(req)
        inventories.append(req.inventory.read_text(encoding="utf-8"))
        on_event({"event": "runner_on_ok", "event_data": {
            "host": "gpu07", "task": "Verify the driver", "role": "nvidia_driver",
            "res": {"changed": False, "ansible_facts": {"provision_checks": [
                {"id": "driver.reboot", "status": "fail", "expected": "no reboot pending",
                 "actual": "reboot required: driver_not_loaded", "message": "reboot required",
                 "remediation": "reboot"}]}}}})
        return RunResult(status="failed", rc=2, artifacts=req.artifact_dir / req.ident,
                         stats={"failures": {"gpu07": 1}, "ok": {"gpu07": 3}})

    def no_probe(*_a: Any, **_k: Any) -> list[Any]:
        raise AssertionError("--local: no SSH probe")

    system = FakeSystem(tmp_path / "sys")
    s = local_settings(tmp_path, extra_vars=())
    code = session.execute(s, state=StateDir(tmp_path / "state"), run_fn=run_fn,
                           preflight_fn=no_probe, wait_fn=no_probe, system=system)
    assert code == 1
    (req,) = requests
    assert req.become is False
    doc = yaml.safe_load(inventories[0])
    assert doc["all"]["children"]["gpu_servers"]["hosts"]["gpu07"]["ansible_connection"] == "local"
    assert req.extravars["gpu_stack_run_controller"] == session.controller_name()
    assert system.verbs() == ["daemon-reload", "enable", "reboot"]
    rep = json.loads((tmp_path / "reports" / "report.json").read_text(encoding="utf-8"))
    assert rep["hosts"]["gpu07"]["status"] == "failed"
    assert "rebooting now" in capsys.readouterr().err


def test_user_data_example_installs_the_tool_and_runs_it_locally() -> None:
    path = REPO / "contrib" / "cloud-init" / "user-data.yaml"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    cmds = [c if isinstance(c, str) else " ".join(c) for c in doc["runcmd"]]
    joined = "\n".join(cmds)
    assert "pip install" in joined
    assert "provision --local" in joined
    assert "--report-dir /var/lib/provision/reports" in joined
    # a documented example: placeholders only, no credentials, no real addresses
    import re  # noqa: PLC0415
    from urllib.parse import urlparse  # noqa: PLC0415

    assert re.findall(r"\b\d{1,3}(?:\.\d{1,3}){3}\b", text) == []
    hosts = {urlparse(u).hostname for u in re.findall(r"https?://[^\s\"']+", text)}
    assert hosts and all(h and h.endswith("example.com") for h in hosts), hosts
    assert not re.search(r"(?i)(passw|token|secret|private key|BEGIN |ssh_authorized_keys)", text)
    # the venv is made with a Python provision supports (3.11+), per release
    assert "python3.11" in cmds[0] and "/opt/provision/bin/pip install" in cmds[0]


def test_check_local_leaves_a_pending_resume_alone_and_never_reboots(
    tmp_path: Path, demo_content: Path
) -> None:
    system, state = arranged(tmp_path)
    system.reboot("boot-2")  # the resume has not run yet

    def run_fn(req: RunRequest, on_event: Any) -> RunResult:
        assert req.check and req.become is False
        on_event({"event": "runner_on_ok", "event_data": {
            "host": "gpu07", "task": "Verify the driver", "role": "nvidia_driver",
            "res": {"changed": False, "ansible_facts": {"provision_checks": [
                {"id": "driver.reboot", "status": "drift", "expected": "no reboot pending",
                 "actual": "reboot required", "message": "reboot required",
                 "remediation": "reboot"}]}}}})
        return RunResult(status="successful", rc=0, artifacts=req.artifact_dir / req.ident,
                         stats={"ok": {"gpu07": 3}})

    s = Settings(command="check", local=True)
    code = session.execute(s, state=StateDir(state), run_fn=run_fn, system=system)
    assert code == 5
    assert system.calls == []
    assert local.state_file(state).exists() and system.enabled
