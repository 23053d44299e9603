"""Issue 21: reliability and security, round 3 (each row of docs/reliability.md that names a test
here). Every test here failed on the code before its fix."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from probe_fakes import FakeHost, judge
from probe_fakes import stack as probe_stack
from sshd_fake import FakeSSHD
from test_wait import keys, known, nothing, run_wait, sbin, servers

from provisioner import knownhosts, session, stack
from provisioner import ssh_preflight as pf
from provisioner import wait as wt
from provisioner.cli import cli
from provisioner.exitcodes import ExitCode, StackError, UsageProblem
from provisioner.inventory import Target
from provisioner.report_model import Report
from provisioner.state import StateDir

H = "--hash=sha256:" + "a" * 64
__all__ = ["keys", "sbin", "servers"]  # fixtures shared with test_wait


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), prog_name="provision")


def _err(user: dict[str, Any]) -> str:
    with pytest.raises(StackError) as info:
        stack.resolve(user)
    assert info.value.exit_code == ExitCode.USAGE
    return str(info.value.message)


# ---------------------------------------------------------------- high: unverified wheels


def test_find_links_with_the_default_index_needs_hashes() -> None:
    """Was: find-links with the default index and no hashes passed `stack validate`."""
    msg = _err({"mirrors": {"pytorch_find_links": "http://m/wheels/"}})
    assert "mirrors.pytorch_find_links without mirrors.pytorch_hashes" in msg


def test_pytorch_hashes_check_fails_for_find_links_beside_an_index() -> None:
    """Was: `pytorch.hashes` pass ("index ...") though pip may take the mirror's wheel."""
    h = FakeHost().gpus()
    r = judge(h, ["pytorch"], probe_stack(**{"pytorch.find_links": "http://m/w/"}))
    check = r["by_id"]["pytorch.hashes"]
    assert check["status"] == "fail", check
    assert "unverified" in check["message"]
    assert r["plan"]["pytorch"]["install"] == []


# ---------------------------------------------------------------- high: URLs and names


URL_KEYS = ("nvidia_repo", "pytorch_index", "pytorch_find_links")


@pytest.mark.parametrize("key", URL_KEYS)
@pytest.mark.parametrize(
    "bad",
    [
        "http://m/repo\ndeb [trusted=yes] http://evil/ /",
        "http://m/repo [trusted=yes]",
        "http://m/repo\n",
        "http://m/re\x00po",
        "http://m/re\tpo",
        "--trusted-host=evil",
        "ftp://m/repo",
        "http://",
    ],
)
def test_every_url_in_the_stack_is_matched_whole(key: str, bad: str) -> None:
    """Was: a newline or ' [trusted=yes]' in mirrors.nvidia_repo passed and became a second
    sources line; pytorch_find_links was not checked at all."""
    user: dict[str, Any] = {"mirrors": {key: bad, "pytorch_hashes": [f"torch==2.5.1+cu121 {H}"]}}
    msg = _err(user)
    assert f"mirrors.{key}:" in msg and "no whitespace, control characters or options" in msg


@pytest.mark.parametrize(
    "url", ["https://m.example/cuda/repos", "file:///srv/mirror/cuda", "http://[::1]:8080/r",
            "http://10.0.0.1:8080/whl/cu121?x=1&y=%20"],
)
def test_plain_urls_are_accepted(url: str) -> None:
    s = stack.resolve({"mirrors": {"nvidia_repo": url, "pytorch_index": url}})
    assert s.data["mirrors"]["nvidia_repo"] == url


@pytest.mark.parametrize(
    ("path", "value"),
    [("pytorch.venv", "/opt/pytorch\n"), ("name", "lab\n"), ("driver.branch", "535\n")],
)
def test_a_trailing_newline_does_not_pass_a_pattern(path: str, value: str) -> None:
    """Was: `re.match(...$)` let a trailing newline through for the venv path and the name."""
    section, _, key = path.rpartition(".")
    user: dict[str, Any] = {section: {key: value}} if section else {key: value}
    assert f"{path}:" in _err(user)


def test_duplicate_names_in_pytorch_hashes_are_refused() -> None:
    """Was: a torch pinned twice skipped the version check."""
    user = {
        "pytorch": {"version": "2.13.0", "build": "cpu"},
        "mirrors": {"pytorch_find_links": "http://m/w/",
                    "pytorch_hashes": [f"torch==2.0.0 {H}", f"torch==2.13.0+cpu {H}"]},
    }
    assert "mirrors.pytorch_hashes: torch is pinned twice" in _err(user)


# ---------------------------------------------------------------- medium: -e connection vars


