"""State directory, history rotation and lookup, and run-to-run diffs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from provisioner import state as st
from provisioner.exitcodes import UsageProblem
from provisioner.history import diff_reports, format_diff
from provisioner.report_model import Report


def rep(run_id: str, command: str, hosts: dict) -> Report:
    return Report.from_dict({"run_id": run_id, "command": command, "hosts": hosts})


def host(status: str, checks: list[tuple[str, str]], **facts: object) -> dict:
    return {
        "status": status,
        "facts": facts,
        "checks": [{"id": i, "status": s, "expected": "e", "actual": "a"} for i, s in checks],
    }


def test_state_dir_selection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PROVISION_STATE_DIR", str(tmp_path / "x"))
    assert st.state_dir() == tmp_path / "x"
    monkeypatch.delenv("PROVISION_STATE_DIR")
    monkeypatch.setattr(st.os, "geteuid", lambda: 0)
    assert st.state_dir() == Path("/var/lib/provision")
    monkeypatch.setattr(st.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert st.state_dir() == tmp_path / "xdg" / "provision"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert st.state_dir() == tmp_path / "home" / ".local" / "state" / "provision"


def test_run_ids_sort_by_time() -> None:

    a = st.new_run_id("check", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    b = st.new_run_id("run", datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC))
    assert a.startswith("20260102T030405.000Z-check-")
    assert a < b


def test_history_save_rotate_and_lookup(tmp_path: Path) -> None:
    sd = st.StateDir(tmp_path)
    for i in range(5):
        sd.save_report(rep(f"2026010{i}T000000Z-check-00000{i}", "check", {"h": host("ok", [])}))
    sd.rotate_history(keep=3)
    ids = [p.stem for p in sd.list_history()]
    assert ids == [f"2026010{i}T000000Z-check-00000{i}" for i in (2, 3, 4)]
    assert sd.load_report("latest").run_id.endswith("4")
    assert sd.load_report("previous").run_id.endswith("3")
    assert sd.load_report("-3").run_id.endswith("2")
    assert sd.load_report("20260103").run_id.endswith("3")
    with pytest.raises(UsageProblem, match="3 runs match"):
        sd.load_report("2026")
    with pytest.raises(UsageProblem, match="no run"):
        sd.load_report("-9")
    path = sd.history / f"{ids[0]}.json"
    assert sd.load_report(str(path)).run_id == ids[0]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_previous_report_is_same_command_and_overlapping_hosts(tmp_path: Path) -> None:
    sd = st.StateDir(tmp_path)
    sd.save_report(rep("20260101T000000Z-check-a", "check", {"h1": host("ok", [])}))
    sd.save_report(rep("20260102T000000Z-run-b", "run", {"h1": host("ok", [])}))
    sd.save_report(rep("20260103T000000Z-check-c", "check", {"h9": host("ok", [])}))
    prev = sd.previous_report("check", "20260104T000000Z-check-d", {"h1"})
    assert prev is not None
    assert prev.run_id == "20260101T000000Z-check-a"
    assert sd.previous_report("check", "20260101T000000Z-check-a", {"h1"}) is None


def test_atomic_write_leaves_no_temp_and_sets_mode(tmp_path: Path) -> None:
    target = tmp_path / "d" / "f.txt"
    st.atomic_write_text(target, "one", 0o640)
    st.atomic_write_text(target, "two", 0o640)
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["f.txt"]
    assert oct(target.stat().st_mode & 0o777) == "0o640"


def test_diff_new_resolved_and_versions() -> None:
    old = rep(
        "a",
        "check",
        {
            "h1": host(
                "drift",
                [("driver.hold", "drift"), ("cudnn.version", "pass")],
                driver_version="535.129.03",
            ),
            "h2": host("ok", [("driver.hold", "pass")]),
            "gone": host("ok", []),
        },
    )
    new = rep(
        "b",
        "check",
        {
            "h1": host(
                "drift",
                [("driver.hold", "pass"), ("cudnn.version", "drift")],
                driver_version="535.154.05",
            ),
            "h2": host("ok", [("driver.hold", "pass")]),
            "h3": host("failed", [("driver.module", "fail")]),
        },
    )
    diffs = {d.host: d for d in diff_reports(old, new)}
    assert diffs["h1"].resolved == ["driver.hold: drift -> pass"]
    assert len(diffs["h1"].new_problems) == 1
    assert diffs["h1"].new_problems[0].startswith("cudnn.version: pass -> drift")
    assert diffs["h1"].versions == ["driver_version: 535.129.03 -> 535.154.05"]
    assert diffs["h2"].empty
    assert diffs["h3"].status == (None, "failed")
    assert "host not in the earlier run" in diffs["h3"].other
    assert "host not in the later run" in diffs["gone"].other
    text = "\n".join(format_diff(list(diffs.values())))
    assert "h2" not in text
    assert "  resolved: driver.hold: drift -> pass" in text
    assert "  new problem: cudnn.version: pass -> drift" in text
    assert "h3: absent -> failed" in text  # issue 21: was "None -> failed"
    json.dumps([d.to_dict() for d in diffs.values()])


def test_gpu_counts_come_from_one_small_index_each_saved_report_updates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """health.gpu_count's expected count: each host's newest passing report. Was: up to thirty
    whole history reports read before every run while a host was not passing (slow on a large
    fleet's history); now gpu-counts.json, written with each report."""
    s = st.StateDir(tmp_path)
    s.save_report(rep("20260101T000000.000Z-check-aaaaaa", "check",
                      {"gpu01": host("ok", [], gpu_count=8), "gpu02": host("ok", [], gpu_count=4)}))
    s.save_report(rep("20260102T000000.000Z-check-bbbbbb", "check",
                      {"gpu01": host("failed", [], gpu_count=7), "gpu03": host("ok", [])}))
    assert json.loads(s.gpu_counts_path.read_text(encoding="utf-8")) == {"gpu01": 8, "gpu02": 4}
    assert s.gpu_counts_path.stat().st_mode & 0o777 == 0o600

    def no_history(path: Path) -> Report:
        raise AssertionError(f"read {path}")

    monkeypatch.setattr(st, "read_report", no_history)  # the index alone answers
    assert s.gpu_counts(["gpu01", "gpu99"]) == {"gpu01": 8}
    assert s.gpu_counts() == {"gpu01": 8, "gpu02": 4}


def test_two_runs_saving_at_once_both_keep_their_gpu_counts(tmp_path: Path) -> None:
    """Was: read, merge and replace without a lock, so a run saving while another did lost one's
    hosts from gpu-counts.json until their next passing run. A save now waits for the lock the
    other holds, then merges what it wrote."""
    import threading  # noqa: PLC0415

    s = st.StateDir(tmp_path)
    s.save_report(rep("20260101T000000.000Z-check-aaaaaa", "check",
                      {"gpu01": host("ok", [], gpu_count=8)}))
    lock = s.gpu_counts_path.with_name("gpu-counts.lock")
    other = rep("20260101T000001.000Z-check-bbbbbb", "check",
                {"gpu02": host("ok", [], gpu_count=4)})
    with st.StateDir._locked(lock):  # another run is between its read and its write
        saver = threading.Thread(target=s.save_report, args=(other,), daemon=True)
        saver.start()
        saver.join(0.5)
        assert saver.is_alive(), "the save did not wait for the lock"
        # the other run writes its own update while it holds the lock
        st.atomic_write_text(s.gpu_counts_path, json.dumps({"gpu01": 8, "gpu03": 2}), 0o600)
    saver.join(10)
    assert not saver.is_alive()
    assert s.gpu_counts() == {"gpu01": 8, "gpu02": 4, "gpu03": 2}
    assert lock.stat().st_mode & 0o777 == 0o600


def test_a_state_without_the_index_is_read_from_its_history_then_indexed(tmp_path: Path) -> None:
    """A state directory written before gpu-counts.json (or with an unreadable one): the newest
    thirty history reports answer, and the next saved report writes the index from them."""
    s = st.StateDir(tmp_path)
    old = rep("20260101T000000.000Z-check-aaaaaa", "check", {"gpu01": host("ok", [], gpu_count=8)})
    s.save_report(old)
    s.gpu_counts_path.unlink()
    assert s.gpu_counts(["gpu01"]) == {"gpu01": 8}
    s.gpu_counts_path.write_text("[not an index", encoding="utf-8")
    assert s.gpu_counts(["gpu01"]) == {"gpu01": 8}
    s.gpu_counts_path.unlink()
    s.save_report(rep("20260102T000000.000Z-check-bbbbbb", "check",
                      {"gpu01": host("failed", [], gpu_count=2)}))
    assert json.loads(s.gpu_counts_path.read_text(encoding="utf-8")) == {"gpu01": 8}
