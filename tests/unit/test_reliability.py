"""Issue 14: bad inputs and faults the CLI must survive (each row of docs/reliability.md that is
not proven elsewhere). Every test here failed on the code before its fix."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import cli_env
from sshd_fake import FakeSSHD
from test_preflight import keys, opts, sshd, target
from test_session import Replay, probes

from provisioner import extravars as ev
from provisioner import session, stack
from provisioner import ssh_preflight as pf
from provisioner.cli import cli
from provisioner.exitcodes import StackError, UsageProblem
from provisioner.inventory import Target
from provisioner.report_model import Report
from provisioner.state import StateDir

EXE = Path(sys.executable).parent / "provision"
__all__ = ["keys", "sshd"]  # fixtures shared with test_preflight


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), prog_name="provision")


# ---------------------------------------------------------------- 7: corrupt history files


def _good(sd: StateDir, run_id: str) -> None:
    sd.save_report(Report.from_dict({
        "run_id": run_id, "command": "check", "exit_code": 0,
        "hosts": {"g1": {"status": "ok", "checks": [{"id": "driver.hold", "status": "pass"}]}},
    }))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("[1, 2]", "expected a mapping, got list"),
        ('{"run_id": "x", "hosts": {"g1": ', "invalid or truncated JSON"),
        ("not json at all", "invalid or truncated JSON"),
        ('{"hosts": {"g1": "ok"}}', "host g1: expected a mapping"),
        ('{"hosts": {"g1": {"checks": [{"status": "pass"}]}}}', "check without an id"),
    ],
)
def test_history_diff_and_show_name_a_corrupt_file_and_exit_2(
    state_dir: Path, content: str, reason: str
) -> None:
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    bad = sd.history / "20260102T000000.000Z-check-bbbbbb.json"
    bad.write_text(content)
    for args in (("history", "diff", "previous", "latest"), ("history", "show", "latest"),
                 ("history", "diff", str(bad))):
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert str(bad) in r.output
        assert reason in r.output
        assert "Traceback" not in r.output


def test_history_list_skips_a_corrupt_file_with_a_warning(state_dir: Path) -> None:
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    (sd.history / "20260102T000000.000Z-check-bbbbbb.json").write_bytes(b"\xff\xfe garbage")
    (sd.history / "20260103T000000.000Z-check-cccccc.json").write_text("[]")
    r = run_cli("history", "list")
    assert r.exit_code == 0, r.output
    assert "20260101T000000.000Z-check-aaaaaa" in r.stdout
    assert "bbbbbb" not in r.stdout
    assert "warning: skipped" in r.stderr
    assert "bbbbbb.json: not a provision report (not UTF-8 text" in r.stderr
    assert "cccccc.json: not a provision report (report: expected a mapping" in r.stderr


def test_previous_check_skips_a_corrupt_file_with_a_warning(state_dir: Path) -> None:
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    (sd.history / "20260102T000000.000Z-check-bbbbbb.json").write_text('{"hosts": [')
    warnings: list[str] = []
    prev = sd.previous_report("check", "20260103", {"g1"}, warn=warnings.append)
    assert prev is not None
    assert prev.run_id == "20260101T000000.000Z-check-aaaaaa"
    assert len(warnings) == 1
    assert "bbbbbb.json" in warnings[0]


# ---------------------------------------------------------------- 3, 4, 8: hostile input files

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
    for p, n in zip("abcde", "bcdef", strict=True)
) + "name: *f\n"  # 10^6 strings once expanded


def test_yaml_alias_bomb_in_a_stack_file_is_refused(tmp_path: Path) -> None:
    """Issue 14 item 3: error messages built with {value!r} expanded the aliases."""
    f = tmp_path / "bomb.yml"
    f.write_text(BOMB)
    r = run_cli("stack", "validate", "--stack", str(f))
    assert r.exit_code == 2
    assert "YAML anchors (&a) are not allowed here" in r.output
    assert str(f) in r.output
    assert len(r.output) < 2000


def test_yaml_alias_bomb_in_an_extra_vars_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "bomb.yml"
    f.write_text(BOMB.replace("name:", "payload:"))
    with pytest.raises(UsageProblem, match=r"YAML anchors \(&a\) are not allowed") as info:
        ev.parse([f"@{f}"])
    assert info.value.exit_code == 2
    with pytest.raises(UsageProblem, match=r"YAML aliases \(\*x\) are not allowed"):
        ev.parse(['{"a": *x}'])


def test_an_oversized_stack_file_is_refused(tmp_path: Path) -> None:
    """Issue 14 item 4: over ~128 KB the run crashed (Argument list too long)."""
    f = tmp_path / "big.yml"
    f.write_text("# padding\n" * 10_000 + "name: big\n")  # 100 KB
    r = run_cli("stack", "validate", "--stack", str(f))
    assert r.exit_code == 2
    assert f"stack file {f}: larger than the limit of {stack.MAX_STACK_BYTES} bytes" in r.output


def test_oversized_extra_vars_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "big.yml"
    f.write_text("blob: '" + "x" * (ev.MAX_BYTES + 10) + "'\n")
    with pytest.raises(UsageProblem, match=f"larger than the limit of {ev.MAX_BYTES} bytes"):
        ev.parse([f"@{f}"])
    half = "v=" + "y" * (ev.MAX_BYTES // 2 + 10)
    with pytest.raises(UsageProblem, match="bytes of extra variables in all, over the limit"):
        ev.parse([half, half])


def test_non_utf8_stack_and_extra_vars_files_are_named_errors(tmp_path: Path) -> None:
    """Issue 14 item 8: a UnicodeDecodeError traceback and exit 1."""
    f = tmp_path / "latin1.yml"
    f.write_bytes("name: caf\xe9\n".encode("latin-1"))
    r = run_cli("stack", "validate", "--stack", str(f))
    assert r.exit_code == 2
    assert f"stack file {f}: not UTF-8 text (byte 0xe9 at offset 9)" in r.output
    with pytest.raises(UsageProblem, match="not UTF-8 text") as info:
        ev.parse([f"@{f}"])
    assert str(f) in info.value.message


def test_stack_from_dev_null_and_from_a_pipe(tmp_path: Path) -> None:
    """Issue 14 (low): `--stack /dev/null` and `--stack <(...)` said "not found"."""
    r = run_cli("stack", "validate", "--stack", "/dev/null")
    assert r.exit_code == 0, r.output
    assert "valid" in r.output
    p = subprocess.run(
        ["bash", "-c", f"{EXE} stack show --json --stack <(echo \"driver: {{branch: '550'}}\")"],
        env=cli_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["driver"]["branch"] == "550"


def test_a_directory_as_stack_is_a_named_error(tmp_path: Path) -> None:
    r = run_cli("stack", "validate", "--stack", str(tmp_path))
    assert r.exit_code == 2
    assert "is a directory" in r.output or "directory" in r.output


# ---------------------------------------------------------------- 5: -e and the stack, safety


def _vars(*extra: str, **kw: object) -> ev.RunVars:
    s = session.Settings(command=str(kw.pop("command", "run")), extra_vars=extra, **kw)
    return ev.build_extravars(s, stack.load(None), warn=WARNINGS.append)


WARNINGS: list[str] = []


def test_extra_var_for_a_stack_variable_is_checked_by_the_matrix() -> None:
    """Issue 14 item 5: -e nvidia_driver_branch=470 bypassed the matrix."""
    with pytest.raises(StackError, match="driver branch 470 is below the minimum") as info:
        _vars("gpu_stack_driver_branch=470")
    assert info.value.exit_code == 2
    assert "-e gpu_stack_driver_branch" in info.value.message
    with pytest.raises(StackError, match=r"torch 2\.6\.0 has no cu121 wheels"):
        _vars('{"gpu_stack_pytorch_version": "2.6.0"}')


def test_extra_var_for_a_stack_variable_lands_in_the_resolved_stack() -> None:
    rv = _vars("gpu_stack_driver_branch=550", "gpu_stack_validation_timeout_s=60",
               "gpu_stack_pytorch_torchvision=")
    assert rv.stack.data["driver"]["branch"] == "550"
    assert rv.stack.data["validation"]["timeout_s"] == 60  # a key=value string, typed
    assert rv.stack.data["pytorch"]["torchvision"] is None  # "" is null
    assert rv.extravars["gpu_stack_driver_branch"] == "550"
    assert rv.extravars["gpu_stack_validation_timeout_s"] == 60
    assert "-e gpu_stack_driver_branch" in rv.stack.source


def test_extra_var_stack_variables_in_the_report(tmp_path: Path, demo_content: Path) -> None:
    replay = Replay("run")
    s = session.Settings(command="run", hosts=("h-ok",), report_dir=tmp_path / "rep",
                         extra_vars=("gpu_stack_driver_branch=550",))
    session.execute(s, state=StateDir(tmp_path / "st"), run_fn=replay, preflight_fn=probes({}))
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["stack"]["driver"]["branch"] == "550"
    assert replay.requests[0].extravars["gpu_stack_driver_branch"] == "550"


@pytest.mark.parametrize("var", ["gpu_stack_cudnn_build", "gpu_stack_cuda_min_driver",
                                 "gpu_stack_drivr_branch"])
def test_derived_or_unknown_stack_variables_are_refused(var: str) -> None:
    with pytest.raises(StackError, match=f"-e {var}: (derived from the matrix|not a stack)"):
        _vars(f"{var}=x")


def test_no_reboot_wins_over_extra_vars() -> None:
    WARNINGS.clear()
    rv = _vars("nvidia_driver_allow_reboot=true", no_reboot=True)
    assert rv.extravars["nvidia_driver_allow_reboot"] is False
    assert WARNINGS == ["warning: --no-reboot wins over -e nvidia_driver_allow_reboot=true"]
    assert _vars("nvidia_driver_allow_reboot=false").extravars[
        "nvidia_driver_allow_reboot"] == "false"


def test_check_validate_setting_yields_to_an_explicit_extra_var() -> None:
    rv = _vars("gpu_stack_validation_enabled=true", command="check")
    assert rv.extravars["gpu_stack_validation_enabled"] is True
    assert _vars(command="check").extravars["gpu_stack_validation_enabled"] is False


@pytest.mark.parametrize(
    ("var", "hint"),
    [
        ("ansible_host", "--host"),
        ("ansible_port", "--port"),
        ("ansible_user", "--user"),
        ("ansible_connection", "--connection"),
        ("ansible_ssh_common_args", "the inventory"),
        ("ansible_ssh_private_key_file", "--key"),
        ("ansible_become", "--become/--no-become"),
        ("ansible_become_user", "--become/--no-become"),
        ("ansible_become_pass", "-K/--ask-become-pass"),
        ("ansible_password", "SSH keys"),
    ],
)
def test_connection_variables_from_extra_vars_are_refused(var: str, hint: str) -> None:
    with pytest.raises(UsageProblem) as info:
        _vars(f"{var}=10.9.9.9")
    assert info.value.exit_code == 2
    assert f"-e {var}: a connection variable; use {hint}" in info.value.message


def test_connection_variable_from_the_command_line_exits_2(tmp_path: Path) -> None:
    r = run_cli("--host", "h", "-e", "ansible_host=10.9.9.9")
    assert r.exit_code == 2
    assert "-e ansible_host: a connection variable; use --host ADDRESS" in r.output


# ---------------------------------------------------------------- 6: pytorch.venv


@pytest.mark.parametrize(
    ("venv", "problem"),
    [
        ("/", "is a system directory"),
        ("/usr", "is a system directory"),
        ("/etc", "is a system directory"),
        ("/opt", "is a system directory"),
        ("/usr/local", "is a system directory"),
        ("/var/lib", "is a system directory"),
        ("/usr/lib/python3", "is inside a system directory"),
        ("/etc/pytorch", "is inside a system directory"),
        ("/tmp/venv", "is inside a system directory"),
        ("/home/alice", "is a home directory"),
        ("/opt/../etc", "must be a plain absolute path"),
        ("opt/pytorch", "must be an absolute path"),
        ("./venv", "must be an absolute path"),
    ],
)
def test_pytorch_venv_must_be_a_directory_of_its_own(venv: str, problem: str) -> None:
    """Issue 14 item 6: `pytorch.venv: /` was accepted; pip would install into it as root."""
    with pytest.raises(StackError) as info:
        stack.resolve({"pytorch": {"venv": venv}})
    assert info.value.exit_code == 2
    assert f"pytorch.venv: {venv!r} {problem}" in info.value.message


@pytest.mark.parametrize("venv", ["/opt/pytorch", "/srv/ml/venv", "/usr/local/pytorch",
                                  "/home/alice/venv", "/var/lib/pytorch"])
def test_pytorch_venv_accepts_a_directory_of_its_own(venv: str) -> None:
    assert stack.resolve({"pytorch": {"venv": venv}}).data["pytorch"]["venv"] == venv


# ---------------------------------------------------------------- 1: secrets

LEAKY = Path(__file__).resolve().parent / "fixtures" / "leaky"
SECRETS = {
    "-e": "S3cr3t-from-dash-e",
    "-e @file": "S3cr3t-from-a-file",
    "inventory": "S3cr3t-from-inventory",
    "-K": "S3cr3t-become-pass",
    "environment": "S3cr3t-in-ANSIBLE-env",  # passed through to Ansible, recorded in `command`
}


def _all_written(*roots: Path) -> dict[Path, str]:
    return {
        p: p.read_text(encoding="utf-8", errors="replace")
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_no_secret_from_any_input_lands_in_what_the_run_writes(tmp_path: Path) -> None:
    """Issue 14 item 1 (and Security): a secret planted through -e, -e @file, inventory vars and
    -K is not in the artifacts (runs/<id>/command, stdout, job_events), report.json, junit.xml,
    provision.prom, the history, or the output; extra vars go through a 0600 file, not argv.
    An ANSIBLE_* variable with a secret name is masked in the `command` artifact too."""
    vars_file = tmp_path / "vault.yml"
    vars_file.write_text(f"vault_password: {SECRETS['-e @file']}\n")
    env = dict(cli_env(tmp_path), PROVISION_CONTENT_DIR=str(LEAKY),
               ANSIBLE_VAULT_PASSWORD=SECRETS["environment"])
    p = subprocess.run(
        [str(EXE), "-i", str(LEAKY / "inventory.yml"), "-K", "-vv", "--json",
         "-e", f"api_token={SECRETS['-e']}", "-e", f"@{vars_file}",
         "--report-dir", str(tmp_path / "rep")],
        env=env, input=SECRETS["-K"] + "\n", capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(p.stdout)
    host = report["hosts"]["leaky-1"]
    # the playbook really got (and tried to leak) them: the values arrive masked
    assert host["facts"]["api_token"] == "********"
    assert host["facts"]["echoed"] == "seen ******** here"
    assert host["checks"][0]["message"] == "the token is ********"
    written = _all_written(tmp_path / "state", tmp_path / "rep")
    assert any("/runs/" in str(f) and f.name == "command" for f in written)
    assert any("job_events" in str(f) for f in written)
    for where, secret in SECRETS.items():
        assert secret not in p.stdout, where
        assert secret not in p.stderr, where
        for path, text in written.items():
            assert secret not in text, (where, path)
    (command,) = [t for f, t in written.items() if f.name == "command"]
    assert "api_token" not in command
    # the command points at the run's kept copy of the extra variables, secrets masked
    (kept,) = [f for f in written if "/runs/" in str(f) and f.name == "extravars"]
    assert f"@{kept}" in command and "provision-pdd-" not in command
    assert json.loads(written[kept])["api_token"] == "********"


def test_extra_vars_reach_ansible_through_a_0600_file(tmp_path: Path) -> None:
    from provisioner import runner  # noqa: PLC0415

    path = runner.write_extravars(tmp_path, {"a_password": "x" * 10, "n": 1})
    assert path == tmp_path / "env" / "extravars"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert json.loads(path.read_text()) == {"a_password": "x" * 10, "n": 1}
    assert runner.build_cmdline(runner.RunRequest(
        project_dir=tmp_path, playbook="p", inventory=tmp_path, artifact_dir=tmp_path, ident="i",
        extravars={"a_password": "x" * 10},
    )) == ["--become"]


def test_large_extra_vars_do_not_hit_the_argument_limit(tmp_path: Path) -> None:
    """Issue 14 item 4: over ~128 KB of -e, ansible-playbook failed with E2BIG."""
    from conftest import CONTENT  # noqa: PLC0415

    from provisioner import runner  # noqa: PLC0415

    big = {f"blob_{i}": "z" * 1000 for i in range(300)}  # 300 KB
    r = runner.run_playbook(
        runner.RunRequest(
            project_dir=CONTENT / "playbooks", playbook="site.yml", roles_path=CONTENT / "roles",
            inventory=CONTENT / "inventory.yml", artifact_dir=tmp_path / "runs", ident="big",
            extravars=big, limit="h-ok", become=None,
        ),
        lambda e: None,
    )
    assert (r.status, r.rc) == ("successful", 0)
    assert "zzzz" not in (r.artifacts / "command").read_text()


@pytest.mark.parametrize(
    ("key", "secret"),
    [("ansible_become_pass", True), ("ansible_ssh_pass", True), ("vault_password", True),
     ("GITHUB_TOKEN", True), ("client_secret", True), ("api_key", True), ("ssh_key_data", True),
     ("host_key_checking", False), ("ansible_ssh_private_key_file", False),
     ("nvidia_repo_key_url", False), ("keyring", False), ("gpu_stack_driver_branch", False)],
)
def test_secret_key_names(key: str, secret: bool) -> None:
    from provisioner.redact import is_secret_key  # noqa: PLC0415

    assert is_secret_key(key) is secret


# ---------------------------------------------------------------- 9: templated inventory values

TEMPLATED = """all:
  vars:
    base_port: 2200
    lab_net: 127.0.0
  hosts:
    g1:
      ansible_host: "{{ lab_net }}.11"
      ansible_port: "{{ base_port + 1 }}"
      ansible_user: "{{ 'ops' }}"
    g2:
      ansible_port: "{{ port_from_facts }}"