@pytest.mark.parametrize(
    "var",
    ["ansible_host_key_checking", "ansible_sftp_extra_args", "ansible_scp_extra_args",
     "ansible_ssh_host_key_checking", "ansible_scp_if_ssh", "ansible_sftp_batch_mode",
     "ansible_sshpass_prompt", "ansible_private_key", "ansible_password_file",
     "ansible_control_path", "ansible_control_path_dir", "ansible_pipelining",
     "ansible_timeout", "ansible_su_user", "ansible_runas_user"],
)
def test_every_variable_that_changes_how_ansible_connects_is_refused(var: str) -> None:
    """Was: -e ansible_host_key_checking=false accepted an unknown host key."""
    s = session.Settings(command="run", extra_vars=(f"{var}=false",))
    with pytest.raises(UsageProblem) as info:
        session.build_extravars(s, stack.load(None))
    assert f"-e {var}: a connection variable" in info.value.message


# ---------------------------------------------------------------- low: key fingerprints


@pytest.mark.parametrize(
    "value",
    ['{"gpu_stack_repo_key_fingerprints": ["3bf863cc"]}',
     '{"gpu_stack_repo_key_fingerprints": ["' + "G" * 40 + '"]}',
     "gpu_stack_repo_key_fingerprints=" + "A" * 40],
)
def test_malformed_repo_key_fingerprints_are_refused(value: str) -> None:
    s = session.Settings(command="run", extra_vars=(value,))
    with pytest.raises(StackError) as info:
        session.build_extravars(s, stack.load(None))
    assert "-e gpu_stack_repo_key_fingerprints:" in info.value.message


def test_a_malformed_fingerprint_fails_repo_key_on_the_host() -> None:
    r = judge(FakeHost(), ["repo"], probe_stack(**{"repo.key_fingerprints": ["3bf863cc"]}))
    check = r["by_id"]["repo.key"]
    assert check["status"] == "fail" and "not an OpenPGP fingerprint" in check["message"]


def test_a_full_fingerprint_with_spaces_is_accepted() -> None:
    fp = "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC"
    s = session.Settings(command="run",
                         extra_vars=(json.dumps({"gpu_stack_repo_key_fingerprints": [fp]}),))
    rv = session.build_extravars(s, stack.load(None))
    assert rv.extravars["gpu_stack_repo_key_fingerprints"] == [fp]


# ---------------------------------------------------------------- medium/low: history


def _good(sd: StateDir, run_id: str, hosts: tuple[str, ...] = ("g1",)) -> None:
    sd.save_report(Report.from_dict({
        "run_id": run_id, "command": "check", "exit_code": 0,
        "hosts": {h: {"status": "ok", "checks": [{"id": "driver.hold", "status": "pass"}]}
                  for h in hosts},
    }))


