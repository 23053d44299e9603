"""--wait DURATION: SSH that comes up late, keys, cloud-init, the bound; against the in-process SSH
server (tests/unit/sshd_fake.py). Progress lines drive the tests (no sleeps, no timed asserts)."""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
from click.testing import CliRunner
from sshd_fake import FakeSSHD

from provisioner import session
from provisioner import ssh_preflight as pf
from provisioner import wait as wt
from provisioner.cli import cli
from provisioner.inventory import Target
from provisioner.state import StateDir


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("keys")
    client = paramiko.ECDSAKey.generate()
    client.write_private_key_file(str(d / "id_ecdsa"))
    return {
        "host": paramiko.ECDSAKey.generate(),
        "client": client,
        "client_file": str(d / "id_ecdsa"),
        "stranger": paramiko.ECDSAKey.generate(),
    }


@pytest.fixture
def sbin(tmp_path: Path) -> Path:
    """The fake server's PATH: only what the cloud-init script needs (no real cloud-init)."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("sh", "sleep", "timeout", "cat", "rm", "uname", "id"):
        for where in ("/usr/bin", "/bin"):
            if Path(where, tool).exists():
                (d / tool).symlink_to(Path(where, tool))
                break
    return d


def fake_cloud_init(bin_dir: Path, flag: Path, *, status: str = "done", rc: int = 0) -> None:
    """`cloud-init status --wait` that prints `status: running` and ends only when `flag`
    appears, then prints `status: <status>` and exits rc."""
    script = bin_dir / "cloud-init"
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = status ] || exit 64\n'
        "echo 'status: running'\n"
        f"while [ ! -e '{flag}' ]; do sleep 0.1; done\n"
        f"echo; echo 'status: {status}'\n"
        f"exit {rc}\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


class Servers:
    """FakeSSHDs started during a test (closed at teardown)."""

    def __init__(self, keys: dict[str, Any], env: dict[str, str]) -> None:
        self.keys = keys
        self.env = env
        self.all: list[FakeSSHD] = []

    def start(self, port: int = 0, authorized: paramiko.PKey | None = None) -> FakeSSHD:
        srv = FakeSSHD(self.keys["host"], authorized or self.keys["client"], port=port,
                       env=self.env)
        self.all.append(srv)
        return srv


@pytest.fixture
def servers(keys: dict[str, Any], sbin: Path) -> Iterator[Servers]:
    s = Servers(keys, {"PATH": str(sbin), "LANG": "C.UTF-8"})
    yield s
    for srv in s.all:
        srv.close()


def target(port: int, keys: dict[str, Any]) -> Target:
    return Target(name="new01", address="127.0.0.1", port=port, user="tester",
                  key_file=keys["client_file"])


def known(tmp_path: Path, keys: dict[str, Any], port: int) -> Path:
    kh = tmp_path / "known_hosts"
    kh.write_text(
        f"[127.0.0.1]:{port} {keys['host'].get_name()} {keys['host'].get_base64()}\n",
        encoding="utf-8",
    )
    return kh


def run_wait(
    port: int, keys: dict[str, Any], kh: Path, budget: float, on_line: Callable[[str], None],
    *, accept_new: bool = False,
) -> tuple[pf.SshProbeResult, list[str]]:
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        on_line(line)

    probe = pf.ProbeOptions(known_hosts=kh, accept_new=accept_new, need_sudo=False,
                            connect_timeout=5.0)
    (r,) = wt.wait_for_hosts([target(port, keys)], probe,
                             wt.WaitOptions(budget_s=budget, heartbeat_s=3600), say=say)
    return r, lines


def nothing(_line: str) -> None:
    return None


# ------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10m", 600), ("300s", 300), ("1h30m", 5400), ("90", 90), ("1m30s", 90), ("2.5s", 2.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert wt.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "0", "0s", "-5m", "m", "200h"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|more than 0|at most"):
        wt.parse_duration(text)


def test_format_duration() -> None:
    assert [wt.format_duration(x) for x in (600, 5400, 75, 4.2, 0)] == [
        "10m", "1h30m", "1m15s", "4s", "0s"
    ]


@pytest.mark.parametrize("value", ["abc", "0", "-1m"])
def test_wait_option_refuses_a_bad_duration(value: str) -> None:
    r = CliRunner().invoke(cli, ["--host", "x", "--wait", value], prog_name="provision")
    assert r.exit_code == 2, r.output
    assert "--wait" in r.output


# ------------------------------------------------------------------------- SSH


def test_waits_for_sshd_to_come_up_then_finds_no_cloud_init(
    servers: Servers, keys: dict[str, Any], tmp_path: Path
) -> None:
    port = free_port()
    kh = known(tmp_path, keys, port)

    def on_line(line: str) -> None:  # sshd starts once the wait has seen it refuse
        if "no SSH yet" in line and not servers.all:
            servers.start(port)

    r, lines = run_wait(port, keys, kh, 120, on_line)
    assert (r.status, r.stage, r.cloud_init) == ("ok", "", "absent"), (r, lines)
    refused = [x for x in lines if "no SSH yet" in x]
    assert refused and "connect" in refused[0] and "refused" in refused[0].lower(), lines
    assert any("SSH answers" in x for x in lines), lines
    assert lines[-1].startswith("wait new01: no cloud-init on the host; ready"), lines


def test_retries_a_refused_key_until_it_is_authorized(
    servers: Servers, keys: dict[str, Any], tmp_path: Path
) -> None:
    """sshd is up before cloud-init has installed the user's key: auth failures are retried."""
    srv = servers.start(authorized=keys["stranger"])
    kh = known(tmp_path, keys, srv.port)

    def on_line(line: str) -> None:
        if "no SSH yet: auth" in line:
            srv.authorized = keys["client"]

    r, lines = run_wait(srv.port, keys, kh, 120, on_line)
    assert r.status == "ok", (r, lines)
    assert any("no SSH yet: auth" in x for x in lines), lines


