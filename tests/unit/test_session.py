"""session.execute() end to end with a recorded run replayed in place of ansible-runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import recorded

from provisioner import session
from provisioner.exitcodes import SetupError, UsageProblem
from provisioner.runner import RunRequest, RunResult
from provisioner.ssh_preflight import SshProbeResult
from provisioner.state import StateDir


class Replay:
    """A run_fn: feeds a recorded event stream to the handler, returns its stats."""

    def __init__(self, name: str) -> None:
        self.rec = recorded(name)
        self.requests: list[RunRequest] = []
        self.inventories: list[str] = []

    def __call__(self, req: RunRequest, on_event: Any) -> RunResult:
        self.requests.append(req)
        self.inventories.append(req.inventory.read_text(encoding="utf-8"))
        for e in self.rec["events"]:
            on_event(e)
        return RunResult(
            status=self.rec["status"],
            rc=self.rec["rc"],
            artifacts=req.artifact_dir / req.ident,
            stats=self.rec["stats"],
        )


def probes(bad: dict[str, str]) -> Any:
    def fn(targets: list, opts: Any) -> list[SshProbeResult]:
        out = []
        for t in targets:
            r = SshProbeResult(
                host=t.name,
                address=t.address,
                port=t.port,
                os_id="debian",
                os_version="12",
                arch="x86_64",
                python="3.11.2",
            )
            if t.name in bad:
                r.status, r.stage, r.message = "unreachable", bad[t.name], "nope"
            out.append(r)
        return out

    return fn


HOSTS = ("h-ok", "h-changed", "h-drift", "h-fail", "h-taskfail", "h-unreachable")


def settings(command: str, tmp_path: Path, **kw: Any) -> session.Settings:
    return session.Settings(command=command, hosts=HOSTS, report_dir=tmp_path / "rep", **kw)


def test_preflight_failures_are_left_out_and_reported(
    tmp_path: Path, demo_content: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = Replay("run")
    code = session.execute(
        settings("run", tmp_path),
        state=StateDir(tmp_path / "st"),
        run_fn=replay,
        preflight_fn=probes({"h-ok": "hostkey"}),
    )
    assert code == 1
    (req,) = replay.requests
    assert req.limit == "h-changed,h-drift,h-fail,h-taskfail,h-unreachable"
    assert req.forks == 5
    assert req.check is False
    assert req.extravars["nvidia_driver_allow_reboot"] is True
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert list(report["hosts"]) == list(HOSTS)  # the order given on the command line
    h = report["hosts"]["h-ok"]
    assert h["status"] == "unreachable"
    assert h["checks"][0]["id"] == "ssh.hostkey"
    assert report["hosts"]["h-taskfail"]["status"] == "failed"
    assert report["summary"]["unreachable"] == 2
    assert report["exit_code"] == 1
    out = capsys.readouterr()
    assert "preflight h-ok: UNREACHABLE at hostkey: nope" in out.err
    assert "6 host(s)" in out.out


def test_limit_applies_to_host_targets_before_preflight(tmp_path: Path, demo_content: Path) -> None:
    """--limit with --host: the excluded hosts are neither probed nor run, even when a probe fails
    (the limit must never be replaced by 'every host that passed')."""
    replay = Replay("run")
    probed: list[str] = []
    inner = probes({"h-ok": "connect"})

    def record(targets: list, opts: Any) -> list[SshProbeResult]:
        probed.extend(t.name for t in targets)
        return inner(targets, opts)

    session.execute(
        settings("run", tmp_path, limit="h-ok,h-changed"),
        state=StateDir(tmp_path / "st"),
        run_fn=replay,
        preflight_fn=record,
    )
    assert sorted(probed) == ["h-changed", "h-ok"]
    (req,) = replay.requests
    assert req.limit == "h-changed"
    # the inventory Ansible gets holds only the limited hosts
    assert "h-changed" in replay.inventories[0] and "h-drift" not in replay.inventories[0]


def test_limit_matching_no_host_target_is_a_usage_error(tmp_path: Path, demo_content: Path) -> None:
    with pytest.raises(UsageProblem, match="matches none of the --host hosts"):
        session.resolve_targets(session.Settings(command="run", hosts=HOSTS, limit="nomatch"))


def test_all_hosts_failing_preflight_skip_ansible(tmp_path: Path, demo_content: Path) -> None:
    replay = Replay("run")
    bad = dict.fromkeys(HOSTS, "connect")
    code = session.execute(
        settings("run", tmp_path),
        state=StateDir(tmp_path / "st"),
        run_fn=replay,
        preflight_fn=probes(bad),
    )
    assert code == 3
    assert replay.requests == []


def test_check_drift_and_history(tmp_path: Path, demo_content: Path) -> None:
    st = StateDir(tmp_path / "st")
    hosts = ("h-ok", "h-drift", "h-changed")
    s = session.Settings(command="check", hosts=hosts, no_reboot=True, validate=True)
    replay = Replay("check")
    assert session.execute(s, state=st, run_fn=replay, preflight_fn=probes({})) == 1
    (req,) = replay.requests
    assert req.check is True
    assert req.extravars["gpu_stack_validation_enabled"] is True
    assert req.forks == 3
    # the recorded run also holds h-fail (failed): the report keeps it, the exit code follows
    saved = st.load_raw("latest")
    assert saved["hosts"]["h-drift"]["status"] == "drift"
    assert saved["hosts"]["h-changed"]["status"] == "drift"
    assert "changes" not in saved
    session.execute(s, state=st, run_fn=Replay("check"), preflight_fn=probes({}))
    assert st.load_raw("latest")["changes"]["hosts"] == []


def test_missing_playbook_is_a_setup_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    content = tmp_path / "content"
    (content / "playbooks").mkdir(parents=True)
    (content / "roles").mkdir()
    monkeypatch.setenv("PROVISION_CONTENT_DIR", str(content))
    with pytest.raises(SetupError, match=r"playbook site\.yml not found") as info:
        session.execute(
            settings("run", tmp_path),
            state=StateDir(tmp_path / "st"),
            run_fn=Replay("run"),
            preflight_fn=probes({}),
        )
    assert info.value.exit_code == 4


def test_unwritable_report_dir_is_a_usage_error(tmp_path: Path, demo_content: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    s = session.Settings(command="run", hosts=("h-ok",), report_dir=blocker / "rep")

    with pytest.raises(UsageProblem, match="--report-dir") as info:
        session.execute(
            s, state=StateDir(tmp_path / "st"), run_fn=Replay("run"), preflight_fn=probes({})
        )
    assert info.value.exit_code == 2
    bad_state = StateDir(blocker / "state")
    with pytest.raises(SetupError, match="cannot create the state directory"):
        session.execute(
            session.Settings(command="run", hosts=("h-ok",)),
            state=bad_state,
            run_fn=Replay("run"),
            preflight_fn=probes({}),
        )


def test_default_forks_check_scales_with_the_controller_runs_stay_at_16() -> None:
    assert session.default_forks("run", 1000, cpus=16) == 16
    assert session.default_forks("validate", 1000, cpus=16) == 16
    assert session.default_forks("check", 1000, cpus=16) == 64  # P7: 1,000 nodes from 16 cores
    assert session.default_forks("check", 1000, cpus=2) == 16
    assert session.default_forks("check", 3, cpus=16) == 3
    assert session.default_forks("check", 0, cpus=16) == 1


def test_a_host_lost_mid_run_gets_its_lock_released(
    tmp_path: Path, demo_content: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host lost mid-run (SSH cut, a reboot) never ran site.yml's release (Ansible drops it
    from the play), so the next run was refused by its lock for gpu_stack_lock_stale_s: the CLI
    runs unlock.yml on the lost hosts, with this run's id."""
    from provisioner import runner  # noqa: PLC0415

    replay = Replay("run")
    calls: list[RunRequest] = []

    def run_playbook(req: RunRequest, on_event: Any) -> RunResult:
        calls.append(req)
        if req.playbook == "unlock.yml":
            return RunResult(status="successful", rc=0, artifacts=tmp_path, stats={})
        return replay(req, on_event)

    monkeypatch.setattr(runner, "run_playbook", run_playbook)
    monkeypatch.setattr(runner, "find_ansible_playbook", lambda: "ansible-playbook")
    session.execute(settings("run", tmp_path), state=StateDir(tmp_path / "st"),
                    preflight_fn=probes({}))
    assert [r.playbook for r in calls] == ["site.yml", "unlock.yml"]
    run_id = calls[0].extravars["gpu_stack_run_id"]
    assert calls[1].limit == "h-unreachable"
    assert calls[1].extravars == {"gpu_stack_run_id": run_id}

    # no host lost: no unlock run
    calls.clear()
    replay.rec["events"] = [e for e in replay.rec["events"]
                            if (e.get("event_data") or {}).get("host") != "h-unreachable"]
    replay.rec["stats"] = {k: {h: n for h, n in v.items() if h != "h-unreachable"}
                           for k, v in replay.rec["stats"].items() if isinstance(v, dict)}
    session.execute(settings("run", tmp_path), state=StateDir(tmp_path / "st"),
                    preflight_fn=probes({"h-unreachable": "connect"}))
    assert [r.playbook for r in calls] == ["site.yml"]