def test_deeply_nested_json_in_a_history_file_is_a_named_error(state_dir: Path) -> None:
    """Was: RecursionError traceback in show/diff; `history list` crashed as a whole."""
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    bad = sd.history / "20260102T000000.000Z-check-bbbbbb.json"
    bad.write_text('{"hosts": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for args in (("history", "show", "latest"), ("history", "diff", "previous", "latest")):
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert str(bad) in r.output and "nested deeper than" in r.output
    shallow = sd.history / "20260103T000000.000Z-check-cccccc.json"
    shallow.write_text('{"hosts": {}, "stack": ' + "[" * 200 + "]" * 200 + "}")
    r = run_cli("history", "list")
    assert r.exit_code == 0, r.output
    assert f"skipped {bad}" in r.output and f"skipped {shallow}" in r.output
    assert "aaaaaa" in r.output


def test_history_diff_names_a_host_present_in_one_run_only(state_dir: Path) -> None:
    """Was: `g2: None -> ok`."""
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa", ("g1",))
    _good(sd, "20260102T000000.000Z-check-bbbbbb", ("g1", "g2"))
    r = run_cli("history", "diff", "previous", "latest")
    assert r.exit_code == 0, r.output
    assert "g2: absent -> ok" in r.output and "None" not in r.output


def test_history_minus_zero_is_no_run(state_dir: Path) -> None:
    """Was: `history diff -0` diffed the oldest run."""
    sd = StateDir(state_dir)
    _good(sd, "20260101T000000.000Z-check-aaaaaa")
    _good(sd, "20260102T000000.000Z-check-bbbbbb")
    r = run_cli("history", "diff", "-0")
    assert r.exit_code == 2, r.output
    assert "no run '-0'" in r.output


# ---------------------------------------------------------------- medium: preflight at scale


def test_preflight_over_5000_unreachable_hosts_one_result_each_bounded_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: one thread per host ("can't start new thread" at 5,000, exit 1, no result). Real
    probes, each refused at once: a loopback port bound by this test and never listening."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    peak = [0]
    real = pf.probe

    def counting(t: Target, o: pf.ProbeOptions, lock: threading.Lock) -> pf.SshProbeResult:
        peak[0] = max(peak[0], threading.active_count())
        return real(t, o, lock)

    monkeypatch.setattr(pf, "probe", counting)
    base = threading.active_count()
    targets = [Target(name=f"h{i}", address="127.0.0.1", port=port) for i in range(5000)]
    try:
        results = pf.run_ssh_preflight(
            targets, pf.ProbeOptions(known_hosts=tmp_path / "kh", need_sudo=False))
    finally:
        closed.close()
    assert [r.host for r in results] == [t.name for t in targets]
    assert {r.status for r in results} == {"unreachable"}
    assert all(r.stage == "connect" for r in results), {r.message for r in results}
    assert peak[0] - base <= 2 * pf.WORKERS


def test_preflight_deadline_is_per_host_not_for_the_whole_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: one deadline for all: healthy hosts queued behind others reported unreachable.
    40 hosts answering in 0.1 s each through 2 workers take 2 s in all, each well within its 1 s."""
    def slow(t: Target, o: pf.ProbeOptions, lock: threading.Lock) -> pf.SshProbeResult:
        time.sleep(0.1)
        return pf.SshProbeResult(host=t.name, address=t.address, port=t.port, status="ok")

    monkeypatch.setattr(pf, "probe", slow)
    targets = [Target(name=f"h{i}", address="127.0.0.1", port=22) for i in range(40)]
    results = pf.run_ssh_preflight(
        targets, pf.ProbeOptions(known_hosts=tmp_path / "kh", need_sudo=False),
        deadline=1.0, workers=2)
    assert [r.status for r in results] == ["ok"] * 40


def test_a_hung_probe_is_given_up_on_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def probe(t: Target, o: pf.ProbeOptions, lock: threading.Lock) -> pf.SshProbeResult:
        if t.name == "hung":
            release.wait()
        return pf.SshProbeResult(host=t.name, address=t.address, port=t.port, status="ok")

    monkeypatch.setattr(pf, "probe", probe)
    targets = [Target(name=n, address="127.0.0.1", port=22) for n in ("hung", "a", "b", "c")]
    try:
        results = pf.run_ssh_preflight(
            targets, pf.ProbeOptions(known_hosts=tmp_path / "kh", need_sudo=False),
            deadline=0.5, workers=1)
    finally:
        release.set()
    assert [(r.host, r.status, r.stage) for r in results] == [
        ("hung", "unreachable", "timeout"), ("a", "ok", ""), ("b", "ok", ""), ("c", "ok", "")]


# ---------------------------------------------------------------- medium: bounded reads


def _exe(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def test_endless_probe_output_is_cut_at_the_bound(
    keys: dict[str, Any], tmp_path: Path
) -> None:
    """Was: the probe's output read without bound (one host took the controller to 2.4 GB)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    size = 3 * pf.PROBE_OUTPUT_LIMIT
    _exe(bin_dir / "sh", f"#!/bin/sh\nexec /usr/bin/head -c {size} /dev/zero\n")
    srv = FakeSSHD(keys["host"], keys["client"], env={"PATH": str(bin_dir)})
    try:
        t = Target(name="chatty", address="127.0.0.1", port=srv.port, user="tester",
                   key_file=keys["client_file"])
        (r,) = pf.run_ssh_preflight([t], pf.ProbeOptions(
            known_hosts=known(tmp_path, keys, srv.port), need_sudo=False, connect_timeout=5.0))
    finally:
        srv.close()
    assert (r.status, r.stage) == ("failed", "exec"), r
    assert f"printed over {pf.PROBE_OUTPUT_LIMIT} bytes" in r.message


def test_a_huge_cloud_init_status_line_is_cut_to_its_tail(
    servers: Any, keys: dict[str, Any], tmp_path: Path, sbin: Path
) -> None:
    """Was: a 5-10 MB one-line message kept whole and decoded again for every 4 KB read."""
    _exe(sbin / "cloud-init",
         "#!/bin/sh\n/usr/bin/head -c 6000000 /dev/zero | /usr/bin/tr '\\0' x\n"
         "echo; echo 'status: done'\n")
    srv = servers.start()
    r, lines = run_wait(srv.port, keys, known(tmp_path, keys, srv.port), 120, nothing)
    assert (r.status, r.cloud_init) == ("ok", "done"), (r, lines[-3:])
    cut = [ln for ln in lines if "printed over" in ln]
    assert len(cut) == 1 and f"only the last {wt.CLOUD_INIT_OUTPUT_LIMIT} kept" in cut[0]


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "dir", "huge"])
def test_known_hosts_that_is_not_a_file_or_too_big_is_a_named_error(
    tmp_path: Path, kind: str
) -> None:
    """Was: --known-hosts /dev/zero read without end, a FIFO hung."""
    if kind == "/dev/zero":
        path = Path("/dev/zero")
    elif kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif kind == "dir":
        path = tmp_path
    else:
        path = tmp_path / "kh"
        with path.open("wb") as fh:
            fh.truncate(knownhosts.MAX_BYTES + 1)
    kh = knownhosts.load(path)
    assert kh.error is not None and str(path) in kh.error
    assert ("not a regular file" if kind != "huge" else "over") in kh.error
    assert knownhosts.load(Path(os.devnull)).error is None