def test_an_unknown_host_key_ends_the_wait_at_once(
    servers: Servers, keys: dict[str, Any], tmp_path: Path
) -> None:
    srv = servers.start()
    kh = tmp_path / "known_hosts"
    r, lines = run_wait(srv.port, keys, kh, 600, nothing)
    assert (r.status, r.stage) == ("unreachable", "hostkey"), r
    assert r.fingerprint == pf.fingerprint(keys["host"].asbytes())
    assert "--accept-new-host-keys" in r.message
    assert not any("no SSH yet" in x for x in lines), lines  # one try: waiting cannot fix it
    assert not kh.exists()


def test_a_changed_host_key_ends_the_wait_at_once(
    servers: Servers, keys: dict[str, Any], tmp_path: Path
) -> None:
    srv = servers.start()
    kh = tmp_path / "known_hosts"
    other = keys["stranger"]
    kh.write_text(f"[127.0.0.1]:{srv.port} {other.get_name()} {other.get_base64()}\n",
                  encoding="utf-8")
    r, _ = run_wait(srv.port, keys, kh, 600, nothing)
    assert (r.status, r.stage) == ("unreachable", "hostkey"), r
    assert "HOST KEY CHANGED" in r.message
    assert kh.read_text(encoding="utf-8").count("\n") == 1


def test_accept_new_host_keys_adds_the_key_while_waiting(
    servers: Servers, keys: dict[str, Any], tmp_path: Path
) -> None:
    srv = servers.start()
    kh = tmp_path / "known_hosts"
    r, _ = run_wait(srv.port, keys, kh, 120, nothing, accept_new=True)
    assert r.status == "ok" and r.accepted_key, r
    assert keys["host"].get_base64() in kh.read_text(encoding="utf-8")
    # the preflight that follows knows the key now, without --accept-new-host-keys
    probe = pf.probe(target(srv.port, keys),
                     pf.ProbeOptions(known_hosts=kh, need_sudo=False), threading.Lock())
    assert probe.stage != "hostkey", probe


