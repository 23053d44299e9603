"""The bench's pure parts: parsers, the result model and its shape check, P7, the docs block, the
measurement of a process tree (no lab, no root)."""

# ruff: noqa: E501  (recorded outputs are kept verbatim)
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

import lab
from bench import measure, parse, report
from bench import result_model as model
from bench.__main__ import main, parse_args, settings_from
from bench.scenarios import describe_command

# Output of a lab run (ansible-core 2.19, plain ansible-playbook --check, 2 of 4 hosts kept)
RECAP = """\
TASK [Probe and judge the whole stack] *****************************************
ok: [gpu01]

PLAY RECAP *********************************************************************
gpu01                      : ok=3    changed=0    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0   
gpu02                      : ok=21   changed=6    unreachable=0    failed=1    skipped=10   rescued=0    ignored=0   

"""  # noqa: W291

# /var/log/apt/history.log of a lab host after a run (apt-get, as ansible.builtin.apt calls it)
HISTORY = """
Start-Date: 2026-12-03  17:53:08
Commandline: /usr/bin/apt-get -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -o DPkg::Lock::Timeout=60 install cuda-toolkit-12-1=12.1.1-1
Requested-By: gpuadmin (1000)
Install: cuda-toolkit-12-1-config-common:amd64 (12.1.105-1, automatic), cuda-toolkit-12-1:amd64 (12.1.1-1), cuda-toolkit-config-common:amd64 (12.4.127-1, automatic), cuda-cudart-12-1:amd64 (12.1.105-1, automatic), cuda-nvcc-12-1:amd64 (12.1.105-1, automatic), cuda-toolkit-12-config-common:amd64 (12.4.127-1, automatic)
End-Date: 2026-12-03  17:53:09

Start-Date: 2026-12-03  17:53:13
Commandline: /usr/bin/apt-get -y install libnccl2=2.18.3-1+cuda12.1 libnccl-dev=2.18.3-1+cuda12.1 --allow-downgrades
Requested-By: gpuadmin (1000)
Install: libnccl2:amd64 (2.18.3-1+cuda12.1), libnccl-dev:amd64 (2.18.3-1+cuda12.1)
End-Date: 2026-12-03  17:53:13

Start-Date: 2026-12-03  17:54:00
Upgrade: libnccl2:amd64 (2.18.3-1+cuda12.1, 2.18.3-1+cuda12.4)
Remove: libcudnn8:amd64 (8.9.2.26-1+cuda12.1)
End-Date: 2026-12-03  17:54:01
"""

# journalctl -o json SYSLOG_IDENTIFIER=sshd on a lab host (fields trimmed to those read)
JOURNAL = "\n".join(
    json.dumps(e)
    for e in (
        {"MESSAGE": "Server listening on 127.0.0.12 port 22.",
         "__REALTIME_TIMESTAMP": "1796320382509015"},
        {"MESSAGE": "Accepted publickey for gpuadmin from 127.0.0.1 port 51888 ssh2: ED25519 "
                    "SHA256:lRZLROXMJppwpEKNPAU2BlgL3lIQdbTKAj9V77agvxc",
         "__REALTIME_TIMESTAMP": "1796320383033039"},
        {"MESSAGE": "pam_unix(sshd:session): session opened for user gpuadmin(uid=1000) by (uid=0)",
         "__REALTIME_TIMESTAMP": "1796320383034340"},
        {"MESSAGE": "Accepted publickey for gpuadmin from 127.0.0.1 port 51890 ssh2: ED25519 x",
         "__REALTIME_TIMESTAMP": "1796320390000000"},
    )
)


def test_play_recap_and_tasks() -> None:
    recap = parse.play_recap(RECAP)
    assert sorted(recap) == ["gpu01", "gpu02"]
    assert recap["gpu02"] == {"ok": 21, "changed": 6, "unreachable": 0, "failed": 1, "skipped": 10,
                              "rescued": 0, "ignored": 0}
    assert parse.tasks_of(recap["gpu01"]) == 4
    # ok already counts the 6 changed results: 21 + 1 + 10 task results, not 38
    assert parse.tasks_of(recap["gpu02"]) == 32
    assert parse.play_recap("no recap here") == {}