"""


def test_templated_inventory_values_are_resolved_as_ansible_does(tmp_path: Path) -> None:
    """Issue 14 item 9: `ansible_port: "{{ base_port }}"` was a ValueError traceback."""
    from provisioner import inventory  # noqa: PLC0415

    f = tmp_path / "inv.yml"
    f.write_text(TEMPLATED)
    by = {t.name: t for t in inventory.targets_from_inventory(f)}
    assert (by["g1"].address, by["g1"].port, by["g1"].user) == ("127.0.0.11", 2201, "ops")
    assert by["g1"].deferred is None
    # a value only Ansible can resolve at run time: the preflight leaves the host to Ansible
    assert by["g2"].deferred is not None
    assert "ansible_port '{{ port_from_facts }}' cannot be resolved before the run" in (
        by["g2"].deferred)


def test_a_deferred_host_is_not_probed_but_still_run(tmp_path: Path) -> None:
    import threading  # noqa: PLC0415

    from provisioner import inventory  # noqa: PLC0415
    from provisioner import ssh_preflight as pf  # noqa: PLC0415

    f = tmp_path / "inv.yml"
    f.write_text(TEMPLATED)
    g2 = next(t for t in inventory.targets_from_inventory(f) if t.name == "g2")
    r = pf.probe(g2, pf.ProbeOptions(known_hosts=tmp_path / "kh"), threading.Lock())
    assert r.status == "skipped"
    assert r.ok  # kept for the Ansible run
    assert "left to Ansible" in r.message


def test_a_port_typo_in_the_inventory_is_a_named_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "inv.yml"
    f.write_text("all:\n  hosts:\n    g3:\n      ansible_port: 22a\n")
    r = run_cli("preflight", "-i", str(f))
    assert r.exit_code == 2, r.output
    assert f"inventory {f}: host g3: ansible_port '22a' is not a port number (1-65535)" in r.output


# ---------------------------------------------------------------- 2: interrupted runs


class Cancelled(Replay):
    """The recorded run, cut off before its end as Ctrl-C/SIGTERM leaves it (no stats)."""

    def __call__(self, req: Any, on_event: Any) -> Any:
        from provisioner.runner import RunResult  # noqa: PLC0415

        self.requests.append(req)
        self.inventories.append(req.inventory.read_text(encoding="utf-8"))
        for e in self.rec["events"]:
            if e.get("event") != "playbook_on_stats":
                on_event(e)
        return RunResult(status="canceled", rc=130, artifacts=req.artifact_dir / req.ident,
                         stats={})


def test_an_interrupted_run_never_reports_a_host_ok(tmp_path: Path, demo_content: Path) -> None:
    """Issue 14 item 2: after Ctrl-C in the Ansible phase report.json said "ok", junit passed
    and provision.prom said ok."""
    import xml.etree.ElementTree as ET  # noqa: PLC0415

    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    hosts = ("h-ok", "h-changed", "h-fail", "h-unreachable", "h-never")
    s = session.Settings(command="run", hosts=hosts, report_dir=tmp_path / "rep")
    code = session.execute(s, state=StateDir(tmp_path / "st"), run_fn=Cancelled("run"),
                           preflight_fn=probes({}))
    assert code == 130
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    status = {h: e["status"] for h, e in report["hosts"].items()}
    assert {h: status[h] for h in hosts} == {
        "h-ok": "interrupted", "h-changed": "interrupted", "h-fail": "failed",
        "h-unreachable": "unreachable", "h-never": "interrupted"}
    assert "ok" not in status.values()
    assert report["summary"]["interrupted"] == 4  # with h-drift, also in the recorded run
    assert report["summary"]["ok"] == 0
    assert "interrupted" in report["hosts"]["h-ok"]["message"]
    root = ET.parse(tmp_path / "rep" / "junit.xml").getroot()
    suite = root.find("testsuite[@name='h-ok']")
    assert suite is not None
    err = suite.find("testcase[@name='provision.host']/error")
    assert err is not None and err.get("type") == "interrupted"
    assert suite.get("errors") == "1"
    prom = (tmp_path / "rep" / "provision.prom").read_text()
    fams = {f.name: f for f in text_string_to_metric_families(prom)}
    hs = {(x.labels["host"], x.labels["status"]): x.value
          for x in fams["provision_host_status"].samples}
    assert hs[("h-ok", "interrupted")] == 1
    assert hs[("h-ok", "ok")] == 0


def test_a_host_interrupted_in_the_middle_of_a_role_is_interrupted_not_failed(
    tmp_path: Path, demo_content: Path
) -> None:
    """Ctrl-C during the driver install: the role's probe had already published its plan as
    `fail` checks (no driver package yet), and the host was reported `failed`, not interrupted."""

    class CutBeforeTheAssert(Cancelled):
        def __call__(self, req: Any, on_event: Any) -> Any:
            self.rec["events"] = [e for e in self.rec["events"] if not (
                e.get("event") == "runner_on_failed"
                and (e.get("event_data") or {}).get("host") == "h-fail")]
            return super().__call__(req, on_event)

    s = session.Settings(command="run", hosts=("h-fail", "h-taskfail"),
                         report_dir=tmp_path / "rep")
    code = session.execute(s, state=StateDir(tmp_path / "st"), run_fn=CutBeforeTheAssert("run"),
                           preflight_fn=probes({}))
    assert code == 130
    hosts = json.loads((tmp_path / "rep" / "report.json").read_text())["hosts"]
    assert hosts["h-fail"]["status"] == "interrupted"
    assert any(c["status"] == "fail" for c in hosts["h-fail"]["checks"])  # the plan is kept
    assert hosts["h-taskfail"]["status"] == "failed"  # a task really failed: failed


# ---------------------------------------------------------------- 11, 12, 13: SSH preflight


def _kh_line(name: str, key: Any, marker: str = "") -> str:
    return f"{marker + ' ' if marker else ''}{name} {key.get_name()} {key.get_base64()}\n"


def _hashed(name: str) -> str:
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415
    import hmac  # noqa: PLC0415

    salt = b"0123456789abcdef0123"
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_known_hosts_with_markers_hashes_and_junk_is_read_as_openssh_reads_it(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    """Issue 14 item 11: @cert-authority, @revoked, hashed or malformed lines failed every host
    with InvalidHostKey."""
    name = f"[127.0.0.1]:{sshd.port}"
    kh = tmp_path / "known_hosts"
    kh.write_text(
        "# a comment\n\n"
        + _kh_line("*.example.org", keys["other_host"], "@cert-authority")
        + _kh_line("*", keys["stranger"], "@revoked")
        + "garbage line\n"
        + "host ssh-ed25519 !!!notbase64!!!\n"
        + "@unknown-marker h ssh-ed25519 AAAA\n"
        + f"other.example.org ssh-rsa {keys['host'].get_base64()}\n"  # type does not match
        + _kh_line(_hashed(name), keys["host"])
    )
    r = pf.probe(target(sshd, keys), opts(tmp_path), threading.Lock())
    assert r.status == "ok", r.message


def test_a_revoked_host_key_is_never_accepted(sshd: FakeSSHD, keys: dict, tmp_path: Path) -> None:
    name = f"[127.0.0.1]:{sshd.port}"
    kh = tmp_path / "known_hosts"
    kh.write_text(_kh_line("*", keys["host"], "@revoked") + _kh_line(name, keys["host"]))
    before = kh.read_text()
    r = pf.probe(target(sshd, keys), opts(tmp_path, accept_new=True), threading.Lock())
    assert (r.status, r.stage) == ("unreachable", "hostkey")
    assert "REVOKED host key" in r.message
    assert str(kh) in r.message
    assert kh.read_text() == before


def test_a_host_known_only_through_a_ca_says_so(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    (tmp_path / "known_hosts").write_text(_kh_line("127.0.0.1,[127.0.0.1]:*", keys["other_host"],
                                                   "@cert-authority"))
    r = pf.probe(target(sshd, keys), opts(tmp_path), threading.Lock())
    assert (r.status, r.stage) == ("unreachable", "hostkey")
    assert "@cert-authority" in r.message
    assert "--no-preflight" in r.message


@pytest.mark.parametrize(
    ("hosts", "name", "match"),
    [
        ("gpu01", "gpu01", True),
        ("GPU01", "gpu01", True),
        ("gpu*", "gpu17", True),
        ("gpu0?", "gpu01", True),
        ("gpu0?", "gpu010", False),
        ("gpu*,!gpu13", "gpu13", False),
        ("[10.0.0.1]:2222", "[10.0.0.1]:2222", True),
        ("[10.0.0.1]:2222", "10.0.0.1", False),
        ("[10.0.0.1]:*", "[10.0.0.1]:2200", True),
        (_hashed("gpu01"), "gpu01", True),
        (_hashed("gpu01"), "gpu02", False),
    ],
)
def test_known_hosts_patterns(hosts: str, name: str, match: bool) -> None:
    from provisioner.knownhosts import host_matches  # noqa: PLC0415

    assert host_matches(hosts, name) is match


def test_accept_new_keeps_the_mode_of_an_existing_known_hosts(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    """Issue 14 item 12: --accept-new-host-keys changed 0644 to 0600."""
    kh = tmp_path / "known_hosts"
    kh.write_text("other.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0")  # no newline
    kh.chmod(0o644)
    r = pf.probe(target(sshd, keys), opts(tmp_path, accept_new=True), threading.Lock())
    assert r.status == "ok", r.message
    assert oct(kh.stat().st_mode & 0o777) == "0o644"
    lines = kh.read_text().splitlines()
    assert len(lines) == 2  # appended on a line of its own
    assert lines[1].startswith(f"[127.0.0.1]:{sshd.port} ecdsa-sha2-nistp256 ")


def test_accept_new_does_not_follow_a_symlinked_known_hosts(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    real = tmp_path / "elsewhere"
    real.write_text("")
    (tmp_path / "known_hosts").symlink_to(real)
    r = pf.probe(target(sshd, keys), opts(tmp_path, accept_new=True), threading.Lock())
    assert (r.status, r.stage) == ("unreachable", "hostkey")
    assert "is a symbolic link; provision does not write through it" in r.message
    assert "accept it with --accept-new-host-keys" not in r.message
    assert real.read_text() == ""


def test_an_unwritable_known_hosts_says_so(sshd: FakeSSHD, keys: dict, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    r = pf.probe(
        target(sshd, keys),
        opts(tmp_path, accept_new=True, known_hosts=blocker / "known_hosts"),
        threading.Lock(),
    )
    assert (r.status, r.stage) == ("unreachable", "hostkey")
    assert f"--accept-new-host-keys could not add it: {blocker / 'known_hosts'} cannot be " \
        "written" in r.message


@pytest.fixture
def banner_then_silence() -> Iterator[int]:
    """A server that sends an SSH banner and then never answers the key exchange."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 stalled\r\n")
            held.append(conn)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    yield int(srv.getsockname()[1])
    stop.set()
    th.join(timeout=5)
    for c in held:
        c.close()
    srv.close()


