"""Lab, end to end through the `provision` CLI (issue 3 and issue 6 acceptance).

* `provision --host <lab host> --stack <lab stack>` exits 0 and writes report.json, junit.xml and
  provision.prom; a second run reports every host `ok` with zero changed tasks.
* `provision check` over 16 hosts in mixed states gives the right per-host status and exit code,
  and the next night's check reports what changed since the previous one.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from test_roles_helpers import PROVISION, fleet_args, provision_cli


def _host_args(fleet: Any) -> list[str]:
    args: list[str] = []
    for h in fleet.hosts:
        args += ["--host", f"{h.user}@{h.address}"]
    return [
        *args,
        "--key",
        str(fleet.hosts[0].key),
        "--known-hosts",
        str(fleet.known_hosts),
        "--stack",
        str(fleet.stack_path),
        "-e",
        f"@{fleet.extra_vars_path}",
    ]


def test_full_run_by_host_then_idempotent_second_run(fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    proc, data = provision_cli(tmp_path, *_host_args(fleet), report="first")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (host,) = data["hosts"]
    assert fleet.hosts[0].address in host
    first = data["hosts"][host]
    assert first["status"] == "changed", first["status"]
    failing = [c for c in first["checks"] if c["status"] in ("fail", "drift")]
    assert failing == [], failing
    ids = {c["id"] for c in first["checks"]}
    for cid in (
        "driver.version",
        "cuda.toolkit",
        "env.path",
        "validation.allreduce",
        "validation.ddp",
    ):
        assert cid in ids, sorted(ids)
    facts = first["facts"]
    assert int(facts["gpu_count"]) == 8 and "H100" in facts["gpu_model"], facts
    assert facts["cuda_version"].startswith("12.1") and facts["torch_version"].startswith("2.13.0")
    assert data["hosts"][host]["validation"], "validation results missing from report.json"

    # the three reports are there and parse
    junit = ET.parse(tmp_path / "first" / "junit.xml").getroot()
    suites = junit.findall("testsuite") if junit.tag == "testsuites" else [junit]
    assert [s.get("name") for s in suites] == [host]
    assert len(suites[0].findall("testcase")) == len(first["checks"])
    prom = (tmp_path / "first" / "provision.prom").read_text(encoding="utf-8")
    names = {f.name for f in text_string_to_metric_families(prom)}
    assert {
        "provision_check_status",
        "provision_host_info",
        "provision_run_timestamp_seconds",
    } <= names

    # second run: nothing to do
    proc, data = provision_cli(tmp_path, *_host_args(fleet), report="second")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    second = data["hosts"][host]
    assert second["status"] == "ok", second
    assert second["counts"]["changed"] == 0, second["counts"]
    # converged from the check: the roles of the components whose checks all pass were skipped,
    # and the report is as complete as the first run's (same ids, every one passing)
    verdicts = {c["id"]: c["status"] for c in second["checks"]}
    assert set(verdicts) == ids, sorted(set(verdicts) ^ ids)
    assert set(verdicts.values()) <= {"pass", "skip"}, verdicts
    for key in ("gpu_count", "gpu_model", "driver_version", "cuda_version", "torch_version"):
        assert second["facts"].get(key) == first["facts"].get(key), key
    # every role ran its tasks again (-e gpu_stack_converge=all): more tasks, the same verdicts
    proc, data = provision_cli(tmp_path, *_host_args(fleet), "-e", "gpu_stack_converge=all",
                               report="third")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    third = data["hosts"][host]
    assert third["counts"]["changed"] == 0, third["counts"]
    assert {c["id"]: c["status"] for c in third["checks"]} == verdicts
    assert third["counts"]["ok"] > second["counts"]["ok"] + 20, (second["counts"], third["counts"])


def test_sixteen_host_nightly_check_with_history(fleet_factory: Any, tmp_path: Path) -> None:
    profiles = (
        ["h100-sxm-8", "nogpu"]
        + ["a100-sxm-8", "rtx4090-4", "t4-1", "h100-sxm-8"] * 3
        + [
            "a100-sxm-8",
            "t4-1",
        ]
    )
    assert len(profiles) == 16
    fleet = fleet_factory(16, profiles=profiles)
    names = [h.name for h in fleet.hosts]
    good, nogpu, fresh = names[0], names[1], names[2:]
    common = fleet_args(fleet)

    # provision one host; the others stay as they came (fresh) or have no GPU at all
    proc, _ = provision_cli(
        tmp_path,
        *common,
        "--limit",
        good,
        "-e",
        "gpu_stack_validation_enabled=false",
        report="provision",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # night 1
    proc, data = provision_cli(tmp_path, "check", *common, report="night1")
    assert proc.returncode == 1, proc.stdout[-3000:]  # a failed host (no GPU) outranks drift
    hosts = data["hosts"]
    assert sorted(hosts) == sorted(names)
    assert hosts[good]["status"] == "ok", [
        c for c in hosts[good]["checks"] if c["status"] != "pass"
    ]
    assert hosts[nogpu]["status"] == "failed"
    assert {c["id"]: c["status"] for c in hosts[nogpu]["checks"]}["preflight.gpu"] == "fail"
    for name in fresh:
        assert hosts[name]["status"] == "drift", (name, hosts[name]["status"])
        drift = {c["id"] for c in hosts[name]["checks"] if c["status"] == "drift"}
        assert {"driver.version", "cuda.toolkit"} <= drift, (name, sorted(drift))
    assert data["summary"]["ok"] == 1 and data["summary"]["drift"] == 14, data["summary"]

    # during the day someone lifts a hold on the provisioned host
    assert fleet.run(good, "apt-mark unhold libnccl2").rc == 0

    # night 2: the change since night 1 is reported, per host
    proc, data = provision_cli(tmp_path, "check", *common, report="night2")
    assert proc.returncode == 1
    assert data["hosts"][good]["status"] == "drift"
    changes = {c["host"]: c for c in data["changes"]["hosts"]}
    assert any("nccl.hold" in p for p in changes[good]["new_problems"]), changes[good]
    assert all(not changes.get(n, {}).get("new_problems") for n in fresh), changes
    assert "nccl.hold" in proc.stdout + proc.stderr

    env = dict(os.environ, PROVISION_STATE_DIR=str(tmp_path / "state"))
    diff = subprocess.run(
        [str(PROVISION), "history", "diff", "previous", "latest"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )
    assert diff.returncode == 0, diff.stderr
    assert good in diff.stdout and "nccl.hold" in diff.stdout, diff.stdout
