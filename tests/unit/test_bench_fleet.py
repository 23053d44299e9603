"""records.fleet_check's pure parts (no lab, no root): P7 from the measured light-fleet run, the
process tree the memory sampler sums, the forks read from a run's recorded command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

from bench import fleet_scale
from bench import result_model as model
from bench.harness import Settings
from bench.scenarios import project_measured

FLEET = model.record(
    120.0,
    "s",
    [],
    hosts=200,
    controller_cpu_s_per_host=0.4,
    one_host_wall_s=5.0,
    forks=16,
    fanout_reached=16,
    load_avg_before=[3.0, 2.0, 1.0],
)


def _bench() -> SimpleNamespace:
    lines: list[str] = []
    return SimpleNamespace(s=Settings(), log=lines.append, lines=lines)


def test_p7_is_projected_from_the_measured_light_fleet() -> None:
    b = _bench()
    p3 = model.goal_entry("P7", 0.8, [], inputs={"cpu_s_per_host": 0.345})
    p7 = project_measured(b, FLEET, p3)  # type: ignore[arg-type]
    # 1000 x 0.4 / 16 = 25 s; ceil(1000 / 64) = 16 waves x 5 s = 80 s -> 80 s = 1.333 min
    assert p7["value"] == round(80 / 60, 4)
    assert p7["met"] is True
    assert p7["basis"] == "records.fleet_check (200 light hosts, measured)"
    assert p7["inputs"]["cpu_s_per_host"] == 0.4 and p7["inputs"]["measured_hosts"] == 200
    assert p7["arithmetic"][0].startswith("measured:    200 light hosts in 120.0 s at 16 forks")
    assert p7["from_p3"]["value"] == 0.8
    assert "assumptions" in p7 and model.entry_problems("P7", p7) == []


def test_p7_without_a_p3_projection_keeps_no_from_p3() -> None:
    p7 = project_measured(_bench(), FLEET, model.not_measured("P7", "skipped"))  # type: ignore[arg-type]
    assert "from_p3" not in p7


def test_descendants_leave_out_the_excluded_subtrees() -> None:
    kept = subprocess.Popen(["sleep", "30"])
    left = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        found = fleet_scale.descendants(os.getpid(), exclude=[left.pid])
        assert kept.pid in found
        assert left.pid not in found
        assert fleet_scale.pss_kib(os.getpid()) > 0
    finally:
        for p in (kept, left):
            p.kill()
            p.wait()


def test_forks_come_from_the_recorded_command(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    art.mkdir()
    (art / "command").write_text(
        json.dumps({"command": ["ansible-playbook", "--forks", "16", "check.yml"]}),
        encoding="utf-8",
    )
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.json").write_text(
        json.dumps({"artifacts": str(art), "hosts": {"a": {"status": "failed"}}}),
        encoding="utf-8",
    )
    assert fleet_scale._forks(report) == 16
    assert fleet_scale._statuses(report) == {"failed": 1}
    assert fleet_scale._forks(tmp_path / "missing") is None


def test_a_host_is_busy_only_while_it_runs_more_than_its_sshd(tmp_path: Path) -> None:
    idle, busy = tmp_path / "idle.procs", tmp_path / "busy.procs"
    fleet = SimpleNamespace(process_ids=lambda: [], cgroup_procs_files=lambda: [idle, busy])
    child = subprocess.Popen(["sleep", "30"])
    try:
        idle.write_text("", encoding="utf-8")  # no process at all (or only IDLE ones)
        busy.write_text(f"{child.pid}\n", encoding="utf-8")  # a command of the play
        assert fleet_scale.Sampler(fleet).busy_hosts() == 1
        busy.write_text("", encoding="utf-8")
        assert fleet_scale.Sampler(fleet).busy_hosts() == 0
    finally:
        child.kill()
        child.wait()
    assert {"sshd", "unshare"} <= fleet_scale.IDLE
