"""Merging rank fragments into the node result, and check evaluation (no torch)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "roles" / "validation" / "files"))

from provision_validate import checks

THR = {"row": "cpu-gloo", "allreduce_busbw_gbps": 0.05, "ddp_scaling_efficiency": 0.05,
       "straggler_ratio": 0.7, "source": "the lab", "note": "backend gloo on CPU: GPU "
       "thresholds not applicable", "overridden": []}


def per_rank(world: int, host: str = "h1", over: dict | None = None) -> list[dict]:
    out = []
    for r in range(world):
        p = {"rank": r, "host": host, "hash": "a" * 64, "samples_per_s": 1000.0,
             "local_samples_per_s": 4000.0, "local_step_s": 0.016, "train_s": 1.9,
             "loss_first": 2.3, "loss_last": 0.1, "loss_first_avg": 2.3, "loss_last_avg": 0.12,
             "single_samples_per_s": 3000.0 if r == 0 else None}
        p.update((over or {}).get(r, {}))
        out.append(p)
    return out


def fragment(rank: int, world: int, busbw: float = 0.8, thr: dict | None = None,
             ranks: list[dict] | None = None, **extra) -> dict:
    f = {
        "rank": rank, "world_size": world, "local_rank": rank, "host": "h1", "status": "ok",
        "phase": "done", "error": None, "backend": "gloo", "version": "1.0.0", "nnodes": 1,
        "environment": {"torch": "2.13.0+cpu", "torch_cuda": None, "nccl": None, "cudnn": None,
                        "python": "3.11.2", "gpu_names": ["NVIDIA H100 80GB HBM3"] * 8,
                        "topology": {"interconnect": "nvlink", "gpus": 8},
                        "nccl_env": {}, "gloo_env": {"GLOO_SOCKET_IFNAME": "lo"}},
        "thresholds": thr or THR,
        "allreduce": {"sizes": [65536, 16777216], "judged_busbw_gbps": busbw,
                      "attempts": [{"judged_busbw_gbps": busbw}], "wrong": 0, "correct": True,
                      "rows": []},
        "ddp": {"steps": 30, "per_rank": ranks or per_rank(world)},
    }
    f.update(extra)
    return f


def write(tmp: Path, frags: list[dict]) -> Path:
    for f in frags:
        (tmp / f"rank-{f['rank']}.json").write_text(json.dumps(f), encoding="utf-8")
    return tmp


def by_id(result: dict) -> dict:
    return {c["id"]: c for c in result["checks"]}


def test_all_ranks_ok_passes(tmp_path: Path) -> None:
    write(tmp_path, [fragment(r, 4) for r in range(4)])
    res = checks.merge(str(tmp_path), "gpu01", nproc=4, rc=0, elapsed_s=12.5)
    c = by_id(res)
    assert res["status"] == "pass"
    assert c["validation.allreduce"]["status"] == "pass"
    assert c["validation.allreduce"]["actual"]["busbw_gbps"] == 0.8
    assert c["validation.ddp"]["status"] == "pass", c["validation.ddp"]
    assert c["validation.multinode"]["status"] == "skip"
    s = res["ddp"]["summary"]
    assert s["scaling_efficiency"] == round(4000 / (4 * 3000), 4)
    assert s["params_identical"] and s["step_time_spread"] == 1.0
    assert res["versions"]["torch"] == "2.13.0+cpu" and len(res["gpu_names"]) == 8
    for chk in res["checks"]:
        assert set(chk) == {"id", "status", "expected", "actual", "message", "remediation"}


def test_bandwidth_under_threshold_fails_with_measured_and_expected(tmp_path: Path) -> None:
    thr = dict(THR, allreduce_busbw_gbps=5.0, source="override (allreduce_busbw_gbps)")
    frags = [fragment(r, 2, busbw=0.83, thr=thr) for r in range(2)]
    for f in frags:
        f["allreduce"]["attempts"] = [{"judged_busbw_gbps": 0.81}, {"judged_busbw_gbps": 0.83}]
    write(tmp_path, frags)
    c = by_id(checks.merge(str(tmp_path), "gpu01", nproc=2, rc=0))["validation.allreduce"]
    assert c["status"] == "fail"
    assert "0.83 GB/s is below the threshold 5.00 GB/s" in c["message"]
    assert "2 attempts: 0.81, 0.83" in c["message"]
    assert c["expected"] == ">= 5.00 GB/s busbw" and c["actual"]["busbw_gbps"] == 0.83
    assert c["remediation"]


def test_wrong_sums_fail(tmp_path: Path) -> None:
    frags = [fragment(r, 2) for r in range(2)]
    for f in frags:
        f["allreduce"].update(correct=False, wrong=3)
    write(tmp_path, frags)
    c = by_id(checks.merge(str(tmp_path), "gpu01", nproc=2, rc=0))["validation.allreduce"]
    assert c["status"] == "fail" and "3 elements differ" in c["message"]


def test_straggler_below_ratio_of_best_fails(tmp_path: Path) -> None:
    ranks = per_rank(4, over={2: {"local_samples_per_s": 2000.0, "local_step_s": 0.032}})
    write(tmp_path, [fragment(r, 4, ranks=ranks) for r in range(4)])
    c = by_id(checks.merge(str(tmp_path), "gpu01", nproc=4, rc=0))["validation.ddp"]
    assert c["status"] == "fail"
    assert "straggler: rank 2 on host h1" in c["message"] and "0.50 x the best" in c["message"]
    assert c["actual"]["min_rank_perf_ratio"] == 0.5
    assert c["actual"]["step_time_spread"] == 2.0


def test_rank_at_ratio_boundary_is_not_a_straggler(tmp_path: Path) -> None:
    ranks = per_rank(2, over={1: {"local_samples_per_s": 2800.0}})
    write(tmp_path, [fragment(r, 2, ranks=ranks) for r in range(2)])
    assert by_id(checks.merge(str(tmp_path), "g", nproc=2, rc=0))["validation.ddp"]["status"] \
        == "pass"


def test_diverged_parameters_fail_naming_the_odd_rank(tmp_path: Path) -> None:
    ranks = per_rank(4, over={1: {"hash": "b" * 64}})
    write(tmp_path, [fragment(r, 4, ranks=ranks) for r in range(4)])
    c = by_id(checks.merge(str(tmp_path), "gpu01", nproc=4, rc=0))["validation.ddp"]
    assert c["status"] == "fail"
    assert "parameters differ across ranks" in c["message"]
    assert "odd rank(s) 1 on host h1" in c["message"]
    assert c["actual"]["params_identical"] is False


def test_loss_that_does_not_fall_fails(tmp_path: Path) -> None:
    ranks = per_rank(2, over={0: {"loss_last_avg": 2.31}})
    write(tmp_path, [fragment(r, 2, ranks=ranks) for r in range(2)])
    c = by_id(checks.merge(str(tmp_path), "g", nproc=2, rc=0))["validation.ddp"]
    assert c["status"] == "fail" and "loss did not fall" in c["message"]


def test_scaling_efficiency_under_threshold_fails(tmp_path: Path) -> None:
    thr = dict(THR, ddp_scaling_efficiency=0.9)
    write(tmp_path, [fragment(r, 4, thr=thr) for r in range(4)])
    c = by_id(checks.merge(str(tmp_path), "g", nproc=4, rc=0))["validation.ddp"]
    assert c["status"] == "fail"
    assert "scaling efficiency 0.333 < 0.90" in c["message"]


def test_hang_names_the_lagging_rank_and_host(tmp_path: Path) -> None:
    peers = {"0": {"seq": 5, "phase": "allreduce 65536 B", "host": "h1"},
             "1": {"seq": 3, "phase": "allreduce", "host": "h1"}}
    f0 = fragment(0, 3)
    del f0["ddp"], f0["allreduce"]
    f0.update(status="timeout", phase="allreduce 65536 B", peers=peers, lagging=[1],
              error="rank 0 on host h1: all_reduce check (65536 B) did not complete within 10 s")
    f2 = copy.deepcopy(f0)
    f2.update(rank=2, status="terminated", lagging=[], error="rank 2 on host h1: terminated by "
              "signal 15 in phase allreduce")
    write(tmp_path, [f0, f2])  # rank 1 left no fragment at all
    res = checks.merge(str(tmp_path), "h1", nproc=3, rc=1, timeout_s=120)
    c = by_id(res)
    ar = c["validation.allreduce"]
    assert ar["status"] == "fail"
    assert "hang: rank 1 on host h1 stopped progressing in phase 'allreduce'" in ar["message"]
    assert "rank 1 on host h1: no result" in ar["message"]
    assert "rank(s) 2 on host h1 stopped after the failure" in ar["message"]
    assert c["validation.ddp"]["status"] == "fail"
    assert {r["rank"]: r["status"] for r in res["ranks"]} == {0: "timeout", 2: "terminated",
                                                              1: "missing"}


def test_outer_timeout_is_named_when_nothing_was_written(tmp_path: Path) -> None:
    res = checks.merge(str(tmp_path), "gpu07", nproc=2, rc=124, timeout_s=300)
    ar = by_id(res)["validation.allreduce"]
    assert ar["status"] == "fail"
    assert "rank 0 on host gpu07: no result (process killed by the outer timeout of 300 s" \
        in ar["message"]


def test_ddp_phase_failure_keeps_the_allreduce_result(tmp_path: Path) -> None:
    f = fragment(0, 2)
    del f["ddp"]
    f.update(status="timeout", phase="ddp training", lagging=[],
             error="rank 0 on host h1: DDP step 3 (gradient all-reduce) did not complete "
             "within 10 s")
    g = copy.deepcopy(f)
    g.update(rank=1, error="rank 1 on host h1: phase ddp did not complete within 10 s (this "
             "rank is stalled: fault injection)")
    write(tmp_path, [f, g])
    c = by_id(checks.merge(str(tmp_path), "h1", nproc=2, rc=1))
    assert c["validation.allreduce"]["status"] == "pass"
    assert c["validation.ddp"]["status"] == "fail"
    assert "rank 1 on host h1 stopped progressing" in c["validation.ddp"]["message"]


def test_world_size_one_passes_without_bus_bandwidth(tmp_path: Path) -> None:
    f = fragment(0, 1, busbw=None)
    f["ddp"]["per_rank"] = per_rank(1)
    write(tmp_path, [f])
    c = by_id(checks.merge(str(tmp_path), "g", nproc=1, rc=0))
    assert c["validation.allreduce"]["status"] == "pass"
    assert "world size 1" in c["validation.allreduce"]["message"]
    assert c["validation.ddp"]["status"] == "pass"
    assert c["validation.ddp"]["actual"]["scaling_efficiency"] is None


def test_multinode_pass_and_fail(tmp_path: Path) -> None:
    node1 = tmp_path / "n1"
    node1.mkdir()
    ranks = per_rank(4)
    for p in ranks[2:]:
        p["host"] = "h2"
    frags = [fragment(r, 4, ranks=ranks, nnodes=2) for r in (2, 3)]
    write(node1, frags)
    res = checks.merge(str(node1), "h2", node_rank=1, nnodes=2, nproc=2, rc=0)
    m = by_id(res)["validation.multinode"]
    assert m["status"] == "pass", m
    assert m["expected"] == {"nnodes": 2, "world_size": 4} and m["actual"]["world_size"] == 4
    # the same node with a failed DDP result fails multinode too
    node1b = tmp_path / "n1b"
    node1b.mkdir()
    ranks[3]["hash"] = "c" * 64
    write(node1b, [fragment(r, 4, ranks=ranks, nnodes=2) for r in (2, 3)])
    m = by_id(checks.merge(str(node1b), "h2", node_rank=1, nnodes=2, nproc=2, rc=0))
    assert m["validation.multinode"]["status"] == "fail"
    assert "odd rank(s) 3 on host h2" in m["validation.multinode"]["message"]


def test_torchrun_failure_after_all_ranks_ok_quotes_torchrun_output(tmp_path: Path) -> None:
    """All ranks wrote an ok fragment but torchrun exited 1: the failure says what torchrun said.

    Through the command line as the role calls it: one `--torchrun-output=TEXT` argv item, whose
    text may start with '-'.
    """
    write(tmp_path, [fragment(r, 2) for r in range(2)])
    stderr = ("--rdzv noise\nstarting 2 workers\nW1203 torch/distributed/elastic/agent: waiting\n\n"
              "RuntimeError: exit barrier timed out\n")
    files = Path(__file__).resolve().parents[2] / "roles" / "validation" / "files"
    proc = subprocess.run(
        [sys.executable, "-m", "provision_validate", "merge", "--results-dir", str(tmp_path),
         "--host", "gpu01", "--nproc-per-node", "2", "--rc", "1", f"--torchrun-output={stderr}"],
        capture_output=True, text=True, check=False, cwd=files, timeout=60)
    assert proc.returncode == 0, proc.stderr
    c = by_id(json.loads(proc.stdout))["validation.allreduce"]
    assert c["status"] == "fail"
    assert "torchrun exited 1 without a failed rank fragment" in c["message"], c["message"]
    assert "RuntimeError: exit barrier timed out" in c["message"], c["message"]
    assert "--rdzv noise" not in c["message"]  # only the last three lines

    plain = by_id(checks.merge(str(tmp_path), "gpu01", nproc=2, rc=1))["validation.allreduce"]
    assert plain["message"].endswith("without a failed rank fragment"), plain["message"]
