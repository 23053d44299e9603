"""Progress rendering (live table and plain lines), the summary table, and Ctrl-C -> 130."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import CONTENT, cli_env, recorded

from provisioner.events import RunState
from provisioner.progress import Progress, summary_table
from provisioner.report_model import Report

EXE = Path(sys.executable).parent / "provision"


def test_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    p = Progress(RunState(), stream=out, live=False)
    with p:
        for e in recorded("run")["events"]:
            p.on_event(e)
    lines = out.getvalue().splitlines()
    assert "h-ok | ok | demo_role : Publish the demo checks" in lines
    assert "h-changed | changed | demo_role : Change something (or not)" in lines
    assert any(x.startswith("h-taskfail | FAILED | demo_role : Fail a task") for x in lines)
    assert any(x.startswith("h-unreachable | UNREACHABLE |") for x in lines)
    assert not any("| skipped |" in x for x in lines)  # only with -v
    verbose = io.StringIO()
    pv = Progress(RunState(), stream=verbose, live=False, verbosity=1)
    for e in recorded("run")["events"]:
        pv.on_event(e)
    assert "| skipped |" in verbose.getvalue()


def test_verbosity_on_a_terminal_and_vv_echoes_ansible() -> None:
    """-v prints task lines above the live table; -vv prints Ansible's output for every event."""
    live = io.StringIO()
    with Progress(RunState(), stream=live, live=True, verbosity=1) as p:
        for e in recorded("run")["events"]:
            p.on_event(e)
    assert "h-ok | ok | demo_role : Publish the demo checks" in live.getvalue()
    assert "| skipped |" in live.getvalue()
    raw = io.StringIO()
    pv = Progress(RunState(), stream=raw, live=False, verbosity=2)
    events = recorded("run")["events"]
    for e in events:
        pv.on_event(e)
    text = raw.getvalue()
    assert "TASK [demo_role : Publish the demo checks]" in text
    assert "h-ok | ok |" not in text  # Ansible's lines instead of ours
    some = [str(e["stdout"]).strip() for e in events if str(e.get("stdout") or "").strip()]
    assert some and all(x in text for x in some[:20])


def test_live_table_on_a_terminal() -> None:
    out = io.StringIO()
    state = RunState()
    with Progress(state, stream=out, live=True) as p:
        for e in recorded("run")["events"]:
            p.on_event(e)
    text = out.getvalue()
    for host in ("h-ok", "h-changed", "h-fail", "h-unreachable"):
        assert host in text
    assert "unreachable" in text
    assert "FAILED" in text  # failures are printed above the table as they happen
    assert state.hosts["h-changed"].changed == 1


def test_summary_table() -> None:
    out = io.StringIO()
    report = Report.from_dict({
        "command": "check",
        "run_id": "r1",
        "duration_s": 1.5,
        "exit_code": 5,
        "hosts": {
            "g1": {
                "status": "ok",
                "counts": {"ok": 3, "changed": 0, "failed": 0},
                "checks": [{"id": "a", "status": "pass"}],
                "facts": {"driver_version": "535.1"},
            },
            "g2": {
                "status": "drift",
                "counts": {},
                "facts": {},
                "checks": [
                    {
                        "id": "driver.hold",
                        "status": "drift",
                        "expected": "held",
                        "actual": "not held",
                        "message": "hold removed",
                        "remediation": "apt-mark hold nvidia-driver-535",
                    }
                ],
            },
        },
    })
    summary_table(report, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == [
        "host",
        "status",
        "ok",
        "changed",
        "failed",
        "checks",
        "driver",
        "problems",
    ]
    assert lines[1].split() == ["g1", "ok", "3", "0", "0", "1/1", "535.1"]
    assert "driver.hold=drift" in lines[2]
    assert lines[3] == "g2: driver.hold DRIFT: expected 'held', actual 'not held'; hold removed"
    assert lines[4] == "    fix: apt-mark hold nvidia-driver-535"
    assert "2 host(s): 1 ok, 0 changed, 1 drift, 0 failed, 0 unreachable" in lines[5]
    assert lines[5].endswith("exit 5")


def test_ctrl_c_stops_the_run_with_130(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    proc = subprocess.Popen(
        [
            str(EXE),
            "-i",
            str(CONTENT / "inventory.yml"),
            "--limit",
            "h-ok",
            "-e",
            "demo_sleep=120",
            "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until Ansible is past the task before the sleep
        if "Publish a validation result" in line or "Publish the demo report" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    report = json.loads(out)
    assert report["run_status"] == "canceled"
    assert report["exit_code"] == 130
    assert report["hosts"]["h-ok"]["status"] == "interrupted"  # never "ok" (issue 14 item 2)


def test_sigterm_outside_the_ansible_phase_is_130(
    tmp_path: Path, silent_port: tuple[int, list]
) -> None:
    """SIGTERM (a scheduler or systemd stopping the job) during the preflight ends like Ctrl-C."""
    port, held = silent_port
    proc = subprocess.Popen(
        [str(EXE), "check", "--host", f"127.0.0.1:{port}"],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 20
    while not held and time.monotonic() < deadline:  # the probe has connected
        time.sleep(0.05)
    assert held, "the preflight never connected"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
