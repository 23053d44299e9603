"""Per-host state and exit codes from RECORDED runner events (fixtures/record_events.py)."""

from __future__ import annotations

import pytest
from conftest import recorded

from provisioner.events import RunState, normalize_check
from provisioner.exitcodes import ExitCode, exit_code_for


def replay(name: str, *, check_mode: bool) -> RunState:
    rec = recorded(name)
    state = RunState(check_mode=check_mode)
    outcomes = [state.feed(e) for e in rec["events"]]
    assert any(o is not None for o in outcomes)
    state.apply_stats(rec["stats"])
    assert state.stats_seen
    return state


def statuses(state: RunState, *, check_mode: bool) -> dict[str, str]:
    return {h: s.status(check_mode=check_mode) for h, s in state.hosts.items()}


def test_recorded_normal_run_host_statuses_and_exit_code() -> None:
    st = replay("run", check_mode=False)
    got = statuses(st, check_mode=False)
    assert got == {
        "h-ok": "ok",
        "h-changed": "changed",
        "h-drift": "drift",
        "h-fail": "failed",
        "h-taskfail": "failed",
        "h-unreachable": "unreachable",
    }
    rec = recorded("run")
    assert exit_code_for(got, run_status=rec["status"], rc=rec["rc"]) == ExitCode.FAILED
    # without the failed hosts, the unreachable one decides
    rest = {h: s for h, s in got.items() if s != "failed"}
    assert exit_code_for(rest, run_status="failed", rc=4) == ExitCode.UNREACHABLE


def test_recorded_counts_match_ansible_stats() -> None:
    rec = recorded("run")
    st = replay("run", check_mode=False)
    for host, h in st.hosts.items():
        assert h.changed == rec["stats"]["changed"].get(host, 0), host
        assert h.failed == rec["stats"]["failures"].get(host, 0), host
        assert h.skipped == rec["stats"]["skipped"].get(host, 0), host
        assert h.ok + h.changed == rec["stats"]["ok"].get(host, 0), host


def test_checks_facts_and_validation_are_collected() -> None:
    st = replay("run", check_mode=False)
    ok = st.hosts["h-ok"]
    ids = [c["id"] for c in ok.checks]
    assert ids == ["demo.version", "demo.skipped"]
    version = ok.checks[0]
    assert version["status"] == "pass"
    assert version["expected"] == "1.0"
    assert set(version) >= {"id", "status", "expected", "actual", "message", "remediation"}
    assert ok.facts["driver_version"] == "535.129.03"
    assert ok.facts["gpu_count"] == 2
    assert ok.validation is None
    assert st.hosts["h-changed"].validation == {"allreduce_busbw_gbps": 123.4, "passed": True}
    drift = st.hosts["h-drift"].checks[0]
    assert (drift["status"], drift["actual"]) == ("drift", "0.9")


def test_failed_task_becomes_a_role_task_check() -> None:
    st = replay("run", check_mode=False)
    synth = [c for c in st.hosts["h-taskfail"].checks if c["id"] == "demo_role.task"]
    assert len(synth) == 1
    assert synth[0]["status"] == "fail"
    assert "non-zero return code" in synth[0]["message"]
    assert "Fail a task that is not a check" in synth[0]["actual"]


def test_a_failed_loop_item_names_its_error_not_one_or_more_items_failed() -> None:
    """A failed apt loop (the mirror down) named only "One or more items failed"; the report must
    carry the item's error, with the URL apt could not fetch."""
    from provisioner.events import _failure_message  # noqa: PLC0415

    url = "http://mirror.example/compute/cuda/repos/ubuntu2204/x86_64/./nvidia-dkms-535.deb"
    res = {
        "msg": "One or more items failed",
        "changed": False,
        "results": [
            {"item": ["dkms"], "failed": False, "msg": ""},
            {"item": ["cuda-drivers-535"], "failed": True,
             "msg": f"'/usr/bin/apt-get install cuda-drivers-535' failed: E: Failed to fetch {url}"
                    "  503  Service Unavailable"},
        ],
    }
    msg = _failure_message(res)
    assert url in msg and "One or more items failed" not in msg
    # an unreachable loop (the SSH connection cut during the driver transaction) said "All items
    # completed"
    lost = 'Task failed: Data could not be sent to remote host "10.0.0.1".'
    assert _failure_message({"unreachable": True, "msg": "All items completed", "results": [
        {"unreachable": True, "msg": lost, "item": ["cuda-drivers-535"]}]}) == lost
    # no failed item recorded: Ansible's own message stays
    assert _failure_message({"msg": "One or more items failed", "results": [{}]}) == (
        "One or more items failed")