# ---------------------------------------------------------------- medium: signals, orphans


def test_the_secrets_file_is_gone_once_ansible_playbook_has_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the unmasked -e values stayed on disk until the run ended (and after a SIGKILL)."""
    from test_runner import req  # noqa: PLC0415

    from provisioner import runner  # noqa: PLC0415

    written: list[Path] = []
    real = runner.write_extravars

    def record(pdd: Path, extravars: Any) -> Path:
        written.append(real(pdd, extravars))
        return written[-1]

    monkeypatch.setattr(runner, "write_extravars", record)
    seen: list[bool] = []
    r = runner.run_playbook(
        req(tmp_path, limit="h-ok", extravars={"demo_change": False, "vault_password": "x1"},
            become=None),
        lambda event: seen.append(written[0].exists())
        if str(event.get("event")).startswith(runner.STARTED_EVENTS) else None,
    )
    assert r.status == "successful"
    assert len(seen) > 3 and not any(seen)


def test_int_term_and_hup_all_cancel_the_run() -> None:
    """Was: SIGHUP killed provision (exit 129, no report) and left ansible-playbook running."""
    import signal  # noqa: PLC0415

    from provisioner import runner  # noqa: PLC0415

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        saved = runner._signal_handlers()
        assert sig in saved
        cancelled = runner._cancel_on_signals(saved)
        try:
            assert not cancelled()
            os.kill(os.getpid(), sig)
            assert cancelled()
        finally:
            runner._restore_signal_handlers(saved)


ORPHAN = """
import os, subprocess, sys, time
from provisioner import runner
assert runner.become_subreaper()
# a child that starts a worker in a session of its own (as ansible-core's workers call setsid),
# then dies: the worker is orphaned, and comes back to us
child = subprocess.run([sys.executable, "-c", '''
import os, time
if os.fork() == 0:
    os.setsid(); time.sleep(600)
else:
    time.sleep(0.1)
'''], check=True)
kids = runner.descendants(os.getpid())
assert len(kids) == 1, kids
stopped = runner.stop_process_tree(os.getpid())
assert stopped == kids, (stopped, kids)
try:
    os.kill(kids[0], 0)
    print("alive")
except ProcessLookupError:
    print("gone")
"""


def test_a_cancelled_runs_orphaned_workers_are_stopped() -> None:
    """Was: after Ctrl-C, the worker of the running task (setsid) went on, on a host whose lock
    was released. The CLI is a child subreaper; the run's leftover processes are stopped."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    out = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "gone"


# ---------------------------------------------------------------- low: inputs


@pytest.mark.parametrize("value", [1.0, 1, "True", "on"])
def test_reboot_local_read_as_ansible_reads_booleans(tmp_path: Path, value: object) -> None:
    """Was: `nvidia_driver_reboot_local: 1.0` bypassed the --local guard (the role's `| bool`
    reads it as true)."""
    from ansible.plugins.filter.core import to_bool  # noqa: PLC0415
    from test_local import FakeSystem, local_settings  # noqa: PLC0415

    from provisioner import local  # noqa: PLC0415

    assert to_bool(value)  # as the role reads it
    with pytest.raises(UsageProblem, match="would reboot in the middle"):
        local.check(local_settings(tmp_path), {"nvidia_driver_reboot_local": value},
                    FakeSystem(tmp_path))


@pytest.mark.parametrize("user", ["-oProxyCommand=x", "a b", "x\n", "a;b", "", "@h"])
def test_user_is_checked_like_the_user_part_of_host(user: str) -> None:
    from provisioner import inventory  # noqa: PLC0415

    with pytest.raises(UsageProblem, match="--user"):
        inventory.targets_from_hosts(["h1"], user=user)


