"""runner.py pure parts, plus one real ansible-runner run of the tiny demo playbook."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CONTENT

from provisioner import runner
from provisioner.exitcodes import SetupError, UsageProblem


def req(tmp_path: Path, **kw: object) -> runner.RunRequest:
    base: dict[str, object] = {
        "project_dir": CONTENT / "playbooks",
        "playbook": "site.yml",
        "roles_path": CONTENT / "roles",
        "inventory": CONTENT / "inventory.yml",
        "artifact_dir": tmp_path / "runs",
        "ident": "t1",
    }
    base.update(kw)
    return runner.RunRequest(**base)  # type: ignore[arg-type]


def test_env_is_filtered_to_what_ansible_needs() -> None:
    env = {
        "PATH": "/bin",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "s",
        "ANSIBLE_FORKS": "3",
        "LC_ALL": "C",
        "GITHUB_TOKEN": "t",
        "SSH_AUTH_SOCK": "/a",
        "AWX_ISOLATED_DATA_DIR": "/d",
        "RUNNER_OMIT_EVENTS": "False",
        "PYTHONPATH": "/evil",
    }
    kept = runner.filter_env(env)
    assert set(kept) == {
        "PATH",
        "HOME",
        "ANSIBLE_FORKS",
        "LC_ALL",
        "SSH_AUTH_SOCK",
        "AWX_ISOLATED_DATA_DIR",
        "RUNNER_OMIT_EVENTS",
    }


def test_pythonpath_passes_only_the_entry_ansible_is_imported_from(tmp_path: Path) -> None:
    """An install made with `pip install --target DIR` runs with PYTHONPATH=DIR: ansible-playbook
    (a script of that install) needs DIR to import ansible; nothing else of PYTHONPATH passes."""
    import ansible  # noqa: PLC0415

    home = str(Path(ansible.__file__).resolve().parent.parent)
    kept = runner.filter_env({"PATH": "/bin", "PYTHONPATH": f"/evil:{home}:{tmp_path}"})
    assert kept["PYTHONPATH"] == home
    assert "PYTHONPATH" not in runner.filter_env({"PYTHONPATH": f"/evil:{tmp_path}"})
    assert runner.ansible_pythonpath("") is None


def test_build_env_defaults(tmp_path: Path) -> None:
    env = runner.build_env(req(tmp_path))
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "ANSIBLE_SSH_COMMON_ARGS" not in env
    env = runner.build_env(req(tmp_path, known_hosts=Path("/k/known"), host_key_checking=False))
    assert env["ANSIBLE_SSH_COMMON_ARGS"] == "-o UserKnownHostsFile=/k/known"
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "False"


def test_exec_path_puts_the_interpreter_dir_first_once() -> None:
    bindir = str(Path(sys.executable).parent)
    assert runner.exec_path(f"/usr/bin:{bindir}:/bin") == f"{bindir}:/usr/bin:/bin"
    assert runner.exec_path("") == bindir


def test_cmdline() -> None:
    r = runner.RunRequest(
        project_dir=Path("/p"),
        playbook="x",
        roles_path=Path("/r"),
        inventory=Path("/i"),
        artifact_dir=Path("/a"),
        ident="i",
        check=True,
        diff=True,
        become=True,
        become_password="pw",
        user="ops",
        private_key="/k",
    )
    assert runner.build_cmdline(r) == [
        "--check",
        "--diff",
        "--become",
        "--ask-become-pass",
        "--user",
        "ops",
        "--private-key",
        "/k",
    ]
    assert "pw" not in " ".join(runner.build_cmdline(r))


def test_missing_inventory_and_playbook_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match="does not exist"):
        runner.run_playbook(req(tmp_path, inventory=tmp_path / "nope.yml"), lambda e: None)
    with pytest.raises(UsageProblem):
        runner.run_playbook(req(tmp_path, inventory=Path("relative.yml")), lambda e: None)
    with pytest.raises(SetupError, match="playbook not found"):
        runner.run_playbook(req(tmp_path, playbook="nope.yml"), lambda e: None)


def test_missing_ansible_playbook_is_a_setup_error(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="ansible-playbook not found"):
        runner.find_ansible_playbook(path=str(tmp_path))


def test_real_run_of_the_demo_playbook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAK_ME_NOT", "secret-value")
    events: list[dict] = []
    r = runner.run_playbook(
        req(tmp_path, limit="h-ok,h-changed", extravars={"demo_change": False}, become=None),
        events.append,
    )
    assert r.status == "successful"
    assert r.rc == 0
    assert r.stats["ok"]["h-ok"] >= 4
    # extra vars beat host vars: demo_change false
    assert not any(r.stats.get("changed", {}).values())
    assert not any(r.stats.get("failures", {}).values())
    assert events[-1]["event"] == "playbook_on_stats"
    assert (r.artifacts / "job_events").is_dir()
    assert len(list((r.artifacts / "job_events").glob("*.json"))) == len(events)
    # no env/ files with secrets were written
    assert not (r.artifacts / "env").exists()


def test_the_recorded_command_reruns_with_the_kept_masked_extravars(tmp_path: Path) -> None:
    """The private data dir is gone after the run: the recorded command points at a copy of the
    extra variables in the artifacts, 0600, secrets masked, and reruns as is."""
    r = runner.run_playbook(
        req(
            tmp_path,
            limit="h-ok,h-changed",
            extravars={"demo_change": False, "vault_password": "hunter2"},
            become=None,
        ),
        lambda _e: None,
    )
    kept = r.artifacts / "extravars"
    assert kept.stat().st_mode & 0o777 == 0o600
    data = json.loads(kept.read_text(encoding="utf-8"))
    assert data["demo_change"] is False and data["vault_password"] != "hunter2"
    recorded = json.loads((r.artifacts / "command").read_text(encoding="utf-8"))
    assert f"@{kept}" in recorded["command"] and f"@{kept}" in r.command
    assert not any("provision-pdd-" in c for c in recorded["command"])
    rerun = subprocess.run(
        recorded["command"],
        cwd=recorded["cwd"],
        env=recorded["env"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    assert "changed=0" in rerun.stdout


def test_ansible_playbook_sees_only_the_filtered_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEAK_ME_NOT", "secret-value")
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")  # ours wins
    events: list[dict] = []
    r = runner.run_playbook(
        req(tmp_path, playbook="env.yml", limit="h-ok", become=None), events.append
    )
    assert r.status == "successful"
    (seen,) = [
        e["event_data"]["res"]["ansible_facts"]["seen_env"]
        for e in events
        if e["event"] == "runner_on_ok"
    ]
    assert seen["leak"] == ""
    assert seen["host_key_checking"] == "True"
    assert seen["path"].split(":")[0] == str(Path(sys.executable).parent)


def test_cli_runs_without_an_activated_venv(tmp_path: Path) -> None:
    """The console script finds ansible-playbook although PATH lacks the venv's bin dir."""
    exe = Path(sys.executable).parent / "provision"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PROVISION_STATE_DIR": str(tmp_path / "s"),
        "PROVISION_CONTENT_DIR": str(CONTENT),
        "LANG": "C.UTF-8",
    }
    p = subprocess.run(
        [
            str(exe),
            "-i",
            str(CONTENT / "inventory.yml"),
            "--limit",
            "h-ok,h-changed",
            "--report-dir",
            str(tmp_path / "rep"),
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["exit_code"] == 0
    assert report["hosts"]["h-ok"]["status"] == "ok"
    assert report["hosts"]["h-changed"]["status"] == "changed"
    assert report["hosts"]["h-changed"]["validation"] == {
        "allreduce_busbw_gbps": 123.4,
        "passed": True,
    }
    assert "h-ok | ok | demo_role : Publish the demo checks" in p.stderr  # plain lines off a TTY
    for name in ("report.json", "junit.xml", "provision.prom"):
        assert (tmp_path / "rep" / name).is_file()
    hist = list((tmp_path / "s" / "history").glob("*.json"))
    assert len(hist) == 1
    assert hist[0].stat().st_mode & 0o077 == 0


def test_an_event_is_kept_as_ansible_runner_keeps_it(tmp_path: Path) -> None:
    """job_events/<counter>-<uuid>.json, 0600, the event's JSON as ansible-runner's json.dump
    writes it (what history, the bench and a reader of the artifacts read), no temporary file."""
    event = {"event": "runner_on_ok", "counter": 7, "uuid": "u-1", "event_data": {"x": "é"}}
    path = runner.keep_event(tmp_path, event)
    assert path == tmp_path / "7-u-1.json"
    assert path.read_text(encoding="utf-8") == json.dumps(event)
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["7-u-1.json"]
    # not writable here (no counter, or no directory): None, and ansible-runner writes it
    assert runner.keep_event(tmp_path, {"event": "verbose", "uuid": "u-2"}) is None
    assert runner.keep_event(tmp_path / "gone", {**event, "counter": 8}) is None


def test_the_scrub_after_the_run_leaves_the_kept_events_and_masks_the_rest(tmp_path: Path) -> None:
    from provisioner.redact import MASK, Scrubber  # noqa: PLC0415

    kept, other = tmp_path / "job_events" / "1-a.json", tmp_path / "stdout"
    kept.parent.mkdir()
    kept.write_text('{"x": "hunter22"}', encoding="utf-8")  # stands for an already scrubbed one
    other.write_text("pass hunter22", encoding="utf-8")
    Scrubber({"hunter22"}).tree(tmp_path, skip={kept})
    assert kept.read_text(encoding="utf-8") == '{"x": "hunter22"}'
    assert other.read_text(encoding="utf-8") == f"pass {MASK}"


def test_closing_the_pty_of_an_ended_child_does_not_wait(tmp_path: Path) -> None:
    """ptyprocess sleeps delayafterclose (0.1 s) in close() before it checks the child: skipped
    for a child that has ended (ansible-runner closes the pty after ansible-playbook ended); a
    live child is closed, and killed, as before; the original close is back afterwards."""
    from ptyprocess import PtyProcess  # noqa: PLC0415

    original = PtyProcess.close
    ended = PtyProcess.spawn(["true"])
    ended.wait()
    live = PtyProcess.spawn(["sleep", "60"])
    with runner._prompt_close():
        assert PtyProcess.close is not original
        ended.close()
        live.close(force=True)
    assert PtyProcess.close is original
    assert ended.closed and ended.delayafterclose == 0
    assert live.closed and live.delayafterclose == 0.1 and not live.isalive()