def test_assert_after_a_failed_check_adds_no_task_check() -> None:
    st = replay("run", check_mode=False)
    ids = [c["id"] for c in st.hosts["h-fail"].checks]
    assert "demo_role.task" not in ids
    assert st.hosts["h-fail"].failed == 1


def test_unreachable_host_from_events() -> None:
    st = replay("run", check_mode=False)
    h = st.hosts["h-unreachable"]
    assert h.unreachable
    assert "refused" in h.unreachable_msg.lower() or "port 1" in h.unreachable_msg


def test_recorded_check_run_drift_and_pending_changes() -> None:
    st = replay("check", check_mode=True)
    got = statuses(st, check_mode=True)
    assert got["h-ok"] == "ok"
    assert got["h-drift"] == "drift"
    assert got["h-changed"] == "drift"  # a task that would change the host is drift
    pending = [c for c in st.hosts["h-changed"].checks if c["id"] == "demo_role.pending"]
    assert pending and pending[0]["status"] == "drift"
    assert got["h-fail"] == "failed"
    assert got["h-taskfail"] == "ok"  # the failing command is skipped in check mode
    no_fail = {h: s for h, s in got.items() if s not in ("failed", "unreachable")}
    assert exit_code_for(no_fail, drift_is_error=True) == ExitCode.DRIFT
    assert exit_code_for(no_fail) == ExitCode.OK  # drift is only an error for `check`
    assert exit_code_for({"h-ok": "ok"}, drift_is_error=True) == ExitCode.OK


@pytest.mark.parametrize(
    ("statuses_", "kw", "code"),
    [
        ({"a": "ok", "b": "changed"}, {}, 0),
        ({"a": "ok", "b": "failed", "c": "unreachable"}, {}, 1),
        ({"a": "ok", "c": "unreachable"}, {}, 3),
        ({"a": "drift", "c": "unreachable"}, {"drift_is_error": True}, 3),
        ({"a": "drift"}, {"drift_is_error": True}, 5),
        ({"a": "failed", "b": "drift"}, {"drift_is_error": True}, 1),
        ({"a": "failed"}, {"run_status": "canceled"}, 130),
        ({}, {"run_status": "failed", "rc": 4}, 1),
        ({"a": "ok"}, {"run_status": "timeout", "rc": 254}, 1),
    ],
)
def test_exit_code_precedence(statuses_: dict, kw: dict, code: int) -> None:
    assert exit_code_for(statuses_, **kw) == code


def test_normalize_check_rejects_junk_and_unknown_status() -> None:
    assert normalize_check("x", "r") is None
    assert normalize_check({"status": "pass"}, "r") is None
    c = normalize_check({"id": "a.b", "status": "weird"}, "r")
    assert c is not None
    assert c["status"] == "fail"
    assert c["expected"] is None
    assert c["remediation"] == ""


def test_last_published_check_list_wins() -> None:
    st = RunState()
    for status in ("drift", "pass"):
        st.feed(
            {
                "event": "runner_on_ok",
                "event_data": {
                    "host": "h",
                    "role": "r",
                    "task": "t",
                    "res": {
                        "changed": False,
                        "ansible_facts": {"r_checks": [{"id": "r.x", "status": status}]},
                    },
                },
            }
        )
    assert [c["status"] for c in st.hosts["h"].checks] == ["pass"]
    assert st.hosts["h"].status() == "ok"


def _probe_event(
    event: str, host: str, checks: list[dict[str, object]], report: dict[str, object] | None = None
) -> dict[str, object]:
    res: dict[str, object] = {
        "ansible_facts": {"provision_checks": checks, "provision_report": report or {}}
    }
    if event == "runner_on_failed":
        res["msg"] = "; ".join(f"{c['id']}: {c['message']}" for c in checks)
    return {
        "event": event,
        "event_data": {
            "host": host,
            "role": "nvidia_driver",
            "task": "Verify the driver",
            "task_action": "provision.gpu.host_assess",
            "res": res,
        },
    }


def _check(cid: str, status: str) -> dict[str, object]:
    return {
        "id": cid,
        "status": status,
        "expected": "e",
        "actual": "a",
        "message": f"m {cid}",
        "remediation": "",
    }