class Probed:
    """A preflight_fn that records which hosts it was asked to probe (hosts in `bad` fail)."""

    def __init__(self, bad: dict[str, str]) -> None:
        self.inner = probes(bad)
        self.calls: list[list[str]] = []

    def __call__(self, targets: list, opts: Any) -> list[SshProbeResult]:
        self.calls.append([t.name for t in targets])
        return self.inner(targets, opts)


def test_check_probes_only_the_hosts_ansible_could_not_judge_and_the_preflight_verdict_wins(
    tmp_path: Path, demo_content: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`provision check` runs ansible-playbook at once on every host; the SSH preflight then
    diagnoses only the host Ansible could not reach (h-unreachable): it rejects it, so that host
    keeps the preflight's entry (ssh.connect), not Ansible's, as when the preflight ran first. The
    hosts Ansible judged (h-fail and h-taskfail too: their probe reported) are not probed again."""
    replay = Replay("check")
    probed = Probed({"h-unreachable": "connect"})
    code = session.execute(settings("check", tmp_path), state=StateDir(tmp_path / "st"),
                           run_fn=replay, preflight_fn=probed)
    assert probed.calls == [["h-unreachable"]]
    (req,) = replay.requests
    assert req.limit is None  # every host runs: the check changes nothing
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    entry = report["hosts"]["h-unreachable"]
    assert entry["status"] == "unreachable"
    assert [c["id"] for c in entry["checks"]] == ["ssh.connect"]
    assert entry["preflight"]["stage"] == "connect"
    assert report["hosts"]["h-drift"]["status"] == "drift"
    assert [h for h, e in report["hosts"].items() if "preflight" in e] == ["h-unreachable"]
    assert code == report["exit_code"] != 0
    err = capsys.readouterr().err
    assert "preflight h-unreachable: UNREACHABLE at connect: nope" in err
    assert "preflight h-ok" not in err


def test_a_host_the_diagnosis_reaches_keeps_ansibles_result(
    tmp_path: Path, demo_content: Path
) -> None:
    """Ansible lost the host, the preflight reaches it (a transient failure): Ansible's
    unreachable result stands, with the preflight's probe beside it."""
    probed = Probed({})
    session.execute(settings("check", tmp_path), state=StateDir(tmp_path / "st"),
                    run_fn=Replay("check"), preflight_fn=probed)
    assert probed.calls == [["h-unreachable"]]
    entry = json.loads((tmp_path / "rep" / "report.json").read_text())["hosts"]["h-unreachable"]
    assert entry["status"] == "unreachable"
    assert entry["preflight"]["status"] == "ok"
    assert not [c for c in entry["checks"] if c["id"].startswith("ssh.")]


def test_the_diagnosis_starts_when_ansible_reports_the_host_unreachable(
    tmp_path: Path, demo_content: Path
) -> None:
    """The unreachable host's probe runs beside the rest of the playbook, not after it: here the
    run does not end before the preflight has been asked for that host."""
    import threading  # noqa: PLC0415

    asked = threading.Event()
    inner = Probed({"h-unreachable": "auth"})

    def preflight(targets: list, opts: Any) -> list[SshProbeResult]:
        asked.set()
        return inner(targets, opts)

    replay = Replay("check")
    order: list[str] = []

    def run(req: RunRequest, on_event: Any) -> RunResult:
        result = replay(req, on_event)
        assert asked.wait(10), "the unreachable host was not probed while the run went on"
        order.append("run ended")
        return result

    session.execute(settings("check", tmp_path), state=StateDir(tmp_path / "st"), run_fn=run,
                    preflight_fn=preflight)
    assert order == ["run ended"] and inner.calls == [["h-unreachable"]]
    entry = json.loads((tmp_path / "rep" / "report.json").read_text())["hosts"]["h-unreachable"]
    assert [c["id"] for c in entry["checks"]] == ["ssh.auth"]


def test_a_check_where_every_host_answers_opens_no_preflight(
    tmp_path: Path, demo_content: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = Replay("check")
    replay.rec["events"] = [e for e in replay.rec["events"]
                            if (e.get("event_data") or {}).get("host") != "h-unreachable"]
    replay.rec["stats"] = {k: {h: n for h, n in v.items() if h != "h-unreachable"}
                           for k, v in replay.rec["stats"].items() if isinstance(v, dict)}
    probed = Probed({})
    hosts = tuple(h for h in HOSTS if h != "h-unreachable")
    s = session.Settings(command="check", hosts=hosts, report_dir=tmp_path / "rep")
    session.execute(s, state=StateDir(tmp_path / "st"), run_fn=replay, preflight_fn=probed)
    assert probed.calls == []
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert sorted(report["hosts"]) == sorted(hosts)
    assert not [h for h, e in report["hosts"].items() if "preflight" in e]
    assert "preflight " not in capsys.readouterr().err


def test_hosts_a_dead_run_never_reported_are_diagnosed_but_not_after_a_cancel(
    tmp_path: Path, demo_content: Path
) -> None:
    """ansible-playbook died before any host: every host is probed (is it the network or the
    controller?); a cancelled run probes none (its hosts are interrupted)."""
    def dead(status: str) -> Any:
        def run(req: RunRequest, on_event: Any) -> RunResult:
            return RunResult(status=status, rc=1 if status == "failed" else 130,
                             artifacts=req.artifact_dir / req.ident, stats={})
        return run

    probed = Probed({"h-ok": "resolve"})
    s = session.Settings(command="check", hosts=("h-ok", "h-drift"), report_dir=tmp_path / "rep")
    session.execute(s, state=StateDir(tmp_path / "st"), run_fn=dead("failed"), preflight_fn=probed)
    assert probed.calls == [["h-ok", "h-drift"]]
    hosts = json.loads((tmp_path / "rep" / "report.json").read_text())["hosts"]
    assert hosts["h-ok"]["checks"][0]["id"] == "ssh.resolve"
    assert hosts["h-drift"]["status"] == "failed"
    assert hosts["h-drift"]["preflight"]["status"] == "ok"

    probed.calls.clear()
    session.execute(s, state=StateDir(tmp_path / "st2"), run_fn=dead("canceled"),
                    preflight_fn=probed)
    assert probed.calls == []
    hosts = json.loads((tmp_path / "rep" / "report.json").read_text())["hosts"]
    assert {h: e["status"] for h, e in hosts.items()} == {"h-ok": "interrupted",
                                                          "h-drift": "interrupted"}


@pytest.mark.parametrize("overrides", [
    {"command": "run"}, {"command": "check", "no_preflight": True},
    {"command": "check", "ask_become_pass": True},
    {"command": "check", "accept_new_host_keys": True},
])
def test_runs_that_change_hosts_or_send_a_password_probe_every_host_first(
    overrides: dict[str, Any]
) -> None:
    assert session.diagnoses(session.Settings(command="check", hosts=("h",))) is True
    assert session.diagnoses(session.Settings(hosts=("h",), **overrides)) is False


def test_a_run_that_dies_before_any_host_says_why(
    tmp_path: Path, demo_content: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: ansible-playbook failing before its first task (here: it could not import ansible,
    seen on a GPU machine with an install made by `pip install --target`) gave every host only
    "the run ended failed (rc 1) before this host ran"; its last line now says why."""
    from provisioner import runner  # noqa: PLC0415

    said = ["Traceback (most recent call last):",
            '  File "/tmp/site/bin/ansible-playbook", line 5, in <module>',
            "    from ansible.cli.playbook import main",
            "ModuleNotFoundError: No module named 'ansible'"]

    def run_playbook(req: RunRequest, on_event: Any) -> RunResult:
        for n, line in enumerate(said, 1):
            on_event({"event": "verbose", "counter": n, "stdout": line, "event_data": {}})
        return RunResult(status="failed", rc=1, artifacts=tmp_path, stats={})

    monkeypatch.setattr(runner, "run_playbook", run_playbook)
    monkeypatch.setattr(runner, "find_ansible_playbook", lambda: "ansible-playbook")
    st = StateDir(tmp_path / "st")
    assert session.execute(settings("check", tmp_path), state=st, preflight_fn=probes({})) == 1
    entry = st.load_raw("latest")["hosts"]["h-ok"]
    assert entry["status"] == "failed"
    assert entry["message"] == (
        "the run ended failed (rc 1) before this host ran: ansible-playbook said: "
        "ModuleNotFoundError: No module named 'ansible'"
    )