def _inventory(tmp_path: Path, hostvars: str) -> Path:
    f = tmp_path / "inv.yml"
    f.write_text(f"all:\n  hosts:\n    g1:\n{hostvars}", encoding="utf-8")
    return f


def test_inventory_port_0_is_refused_not_22(tmp_path: Path) -> None:
    from provisioner import inventory  # noqa: PLC0415

    with pytest.raises(UsageProblem, match="ansible_port '0' is not a port number"):
        inventory.targets_from_inventory(_inventory(tmp_path, "      ansible_port: 0\n"))


def test_a_huge_ansible_host_is_a_short_named_error(tmp_path: Path) -> None:
    """Was: a 5 MB ansible_host gave an idna traceback-like message."""
    from provisioner import inventory  # noqa: PLC0415

    f = _inventory(tmp_path, f"      ansible_host: {'a' * 5_000_000}\n")
    with pytest.raises(UsageProblem) as info:
        inventory.targets_from_inventory(f)
    msg = info.value.message
    assert "is not a host name or address" in msg and len(msg) < 400


# ---------------------------------------------------------------- low: the report directory


def test_the_three_report_files_are_written_as_one_set(tmp_path: Path) -> None:
    """Was: a failure part way left report.json new and the other two old (or missing)."""
    from provisioner import reports  # noqa: PLC0415

    old = Report.from_dict({"run_id": "old", "command": "check", "hosts": {}})
    reports.write_all(old, tmp_path)
    before = {n: (tmp_path / n).read_text() for n in reports.REPORT_FILES}
    (tmp_path / reports.PROM_FILE).unlink()
    (tmp_path / reports.PROM_FILE).mkdir()
    new = Report.from_dict({"run_id": "new", "command": "check", "hosts": {}})
    with pytest.raises(OSError, match="is a directory"):
        reports.write_all(new, tmp_path)
    for n in (reports.REPORT_JSON, reports.JUNIT_XML):
        assert (tmp_path / n).read_text() == before[n]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_report_dir_that_fails_after_the_run_keeps_the_runs_exit(
    tmp_path: Path, demo_content: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Was: the run's exit replaced by 2. Checked before the run; a failure after it (a full
    disk) is an error line, and the run's own exit code stands."""
    from test_session import Replay, probes  # noqa: PLC0415

    def full(*_a: object) -> list[Path]:
        raise OSError(28, "No space left on device")

    plain = session.Settings(command="run", hosts=("h-ok",))
    want = session.execute(plain, state=StateDir(tmp_path / "st0"), run_fn=Replay("run"),
                           preflight_fn=probes({}))
    monkeypatch.setattr(session, "write_all", full)
    s = session.Settings(command="run", hosts=("h-ok",), report_dir=tmp_path / "rep")
    rc = session.execute(s, state=StateDir(tmp_path / "st"), run_fn=Replay("run"),
                         preflight_fn=probes({}))
    assert rc == want != 2
    assert "--report-dir" in capsys.readouterr().err


def test_a_report_file_that_is_a_directory_is_refused_before_the_run(
    tmp_path: Path, demo_content: Path
) -> None:
    from test_session import Replay, probes  # noqa: PLC0415

    (tmp_path / "rep" / "junit.xml").mkdir(parents=True)
    s = session.Settings(command="run", hosts=("h-ok",), report_dir=tmp_path / "rep")
    ran: list[object] = []

    def run(*a: object) -> object:
        ran.append(a)
        return Replay("run")(*a)

    with pytest.raises(UsageProblem, match="is a directory"):
        session.execute(s, state=StateDir(tmp_path / "st"), run_fn=run, preflight_fn=probes({}))
    assert not ran


# ---------------------------------------------------------------- low: a protocol error


def test_a_protocol_error_after_the_banner_is_not_called_a_timeout(tmp_path: Path) -> None:
    """Was: `SSH handshake ... timed out` for a server that sent garbage after its banner."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 broken\r\n" + b"\x00\x00\x00\x0c\x0a" + b"\xff" * 64)
        conn.recv(65536)
        conn.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    t = Target(name="broken", address="127.0.0.1", port=srv.getsockname()[1], user="tester")
    try:
        r = pf.probe(t, pf.ProbeOptions(known_hosts=tmp_path / "kh", need_sudo=False,
                                        connect_timeout=30.0, accept_new=True),
                     threading.Lock())
    finally:
        srv.close()
    assert (r.status, r.stage) == ("unreachable", "connect"), r.message
    assert "failed after the server's banner (SSH-2.0-OpenSSH_9.2p1 broken)" in r.message
    assert "timed out" not in r.message