def test_the_bound_passes_while_ssh_is_down(keys: dict[str, Any], tmp_path: Path) -> None:
    port = free_port()
    r, lines = run_wait(port, keys, known(tmp_path, keys, port), 1.5, nothing)
    assert (r.status, r.stage) == ("unreachable", "connect"), r
    assert r.message.startswith("new01: gave up after 2s (--wait) waiting for SSH to answer on "
                                f"127.0.0.1:{port}; last: cannot connect"), r.message
    assert lines[-1] == f"wait new01: {r.message}"


def test_the_bound_passes_while_the_key_is_refused(
    servers: Servers, keys: dict[str, Any], tmp_path: Path
) -> None:
    srv = servers.start(authorized=keys["stranger"])
    r, _ = run_wait(srv.port, keys, known(tmp_path, keys, srv.port), 1.5, nothing)
    assert (r.status, r.stage) == ("unreachable", "auth"), r
    assert "waiting for a login over SSH" in r.message


# ------------------------------------------------------------------------- cloud-init


def test_waits_for_cloud_init_to_finish(
    servers: Servers, keys: dict[str, Any], tmp_path: Path, sbin: Path
) -> None:
    flag = tmp_path / "cloud-init-done"
    fake_cloud_init(sbin, flag)
    srv = servers.start()
    seen_before_flag: list[str] = []

    def on_line(line: str) -> None:
        if wt.CLOUD_INIT_RUNNING in line and not flag.exists():
            seen_before_flag.append(line)
            flag.touch()

    r, lines = run_wait(srv.port, keys, known(tmp_path, keys, srv.port), 120, on_line)
    assert (r.status, r.cloud_init) == ("ok", "done"), (r, lines)
    assert seen_before_flag, lines
    running = next(i for i, x in enumerate(lines) if wt.CLOUD_INIT_RUNNING in x)
    assert lines[-1].startswith("wait new01: cloud-init done; ready"), lines
    assert running < len(lines) - 1


def test_cloud_init_still_running_when_the_bound_passes(
    servers: Servers, keys: dict[str, Any], tmp_path: Path, sbin: Path
) -> None:
    fake_cloud_init(sbin, tmp_path / "never")
    srv = servers.start()
    r, lines = run_wait(srv.port, keys, known(tmp_path, keys, srv.port), 2, nothing)
    assert (r.status, r.stage, r.cloud_init) == ("failed", "cloud_init", "running"), (r, lines)
    assert r.message.startswith("new01: gave up after 2s (--wait) waiting for cloud-init to finish")
    assert "last status: running" in r.message


@pytest.mark.parametrize(("status", "rc", "outcome"), [("error", 1, "error"),
                                                       ("done", 2, "degraded"),
                                                       ("disabled", 0, "disabled")])
def test_how_cloud_init_ended(  # noqa: PLR0917 - fixtures and parameters
    servers: Servers, keys: dict[str, Any], tmp_path: Path, sbin: Path,
    status: str, rc: int, outcome: str,
) -> None:
    flag = tmp_path / "flag"
    flag.touch()
    fake_cloud_init(sbin, flag, status=status, rc=rc)
    srv = servers.start()
    r, _ = run_wait(srv.port, keys, known(tmp_path, keys, srv.port), 120, nothing)
    assert r.cloud_init == outcome, r
    if outcome == "error":
        assert (r.status, r.stage) == ("failed", "cloud_init")
        assert "cloud-init finished with errors (status: error, exit 1)" in r.message
    else:
        assert r.status == "ok", r
        assert bool(r.warnings) == (outcome == "degraded"), r.warnings


def test_a_reboot_during_cloud_init_goes_back_to_waiting_for_ssh(
    servers: Servers, keys: dict[str, Any], tmp_path: Path, sbin: Path
) -> None:
    """cloud-init reboots the machine: the session drops, SSH comes back, cloud-init is done."""
    flag = tmp_path / "flag"
    fake_cloud_init(sbin, flag)
    first = servers.start()
    port = first.port

    def on_line(line: str) -> None:
        if wt.CLOUD_INIT_RUNNING in line and len(servers.all) == 1:
            first.close()  # the machine goes down ...
            flag.touch()
        elif "no SSH yet" in line and len(servers.all) == 1:
            servers.start(port)  # ... and comes back

    r, lines = run_wait(port, keys, known(tmp_path, keys, port), 120, on_line)
    assert (r.status, r.cloud_init) == ("ok", "done"), (r, lines)
    assert any("connection was lost while waiting for cloud-init" in x for x in lines), lines
    assert len(servers.all) == 2