def test_probe_partial_lists_merge_by_id_and_a_failed_probe_keeps_its_checks() -> None:
    """One probe per component publishes provision_checks; later records of an id win; a probe
    that fails the host (require) still delivers its checks, and no extra <role>.task check."""
    st = RunState(check_mode=False)
    st.feed(
        _probe_event("runner_on_ok", "h", [_check("preflight.os", "pass")], {"os": "Ubuntu 22.04"})
    )
    st.feed(
        _probe_event(
            "runner_on_ok", "h", [_check("driver.version", "fail"), _check("driver.hold", "fail")]
        )
    )
    st.feed(
        _probe_event(
            "runner_on_failed",
            "h",
            [_check("driver.version", "pass"), _check("driver.hold", "fail")],
        )
    )
    h = st.hosts["h"]
    got = {c["id"]: (c["status"], c["role"]) for c in h.checks}
    assert got == {
        "preflight.os": ("pass", "preflight"),
        "driver.version": ("pass", "nvidia_driver"),
        "driver.hold": ("fail", "nvidia_driver"),
    }
    assert h.facts["os"] == "Ubuntu 22.04"
    assert h.failed == 1


def test_a_refused_host_lock_is_its_preflight_lock_check_alone() -> None:
    """The host lock refusing a second run carries its own check (preflight.lock); a `play.task`
    check with the same message was added beside it."""
    st = RunState()
    msg = "another provisioning run holds this host: run r1 from root@ctl (pid 42): nothing changed"
    st.feed({"event": "runner_on_failed", "event_data": {
        "host": "h", "role": "", "task": "Take the host's provisioning lock",
        "task_action": "provision.gpu.host_lock",
        "res": {"failed": True, "msg": msg, "ansible_facts": {"provision_checks": [
            {"id": "preflight.lock", "status": "fail", "message": msg}]}}}})
    assert [(c["id"], c["status"]) for c in st.hosts["h"].checks] == [("preflight.lock", "fail")]
    assert st.hosts["h"].status() == "failed"


def test_dpkg_errors_from_apt_stdout_lead_the_message() -> None:
    """A host out of disk during the install: dpkg's "No space left on device" reaches only the
    task's stdout (apt runs dpkg on a pty); the report said "dpkg returned an error code (1)"."""
    from provisioner.events import _failure_message  # noqa: PLC0415

    stdout = (
        "Unpacking cuda-nvcc-12-1 (12.1.105-1) ...\n"
        "dpkg: error processing archive /tmp/apt-dpkg-install-W/05-cuda-cudart-12-1.deb "
        "(--unpack):\n cannot copy extracted data for './usr/local/cuda-12.1/lib/x.so' to "
        "'/usr/local/cuda-12.1/lib/x.so.dpkg-new': failed to write (No space left on device)\n"
        "Selecting previously unselected package cuda-documentation-12-1.\n"
        "Errors were encountered while processing:\n /tmp/apt-dpkg-install-W/05-cuda.deb\n"
    )
    err = "E: Sub-process /usr/bin/dpkg returned an error code (1)\n"
    res = {"rc": 100, "msg": f"'/usr/bin/apt-get install cuda-toolkit-12-1' failed: {err}",
           "stderr": err, "stdout": stdout}
    msg = _failure_message(res)
    assert msg.startswith("dpkg: error processing archive /tmp/apt-dpkg-install-W/05-cuda-cudart")
    assert "failed to write (No space left on device)" in msg
    assert "Selecting previously" not in msg and "apt-get install cuda-toolkit-12-1" in msg
    # the same inside a loop item (the driver's transactions)
    loop = {"msg": "One or more items failed", "results": [dict(res, failed=True)]}
    assert "No space left on device" in _failure_message(loop)


def test_output_before_any_host_result_is_kept_for_the_reason() -> None:
    state = RunState()
    state.feed({"event": "verbose", "stdout": "ERROR! the playbook: x.yml could not be found\n\n"})
    assert state.early_error() == "ERROR! the playbook: x.yml could not be found"
    for n in range(10):
        state.feed({"event": "verbose", "stdout": f"line {n}"})
    assert len(state.early_output) == 5 and state.early_error() == "line 9"
    # once a host reported, later output is not the reason a host never ran
    state.feed({"event": "runner_on_ok", "event_data": {"host": "h", "task": "t", "res": {}}})
    state.feed({"event": "verbose", "stdout": "PLAY RECAP"})
    assert state.early_error() == "line 9"
    assert RunState().early_error() == ""
