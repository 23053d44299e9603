"""The real validation program under torchrun with CPU torch (gloo), no lab, no root.

Needs a Python with torch: $PROVISION_TORCH_PYTHON, or /var/tmp/provision-torch-venv (created on
first use with `pip install torch==2.13.0`, which on the CI machine comes from the local wheel
cache). The merge step runs with this test's own interpreter, which has no torch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "roles" / "validation" / "files"
TORCH_VENV = Path("/var/tmp/provision-torch-venv")
TORCH_VERSION = "2.13.0"


def _has_torch(python: str) -> bool:
    try:
        r = subprocess.run([python, "-c", "import torch, torch.distributed"],
                           capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


@pytest.fixture(scope="module")
def torch_python() -> str:
    env = os.environ.get("PROVISION_TORCH_PYTHON")
    if env:
        if not _has_torch(env):
            pytest.fail(f"PROVISION_TORCH_PYTHON={env} cannot import torch")
        return env
    py = TORCH_VENV / "bin" / "python"
    if not (py.exists() and _has_torch(str(py))):
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(TORCH_VENV)], check=True,
                           capture_output=True, timeout=120)
            subprocess.run([str(py), "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}"],
                           check=True, capture_output=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"no torch available for the program tests ({exc})")
    return str(py)


def _thresholds_json(tmp: Path) -> Path:
    """The threshold data as the role ships it to the target: JSON (the target needs no PyYAML)."""
    out = tmp / "thresholds.json"
    data = yaml.safe_load((FILES / "thresholds.yml").read_text(encoding="utf-8"))
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


def run_program(torch_python: str, tmp: Path, nproc: int, *args: str, fault: str = "",
                outer: int = 90) -> tuple[dict[str, Any], float, int]:
    results = tmp / "results"
    env = dict(os.environ, PYTHONPATH=str(FILES), OMP_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PROVISION_VALIDATE_FAULT", None)
    if fault:
        env["PROVISION_VALIDATE_FAULT"] = fault
    cmd = ["timeout", "-k", "5", str(outer), torch_python, "-m", "torch.distributed.run",
           "--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "0",
           "-m", "provision_validate", "run", "--results-dir", str(results),
           "--thresholds", str(_thresholds_json(tmp)), *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False,
                          timeout=outer + 30)
    wall = time.monotonic() - t0
    merged = subprocess.run(
        [sys.executable, "-m", "provision_validate", "merge", "--results-dir", str(results),
         "--host", socket.gethostname(), "--nproc-per-node", str(nproc), "--rc",
         str(proc.returncode), "--timeout", str(outer)],
        env=dict(os.environ, PYTHONPATH=str(FILES), PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True, text=True, check=True)
    node = json.loads(merged.stdout)
    node["_stderr"] = proc.stderr[-3000:]
    return node, wall, proc.returncode


def checks(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in node["checks"]}


SMALL = ("--max-bytes", "1M", "--steps", "12", "--local-steps", "4")


def test_four_ranks_gloo_pass(torch_python: str, tmp_path: Path) -> None:
    # the mechanics of four ranks, not the machine's speed: 4 CPU ranks on 2 cores shared with
    # the lab tests may straggle past the CPU row (the threshold judgements have their own tests)
    lenient = {"allreduce_busbw_gbps": 0, "ddp_scaling_efficiency": 0, "straggler_ratio": 0}
    node, wall, rc = run_program(
        torch_python, tmp_path, 4, "--threshold-overrides", json.dumps(lenient), outer=300
    )
    c = checks(node)
    assert rc == 0, node["_stderr"]
    assert node["status"] == "pass", node["checks"]
    assert node["backend"] == "gloo" and node["world_size"] == 4
    assert c["validation.allreduce"]["status"] == "pass"
    assert c["validation.ddp"]["status"] == "pass", c["validation.ddp"]
    ar = node["allreduce"]
    assert ar["correct"] and ar["sizes"][-1] == 16 << 20
    # busbw = algbw x 2(n-1)/n for every row
    for row in ar["rows"]:
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.5)
        # time_us is rounded to 0.01 us in the row, algbw is computed from the unrounded time
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / row["time_us"] / 1e3,
                                                  rel=1e-4)
        assert row["iters"] >= 3
    s = node["ddp"]["summary"]
    assert s["params_identical"] and s["loss_last"] < s["loss_first"]
    assert len(s["samples_per_s_per_rank"]) == 4 and s["scaling_efficiency"] > 0
    assert node["versions"]["torch"].startswith(TORCH_VERSION)
    assert node["thresholds"]["row"] == "cpu-gloo"
    assert node["elapsed_s"] is None or node["elapsed_s"] >= 0
    print(f"4-rank CPU validation: {wall:.1f} s, busbw {ar['judged_busbw_gbps']:.3f} GB/s")


def test_stalled_rank_fails_within_timeout_naming_rank_and_host(torch_python: str,
                                                                tmp_path: Path) -> None:
    node, wall, rc = run_program(torch_python, tmp_path, 2, *SMALL, "--collective-timeout", "5",
                                 "--init-timeout", "30", fault="stall:rank=1", outer=90)
    assert rc not in (0, 124, 137), rc  # failed, and not by the outer timeout
    assert wall < 90
    ar = checks(node)["validation.allreduce"]
    assert ar["status"] == "fail"
    assert f"rank 1 on host {socket.gethostname()}" in ar["message"], ar["message"]
    assert "hang" in ar["message"]
    assert checks(node)["validation.ddp"]["status"] == "fail"


def test_corrupted_gradients_fail_parameter_equality(torch_python: str, tmp_path: Path) -> None:
    node, _, rc = run_program(torch_python, tmp_path, 2, *SMALL, fault="corrupt_grad:rank=1")
    assert rc == 0, node["_stderr"]
    c = checks(node)
    assert c["validation.allreduce"]["status"] == "pass"
    ddp = c["validation.ddp"]
    assert ddp["status"] == "fail"
    assert "parameters differ across ranks" in ddp["message"]
    assert ddp["actual"]["params_identical"] is False


def test_threshold_override_forces_bandwidth_failure(torch_python: str, tmp_path: Path) -> None:
    node, _, rc = run_program(torch_python, tmp_path, 2, *SMALL, "--threshold-overrides",
                              json.dumps({"allreduce_busbw_gbps": 1000}))
    assert rc == 0, node["_stderr"]
    ar = checks(node)["validation.allreduce"]
    assert ar["status"] == "fail"
    measured = node["allreduce"]["judged_busbw_gbps"]
    assert f"{measured:.2f} GB/s is below the threshold 1000.00 GB/s" in ar["message"]
    # the failed measurement was repeated once (default) before it was declared
    assert len(ar["actual"]["attempts"]) == 2
    assert node["thresholds"]["overridden"] == ["allreduce_busbw_gbps"]
    assert checks(node)["validation.ddp"]["status"] == "pass"


def test_straggler_and_slow_bandwidth_faults(torch_python: str, tmp_path: Path) -> None:
    node, _, rc = run_program(torch_python, tmp_path, 2, *SMALL, "--bw-retries", "0",
                              fault="slow:rank=1,delay_ms=150;slow_bw:factor=500")
    assert rc == 0, node["_stderr"]
    c = checks(node)
    assert c["validation.ddp"]["status"] == "fail"
    assert f"straggler: rank 1 on host {socket.gethostname()}" in c["validation.ddp"]["message"]
    assert "rank 0" not in c["validation.ddp"]["message"]
    assert c["validation.allreduce"]["status"] == "fail"
    assert "below the threshold 0.05 GB/s" in c["validation.allreduce"]["message"]


def test_wrong_all_reduce_sums_fail_the_correctness_check(torch_python: str,
                                                         tmp_path: Path) -> None:
    node, _, rc = run_program(torch_python, tmp_path, 2, *SMALL, fault="corrupt_allreduce:rank=1")
    assert rc == 0, node["_stderr"]
    ar = checks(node)["validation.allreduce"]
    assert ar["status"] == "fail"
    assert "elements differ from the expected sum" in ar["message"]
    # one corrupted element per message size
    assert node["allreduce"]["wrong"] == len(node["allreduce"]["sizes"])
