"""Option parsing and command wiring (CliRunner; the run itself is replaced by a recorder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from provisioner import extravars, session, stack
from provisioner.cli import cli
from provisioner.exitcodes import UsageProblem
from provisioner.extravars import parse as parse_extravars
from provisioner.report_model import Report
from provisioner.state import StateDir


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[session.Settings]:
    seen: list[session.Settings] = []

    def fake(s: session.Settings, **_: Any) -> int:
        seen.append(s)
        return 0

    monkeypatch.setattr(session, "execute", fake)
    return seen


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, prog_name="provision")


def test_default_command_is_the_full_run(calls: list[session.Settings], tmp_path: Path) -> None:
    key = tmp_path / "id"
    r = invoke(
        "--host",
        "gpu01",
        "--host",
        "admin@gpu02:2222",
        "--user",
        "ops",
        "--port",
        "2200",
        "--key",
        str(key),
        "--no-become",
        "--forks",
        "7",
        "--connection",
        "paramiko",
        "-e",
        "a=1",
        "-e",
        "b=2 c=3",
        "--tags",
        "nvidia_driver,cudnn",
        "--skip-tags",
        "validation",
        "--check",
        "--diff",
        "--no-reboot",
        "--report-dir",
        str(tmp_path / "r"),
        "-vvv",
        "--json",
        "--known-hosts",
        str(tmp_path / "kh"),
        "--accept-new-host-keys",
        "--no-preflight",
    )
    assert r.exit_code == 0, r.output
    (s,) = calls
    assert s.command == "run"
    assert s.hosts == ("gpu01", "admin@gpu02:2222")
    assert (s.user, s.port, s.key, s.become, s.forks, s.connection) == (
        "ops",
        2200,
        key,
        False,
        7,
        "paramiko",
    )
    assert s.extra_vars == ("a=1", "b=2 c=3")
    assert (s.tags, s.skip_tags) == ("nvidia_driver,cudnn", "validation")
    assert s.check_mode and s.diff and s.no_reboot and s.as_json and s.no_preflight
    assert s.accept_new_host_keys
    assert s.verbosity == 3
    assert s.report_dir == tmp_path / "r"
    assert s.known_hosts == tmp_path / "kh"
    assert s.ansible_check


def test_check_takes_options_before_or_after_the_subcommand(calls: list[session.Settings]) -> None:
    assert invoke("check", "--host", "a", "--validate", "--json").exit_code == 0
    assert invoke("--host", "b", "-v", "check").exit_code == 0
    first, second = calls
    assert (first.command, first.hosts, first.validate, first.as_json) == (
        "check",
        ("a",),
        True,
        True,
    )
    assert (second.command, second.hosts, second.verbosity) == ("check", ("b",), 1)
    assert second.ansible_check
    assert not second.validate


def test_validate_command(calls: list[session.Settings]) -> None:
    assert invoke("validate", "-i", "inv.yml", "--limit", "g*").exit_code == 0
    (s,) = calls
    assert (s.command, s.inventory, s.limit) == ("validate", "inv.yml", "g*")


def test_no_arguments_print_the_help_and_exit_2() -> None:
    r = CliRunner().invoke(cli, [])
    assert r.exit_code == 2
    assert "Exit codes:" in r.output


@pytest.mark.parametrize("args", [["--json"], ["check", "--json"], ["validate", "-v"],
                                  ["preflight"]])
def test_missing_hosts_is_one_error_line_and_the_usage_line(args: list[str]) -> None:
    """Issue 14 (low): a missing --host/-i printed the whole help with no error line."""
    r = CliRunner().invoke(cli, args, prog_name="provision")
    assert r.exit_code == 2
    assert "Error: no hosts: give --host HOST (repeatable) or -i INVENTORY" in r.output
    assert r.output.startswith("Usage: provision")
    assert "Exit codes:" not in r.output  # not the whole help
    assert len(r.output.strip().splitlines()) <= 4


def test_help_lists_exit_codes_and_commands() -> None:
    r = invoke("--help")
    assert r.exit_code == 0
    for text in (
        "0 success",
        "1 a host failed",
        "2 usage or",
        "3 a host unreachable",
        "4 setup error",
        "5 drift found by check",
        "130 interrupted",
    ):
        assert text in r.output.replace("\n  ", " ")
    for cmd in ("check", "validate", "preflight", "stack", "history"):
        assert f"  {cmd} " in r.output
    assert "  lab " not in r.output  # the lab is not part of the product


def test_version_lists_the_four_versions() -> None:
    r = invoke("--version")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0].startswith("provision ")
    assert lines[1].startswith("ansible-core 2.")
    assert lines[2].startswith("ansible-runner 2.")
    assert lines[3].startswith("Python 3.")


def test_bad_option_values_exit_2() -> None:
    assert CliRunner().invoke(cli, ["--host", "h", "--port", "0"]).exit_code == 2
    assert CliRunner().invoke(cli, ["--host", "h", "--connection", "telnet"]).exit_code == 2
    assert CliRunner().invoke(cli, ["nosuchcommand"]).exit_code == 2


def test_host_and_inventory_together_is_a_usage_error(state_dir: Path, demo_content: Path) -> None:
    r = CliRunner().invoke(cli, ["--host", "a", "-i", str(demo_content / "inventory.yml")])
    assert r.exit_code == 2
    assert "either --host or -i" in r.output


def test_missing_inventory_is_a_usage_error(state_dir: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["check", "-i", str(tmp_path / "typo.yml")])
    assert r.exit_code == 2
    assert "typo.yml' does not exist" in r.output


def test_bad_stack_exits_2_naming_the_rule(state_dir: Path, tmp_path: Path) -> None:
    f = tmp_path / "s.yml"
    f.write_text("driver: {branch: '525'}\n")
    r = CliRunner().invoke(cli, ["--host", "h", "--stack", str(f)])
    assert r.exit_code == 2
    assert "driver branch 525 is below the minimum 530.30.02 for CUDA 12.1" in r.output
    r = CliRunner().invoke(cli, ["stack", "validate", "--stack", str(f)])
    assert r.exit_code == 2


def test_stack_show_and_validate(tmp_path: Path) -> None:
    r = invoke("stack", "show", "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["driver"]["branch"] == "580"
    r = invoke("stack", "show", "--vars")
    assert "gpu_stack_driver_branch: '580'" in r.stdout
    r = invoke("stack", "show")
    assert r.stdout.startswith("# source: built-in default")
    r = invoke("stack", "validate")
    assert r.exit_code == 0
    assert "valid" in r.stdout
    assert "debian12/x86_64" in r.stderr


def test_extra_vars_forms(tmp_path: Path) -> None:
    f = tmp_path / "v.yml"
    f.write_text("nvidia_driver_branch: '550'\nnested: {a: 1}\n")
    got = parse_extravars(["x=1 y='a b'", f"@{f}", '{"z": [1, 2]}', "x=2"])
    assert got == {
        "x": "2",
        "y": "a b",
        "nvidia_driver_branch": "550",
        "nested": {"a": 1},
        "z": [1, 2],
    }
    for bad in ["novalue", "@/does/not/exist", "[1, 2]", "1x=2"]:
        with pytest.raises(UsageProblem):
            parse_extravars([bad])


def test_extra_vars_override_the_stack() -> None:
    s = session.Settings(command="run", extra_vars=("nvidia_driver_reboot_local=true",),
                         no_reboot=True)

    ev = extravars.build_extravars(s, stack.load(None)).extravars
    assert ev["nvidia_driver_reboot_local"] == "true"
    assert ev["nvidia_driver_allow_reboot"] is False
    chk = extravars.build_extravars(session.Settings(command="check"), stack.load(None)).extravars
    assert chk["gpu_stack_validation_enabled"] is False
    chk = extravars.build_extravars(
        session.Settings(command="check", validate=True), stack.load(None)
    ).extravars
    assert chk["gpu_stack_validation_enabled"] is True
    val = extravars.build_extravars(
        session.Settings(command="validate"), stack.load(None)
    ).extravars
    assert val["gpu_stack_validation_enabled"] is True


def test_history_commands(state_dir: Path) -> None:

    sd = StateDir(state_dir)
    for rid, st in (
        ("20260101T000000Z-check-aaaaaa", "pass"),
        ("20260102T000000Z-check-bbbbbb", "drift"),
    ):
        sd.save_report(Report.from_dict(
            {
                "run_id": rid,
                "command": "check",
                "exit_code": 0 if st == "pass" else 5,
                "summary": {"hosts": 1},
                "hosts": {
                    "g1": {
                        "status": "ok" if st == "pass" else "drift",
                        "facts": {},
                        "checks": [{"id": "driver.hold", "status": st}],
                    }
                },
            }
        ))
    r = invoke("history", "list")
    assert r.exit_code == 0
    assert "20260101T000000Z-check-aaaaaa" in r.stdout
    assert "exit 5" in r.stdout
    r = invoke("history", "diff", "20260101", "20260102")
    assert r.exit_code == 0
    assert "g1: ok -> drift" in r.stdout
    assert "new problem: driver.hold: pass -> drift" in r.stdout
    r = invoke("history", "diff", "previous", "latest", "--json")
    assert json.loads(r.stdout)["hosts"][0]["status"] == {"before": "ok", "after": "drift"}
    r = invoke("history", "diff", "-2", "-1")  # counting back from the newest
    assert "g1: ok -> drift" in r.stdout
    r = CliRunner().invoke(cli, ["history", "diff", "nope"])
    assert r.exit_code == 2


def test_tags_must_name_roles(state_dir: Path, demo_content: Path) -> None:
    inv = str(demo_content / "inventory.yml")
    r = CliRunner().invoke(cli, ["-i", inv, "--tags", "demo_rol"])
    assert r.exit_code == 2
    assert "--tags: unknown role 'demo_rol' (roles: demo_role)" in r.output
    r = CliRunner().invoke(cli, ["check", "-i", inv, "--skip-tags", "demo_role,nope"])
    assert r.exit_code == 2
    assert "--skip-tags: unknown role 'nope'" in r.output
    r = CliRunner().invoke(cli, ["validate", "-i", inv, "--tags", "demo_role"])
    assert r.exit_code == 2
    assert "do not apply to `provision validate`" in r.output


def test_paramiko_cannot_use_another_known_hosts_file(state_dir: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        cli, ["--host", "h", "--connection", "paramiko", "--known-hosts", str(tmp_path / "kh")]
    )
    assert r.exit_code == 2
    assert "reads only ~/.ssh/known_hosts" in r.output


def test_connection_options_override_an_inventory() -> None:
    s = session.Settings(
        command="run",
        inventory="inv.yml",
        user="ops",
        port=2222,
        key=Path("/k/id"),
        connection="paramiko",
    )
    ev = extravars.build_extravars(s, stack.load(None)).extravars
    assert ev["ansible_user"] == "ops"
    assert ev["ansible_port"] == 2222
    assert ev["ansible_ssh_private_key_file"] == "/k/id"
    assert ev["ansible_connection"] == "paramiko_ssh"
    with_hosts = session.Settings(command="run", hosts=("h",), user="ops")
    assert "ansible_user" not in extravars.build_extravars(with_hosts, stack.load(None)).extravars


def test_options_before_and_after_the_subcommand_are_merged(
    calls: list[session.Settings],
) -> None:
    """Issue 14 item 14 / issue 12 item 6: `provision --host a check --host b` used only b."""
    r = CliRunner().invoke(
        cli,
        ["--host", "a", "-e", "x=1", "-v", "--report-dir", "r1", "check", "--host", "b",
         "-e", "y=2", "-vv", "--json"],
        prog_name="provision",
    )
    assert r.exit_code == 0, r.output
    (s,) = calls
    assert s.command == "check"
    assert s.hosts == ("a", "b")
    assert s.extra_vars == ("x=1", "y=2")
    assert s.verbosity == 3
    assert s.report_dir == Path("r1")
    assert s.as_json


def test_a_later_scalar_wins_and_the_earlier_one_is_named(calls: list[session.Settings]) -> None:
    r = CliRunner().invoke(
        cli, ["--user", "alice", "--port", "2200", "validate", "--host", "h", "--user", "bob"],
        prog_name="provision",
    )
    assert r.exit_code == 0, r.output
    (s,) = calls
    assert (s.user, s.port) == ("bob", 2200)
    assert (
        "warning: --user given twice: 'bob' (to `provision validate`) replaces 'alice'"
        in r.stderr
    )


def test_a_command_line_value_beats_the_environment_silently(
    calls: list[session.Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROVISION_INVENTORY", "from-env.yml")
    r = CliRunner().invoke(cli, ["-i", "given.yml", "check"], prog_name="provision")
    assert r.exit_code == 0, r.output
    assert calls[0].inventory == "given.yml"
    assert "warning" not in r.stderr
    r = CliRunner().invoke(cli, ["check"], prog_name="provision")
    assert calls[1].inventory == "from-env.yml"


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--no-reboot", "check", "--host", "h"], "--no-reboot"),
        (["--check", "validate", "--host", "h"], "--check"),
        (["--host", "h", "stack", "show"], "--host"),
        (["--stack", "s.yml", "preflight", "--host", "h"], "--stack"),
        (["--report-dir", "r", "history", "list"], "--report-dir"),
    ],
)
def test_an_option_the_subcommand_does_not_take_is_refused_not_dropped(
    calls: list[session.Settings], args: list[str], option: str
) -> None:
    r = CliRunner().invoke(cli, args, prog_name="provision")
    assert r.exit_code == 2, r.output
    assert f"{option}: not an option of `provision" in r.output
    assert calls == []


def test_stack_given_before_stack_show_is_used(tmp_path: Path) -> None:
    f = tmp_path / "s.yml"
    f.write_text("driver: {branch: '550'}\n")
    r = invoke("--stack", str(f), "stack", "show", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["driver"]["branch"] == "550"


@pytest.mark.parametrize("option", ["--report-dir", "--stack", "--key", "--known-hosts", "-i",
                                    "--host", "-e"])
def test_an_empty_path_or_value_is_refused(calls: list[session.Settings], option: str) -> None:
    """Issue 14 item 10: `--report-dir ''` wrote into the current directory."""
    args = ["--host", "h", option, ""] if option != "--host" else ["--host", ""]
    r = CliRunner().invoke(cli, args, prog_name="provision")
    assert r.exit_code == 2, r.output
    assert "empty value" in r.output
    assert calls == []


def test_the_group_holds_only_what_is_global(calls: list[session.Settings]) -> None:
    """Issue 18 item 4: each option belongs to its subcommand; the group takes --version and
    --help only, there is no merge of two levels, and `provision --host gpu01` is still the full
    run (the hidden subcommand `run`)."""
    from provisioner import settings  # noqa: PLC0415

    ctx = click.Context(cli)
    opts = {o for p in cli.get_params(ctx) for o in p.opts}
    assert opts == {"--version", "-h", "--help"}
    assert not hasattr(settings, "merge_params")
    run = cli.get_command(ctx, "run")
    assert run is not None and run.hidden
    assert "  run " not in invoke("--help").output
    r = invoke("--host", "gpu01")
    assert r.exit_code == 0, r.output
    assert [(s.command, s.hosts) for s in calls] == [("run", ("gpu01",))]
    # a value that looks like a subcommand stays the option's value
    r = invoke("--limit", "check", "--host", "gpu01")
    assert r.exit_code == 0, r.output
    assert (calls[-1].command, calls[-1].limit) == ("run", "check")