def test_apt_history() -> None:
    txs = parse.apt_history(HISTORY)
    assert len(txs) == 3
    assert txs[0].requested == ["cuda-toolkit-12-1=12.1.1-1"]
    assert len(txs[0].automatic) == 5
    assert txs[1].requested == ["libnccl2=2.18.3-1+cuda12.1", "libnccl-dev=2.18.3-1+cuda12.1"]
    assert txs[2].requested == ["libnccl2=2.18.3-1+cuda12.4"]  # an upgrade: the new version
    assert txs[2].removed == ["libcudnn8"]
    assert txs[0].to_json()["actions"] == {"Install": 6}
    assert parse.apt_history("") == []


def test_first_ssh_accept() -> None:
    assert parse.first_ssh_accept(JOURNAL, 1796320383.0) == pytest.approx(1796320383.033039)
    assert parse.first_ssh_accept(JOURNAL, 1796320384.0) == pytest.approx(1796320390.0)
    assert parse.first_ssh_accept(JOURNAL, 1796320391.0) is None
    assert parse.first_ssh_accept("-- No entries --\nnot json {", 0) is None


def test_apt_updates_window() -> None:
    log = "1796319236.031056665\n1796319236.139201026\n1796319244.456780720\n"
    assert parse.apt_updates(log, 1796319236.1) == 2
    assert parse.apt_updates(log, 0, 1796319240) == 2
    assert parse.apt_updates("", 0) == 0


def test_machine_parsers() -> None:
    assert parse.cpu_model("processor\t: 0\nmodel name\t: AMD EPYC\n") == "AMD EPYC"
    assert parse.cpu_model("") == "unknown"
    assert parse.mem_total_gib("MemTotal:       24641536 kB\n") == 23.5
    stat = "usage_usec 20051883\nuser_usec 16563333\nsystem_usec 3488549\n"
    assert parse.cgroup_usage_s(stat) == pytest.approx(20.051883)
    assert parse.cgroup_usage_s("") is None


def test_goal_entry_and_not_measured_shapes() -> None:
    e = model.goal_entry("P1", 1.2, [{"ratio": 1.2}])
    assert (e["value"], e["goal"], e["unit"], e["met"]) == (1.2, 1.05, "ratio", False)
    assert model.entry_problems("P1", e) == []
    n = model.not_measured("P2", "no converged host: the driver task failed")
    assert n["value"] is None and n["met"] is None and n["goal"] == 0.5 and not n["measured"]
    assert model.entry_problems("P2", n) == []
    assert model.entry_problems("X", {"value": 1, "goal": None, "unit": "s", "met": None,
                                      "runs": []}) == ["X: value 1 is not a float"]
    assert "X: no value and no reason" in model.entry_problems(
        "X", {"value": None, "goal": None, "unit": "s", "met": None, "runs": []})
    assert model.median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError, match="median"):
        model.median([])


def full_result() -> dict:
    data: dict = {
        "machine": {"cpu_model": "x", "cores": 2}, "settings": {"repeat": 3}, "findings": [],
        "records": {k: model.record(1.0, "s", [1.0]) for k in model.RECORD_KEYS},
    }
    for key in model.GOAL_KEYS:
        data[key] = model.goal_entry(key, 1.0, [1.0])
    data["P3"]["sizes"] = {"1": {"wall_s": 1.0}}
    data["P7"]["arithmetic"] = ["..."]
    return data


def test_result_problems() -> None:
    data = full_result()
    assert model.result_problems(data) == []
    del data["P4"]
    data["records"].pop("first_ssh_s")
    data["P7"].pop("arithmetic")
    problems = model.result_problems(data)
    assert "no P4" in problems and "records: no first_ssh_s" in problems
    assert "P7: no arithmetic" in problems


