"""One provisioning run per host: the lock's rules (plugins/module_utils/lock.py)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from ansible_collections.provision.gpu.plugins.module_utils import lock as lk

ME = {"run_id": "run-b", "controller": "ctl2", "pid": 42, "started_iso": "2026-12-03T10:00:00Z"}
OTHER = {"run_id": "run-a", "controller": "ctl1", "pid": 7, "started_iso": "2026-12-03T09:59:00Z",
         "heartbeat": 1000.0}


def test_a_live_run_refuses_another_naming_controller_pid_and_start(tmp_path: Path) -> None:
    path = str(tmp_path / "run.lock")
    lk.write_lock(OTHER, path)
    got = lk.apply(ME, stale_s=600, path=path, clock=lambda: 1100.0)
    assert got["action"] == "refuse"
    for text in ("run-a", "ctl1", "pid 7", "2026-12-03T09:59:00Z", "100 s ago"):
        assert text in got["reason"], text
    assert lk.read_lock(path) == OTHER  # untouched


def test_a_dead_runs_lock_is_taken_over_and_the_new_run_refreshes_it(tmp_path: Path) -> None:
    path = str(tmp_path / "run.lock")
    lk.write_lock(OTHER, path)
    got = lk.apply(ME, stale_s=600, path=path, clock=lambda: 1700.0)
    assert got["action"] == "takeover" and "dead run" in got["reason"]
    held = lk.read_lock(path)
    assert held is not None and held["run_id"] == "run-b" and held["heartbeat"] == 1700.0
    assert lk.refresh("run-b", path, clock=lambda: 1800.0)
    assert lk.read_lock(path)["heartbeat"] == 1800.0
    assert not lk.refresh("run-a", path)  # not that run's lock any more
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600


def test_same_run_refreshes_and_release_removes_only_its_own(tmp_path: Path) -> None:
    path = str(tmp_path / "d" / "run.lock")
    assert lk.apply(ME, path=path, clock=lambda: 5.0)["action"] == "acquire"
    assert stat.S_IMODE(Path(path).parent.stat().st_mode) == 0o700
    assert lk.apply(ME, path=path, clock=lambda: 6.0)["action"] == "refresh"
    assert json.loads(Path(path).read_text())["heartbeat"] == 6.0
    assert not lk.release("run-a", path)
    assert lk.release("run-b", path)
    assert lk.read_lock(path) is None


def test_takeover_on_request(tmp_path: Path) -> None:
    path = str(tmp_path / "run.lock")
    lk.write_lock(OTHER, path)
    assert lk.apply(ME, takeover=True, path=path, clock=lambda: 1001.0)["action"] == "takeover"