def test_a_stalled_handshake_is_a_connect_failure_not_auth(
    keys: dict, tmp_path: Path, banner_then_silence: int
) -> None:
    """Issue 14 item 13: reported as ssh.auth ("check --user/--key")."""
    t = Target(name="stall", address="127.0.0.1", port=banner_then_silence, user="tester",
               key_file=keys["client_file"])
    r = pf.probe(t, opts(tmp_path, connect_timeout=1.0, accept_new=True), threading.Lock())
    assert (r.status, r.stage) == ("unreachable", "connect"), r.message
    assert "SSH handshake with 127.0.0.1" in r.message
    assert "never completed the key exchange" in r.message


@pytest.fixture
def http_port() -> Iterator[int]:
    """A port that answers like a web server (not SSH) and hangs up."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" + b"\x00" * 64)
            conn.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    yield int(srv.getsockname()[1])
    stop.set()
    th.join(timeout=5)
    srv.close()


def test_garbage_on_the_ssh_port_gives_no_traceback(tmp_path: Path, http_port: int) -> None:
    """Issue 14 (low): paramiko's transport thread printed tracebacks on stderr."""
    p = subprocess.run(
        [str(EXE), "preflight", "--host", f"127.0.0.1:{http_port}"],
        env=cli_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )
    assert p.returncode == 3, p.stderr
    assert "UNREACHABLE at connect" in p.stdout
    assert "Traceback" not in p.stderr
    assert "Exception" not in p.stderr