def test_local_and_deferred_targets_are_not_waited_for(keys: dict[str, Any]) -> None:
    targets = [Target(name="me", address="localhost", connection="local"),
               Target(name="later", address="x", deferred="ansible_host '{{ x }}'")]
    out = wt.wait_for_hosts(targets, pf.ProbeOptions(), wt.WaitOptions(budget_s=1), say=nothing)
    assert [r.status for r in out] == ["skipped", "skipped"]
    assert all("not waited for" in r.message for r in out)


# ------------------------------------------------------------------------- the session and CLI


def test_a_failed_wait_leaves_the_host_out_of_the_run(
    tmp_path: Path, demo_content: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_session import HOSTS, Replay, probes  # noqa: PLC0415

    def wait_fn(targets: list[Target], probe: Any, opts: Any, *, say: Any) -> list:
        assert opts.budget_s == 30
        out = []
        for t in targets:
            r = pf.SshProbeResult(host=t.name, address=t.address, port=t.port)
            if t.name == "h-unreachable":
                r.status, r.stage, r.message = "unreachable", "connect", "gave up (SSH)"
            if t.name == "h-ok":
                r.status, r.stage, r.message = "failed", "cloud_init", "gave up (cloud-init)"
            out.append(r)
        return out

    seen: list[str] = []

    def preflight_fn(targets: list[Target], opts: Any) -> list:
        seen.extend(t.name for t in targets)
        return probes({})(targets, opts)

    replay = Replay("run")
    code = session.execute(
        session.Settings(command="run", hosts=HOSTS, report_dir=tmp_path / "rep", wait=30),
        state=StateDir(tmp_path / "st"), run_fn=replay, preflight_fn=preflight_fn,
        wait_fn=wait_fn,
    )
    assert code == 1
    assert "h-ok" not in seen and "h-unreachable" not in seen
    (req,) = replay.requests
    assert "h-ok" not in (req.limit or "").split(",")
    import json  # noqa: PLC0415

    rep = json.loads((tmp_path / "rep" / "report.json").read_text(encoding="utf-8"))
    ok_host = rep["hosts"]["h-ok"]
    assert ok_host["status"] == "failed"
    assert [(c["id"], c["status"]) for c in ok_host["checks"]] == [("ssh.cloud_init", "fail")]
    assert ok_host["checks"][0]["expected"].startswith("cloud-init finished")


def test_preflight_command_waits_and_reports_the_bound(
    keys: dict[str, Any], tmp_path: Path
) -> None:
    port = free_port()
    kh = known(tmp_path, keys, port)
    r = CliRunner().invoke(
        cli,
        ["preflight", "--host", f"tester@127.0.0.1:{port}", "--key", keys["client_file"],
         "--known-hosts", str(kh), "--wait", "1s"],
        prog_name="provision", env={"HOME": str(tmp_path)},
    )
    assert r.exit_code == 3, r.output
    assert "gave up after 1s (--wait) waiting for SSH to answer" in r.output
    assert f"wait 127.0.0.1: waiting up to 1s for SSH on 127.0.0.1:{port}" in r.stderr


def test_preflight_command_waits_then_probes(
    servers: Servers, keys: dict[str, Any], tmp_path: Path
) -> None:
    srv = servers.start()
    kh = known(tmp_path, keys, srv.port)
    r = CliRunner().invoke(
        cli,
        ["preflight", "--host", f"tester@127.0.0.1:{srv.port}", "--key", keys["client_file"],
         "--known-hosts", str(kh), "--wait", "1m", "--no-become", "--json"],
        prog_name="provision", env={"HOME": str(tmp_path)},
    )
    assert r.exit_code == 0, r.output
    import json  # noqa: PLC0415

    (row,) = json.loads(r.stdout)
    assert row["status"] == "ok" and row["kernel"] == os.uname().release, row