def test_projection_arithmetic() -> None:
    p = model.Projection(nodes=1000, cores=16, forks=64, cpu_s_per_host=0.4, wall_s_per_host=8.0)
    assert p.cpu_bound_s == pytest.approx(25.0)
    assert p.waves == 16 and p.wave_bound_s == pytest.approx(128.0)
    assert p.minutes == pytest.approx(128.0 / 60)
    assert p.limit == "waves of forks"
    lines = p.arithmetic()
    assert "ceil(1000 / 64 forks) = 16 waves" in lines[1]
    cpu = model.Projection(nodes=1000, cores=16, forks=1000, cpu_s_per_host=8.0,
                           wall_s_per_host=8.0)
    assert cpu.limit == "controller CPU" and cpu.minutes == pytest.approx(1000 * 8 / 16 / 60)
    assert math.isclose(cpu.cpu_bound_s, 500.0)


def test_docs_block_replaced_in_place(tmp_path: Path) -> None:
    data = full_result()
    data.update(date="2026-12-03", duration_s=300.0)
    data["P2"] = model.not_measured("P2", "no converged host | pipe")
    block = report.markdown(data, "bench/results/2026-12-03.json")
    assert block.startswith(report.BEGIN) and block.rstrip().endswith(report.END)
    assert "no converged host \\| pipe" in block
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Title\n\ntext\n\n{report.BEGIN}\nold\n{report.END}\n\nafter\n")
    report.update_docs(doc, block)
    text = doc.read_text()
    assert text.startswith("# Title") and text.rstrip().endswith("after")
    assert "old" not in text and text.count(report.BEGIN) == 1
    report.update_docs(doc, block)
    assert doc.read_text() == text  # idempotent
    lines = report.goal_lines(data)
    assert any(line.startswith("P2") and "not measured" in line for line in lines)


def test_smoke_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_SIZES", raising=False)
    s = settings_from(parse_args(["--smoke", "--repeat", "5"]))
    assert (s.repeat, s.sizes, s.p1_hosts, s.warmup, s.smoke) == (1, (1,), 1, False, True)
    monkeypatch.setenv("BENCH_SIZES", "16,1,4")
    monkeypatch.setenv("BENCH_SKIP", "P2, P4")
    s = settings_from(parse_args([]))
    assert s.sizes == (1, 4, 16) and s.skip == frozenset({"P2", "P4"})
    assert s.check_args == ("-e", "gpu_stack_validation_enabled=false")
    monkeypatch.setenv("BENCH_SIZES", "32")
    with pytest.raises(SystemExit):
        settings_from(parse_args([]))


def test_describe_command_hides_the_extra_vars() -> None:
    text = describe_command({"command": ["ansible-playbook", "--check", "-e", '{"a": 1, "b": 2}',
                                         "check.yml"], "cwd": "/repo/playbooks"})
    assert text == ("ansible-playbook --check -e <the CLI's extra vars: 2 keys> check.yml "
                    "(in /repo/playbooks)")


def test_measure_counts_and_reaps_what_the_command_leaves(tmp_path: Path) -> None:
    # the child leaves a grandchild behind (as ssh's ControlPersist master does): it is reparented
    # to the bench, stopped and reaped, and the run does not wait for its 30 s
    code = "import subprocess, sys; subprocess.Popen(['sleep', '30']); print('left')"
    s = measure.run("t", [sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"},
                    log_dir=tmp_path)
    assert s.rc == 0 and "left" in s.output
    assert s.orphans == 1
    assert s.wall_s < 10
    assert s.cpu_s > 0
    assert Path(s.output_path).read_text().strip() == "left"
    assert set(s.to_json()) >= {"wall_s", "cpu_s", "rc", "orphans"}
    burn = "x = 0\nfor i in range(3_000_000): x += i"
    s2 = measure.run("burn", [sys.executable, "-c", burn], env={"PATH": "/usr/bin:/bin"})
    assert s2.cpu_s > 0.05 and s2.output_path == ""


def test_no_lab_is_one_message_and_exit_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lab, "unavailable_reason", lambda: "the lab needs root")
    assert main(["--smoke", "--work", str(tmp_path)]) == 4
    assert "the lab is unavailable here: the lab needs root" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()