# ---------------------------------------------------------------- low: --key, ports


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "not found"),
        ("", "is empty"),
        ("hello\n", "is not a private key"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0 me@host\n", "is a public key"),
    ],
)
def test_key_file_is_checked_before_anything_runs(
    tmp_path: Path, calls_execute: list, content: str | None, problem: str
) -> None:
    key = tmp_path / "id_test"
    if content is not None:
        key.write_text(content)
    for args in (["--host", "h", "--key", str(key)], ["preflight", "--host", "h", "--key",
                                                       str(key)]):
        r = run_cli(*args)
        assert r.exit_code == 2, r.output
        assert f"--key {key}: {problem}" in r.output
    assert calls_execute == []


@pytest.fixture
def calls_execute(monkeypatch: pytest.MonkeyPatch) -> list:
    seen: list = []

    def fake(s: Any, **_: Any) -> int:
        session.resolve_targets(s)
        seen.append(s)
        return 0

    monkeypatch.setattr(session, "execute", fake)
    return seen


def test_a_real_private_key_file_is_accepted(tmp_path: Path, keys: dict) -> None:
    from provisioner.inventory import check_key_file  # noqa: PLC0415

    assert check_key_file(Path(keys["client_file"])) == Path(keys["client_file"])


def test_two_hosts_on_one_address_with_different_ports(tmp_path: Path) -> None:
    """Issue 14 (low): refused as "given twice"."""
    from provisioner import inventory  # noqa: PLC0415

    ts = inventory.targets_from_hosts(["127.0.0.1:2222", "gpu01", "127.0.0.1:2200"])
    assert [(t.name, t.address, t.port) for t in ts] == [
        ("127.0.0.1_2222", "127.0.0.1", 2222), ("gpu01", "gpu01", 22),
        ("127.0.0.1_2200", "127.0.0.1", 2200)]
    import yaml  # noqa: PLC0415

    doc = yaml.safe_load(inventory.inventory_yaml(ts))
    hosts = doc["all"]["children"]["gpu_servers"]["hosts"]
    assert hosts["127.0.0.1_2200"] == {"ansible_host": "127.0.0.1", "ansible_port": 2200,
                                       "ansible_connection": "ssh"}
    with pytest.raises(UsageProblem, match="given twice"):
        inventory.targets_from_hosts(["127.0.0.1:2222", "127.0.0.1:2222"])
    with pytest.raises(UsageProblem, match="given twice"):
        inventory.targets_from_hosts(["gpu01", "ops@gpu01:22"])


def test_an_old_role_variable_name_is_no_stack_alias() -> None:
    """The pre-gpu_stack names (nothing was released with them) are no longer folded into the
    stack: `-e nvidia_driver_branch=470` is an ordinary extra variable no role reads, the stack's
    branch stays, and the matrix still guards the real name."""
    WARNINGS.clear()
    rv = _vars("nvidia_driver_branch=470")
    assert rv.stack.data["driver"]["branch"] == stack.load(None).data["driver"]["branch"]
    assert rv.extravars["gpu_stack_driver_branch"] == rv.stack.data["driver"]["branch"]
    assert rv.extravars["nvidia_driver_branch"] == "470"
    assert WARNINGS == []
    with pytest.raises(StackError, match="driver branch 470 is below the minimum"):
        _vars("gpu_stack_driver_branch=470")


# ---------------------------------------------------------------- docs/reliability.md


def test_every_test_named_in_the_reliability_table_exists() -> None:
    """docs/reliability.md: each row names a test (file::name) that exists; 30 rows at least."""
    import re  # noqa: PLC0415

    repo = Path(__file__).resolve().parents[2]
    text = (repo / "docs" / "reliability.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if re.match(r"^\| \d+ \|", line)]
    assert len(rows) >= 30
    unproven = [r[:80] for r in rows if not re.search(r"`tests/[\w/]+\.py::test_\w+`", r)]
    assert unproven == [], unproven  # every row names the test that proves it
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", text)
    for path, name in named:
        source = (repo / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name}"


def test_site_policy_variables_pass_through_unfolded() -> None:
    """gpu_stack_* names of the role schema that are not stack leaves (waits, locks, holds) reach
    the roles as given; a typo among gpu_stack_* names is still refused."""
    rv = _vars("gpu_stack_wait_timeout_s=30", "gpu_stack_lock_takeover=true")
    assert rv.extravars["gpu_stack_wait_timeout_s"] == "30"
    assert rv.extravars["gpu_stack_lock_takeover"] == "true"
    assert "with -e" not in rv.stack.source  # nothing folded into the stack
    with pytest.raises(StackError, match="not a stack variable"):
        _vars("gpu_stack_wait_timeout=30")
    with pytest.raises(StackError, match="not a stack variable"):
        _vars("gpu_stack_desired={}")
