"""bench/gpu.sh in its dry mode (no GPU): the commands are printed and the parsing and the P5/P6
summary run on the recorded samples; and the nccl-tests parser on its own."""

# ruff: noqa: E501  (recorded outputs are kept verbatim)
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import gpu_parse

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "bench" / "samples"


def test_gpu_sh_dry_run(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    out = tmp_path / "gpu"
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu.sh"), "--dry-run", "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch.distributed.run --standalone --nproc-per-node 8" in proc.stderr
    assert "all_reduce_perf -b 1M -e 4G -f 2 -g 8" in proc.stderr
    result = json.loads((out / "gpu-result.json").read_text())
    assert result["mode"].startswith("dry-run")
    assert result["gpu_facts"]["gpu_count"] == 8
    assert result["gpu_facts"]["gpu_model"] == "NVIDIA H100 80GB HBM3"
    for key in ("P5", "P6", "ddp_step_s"):
        assert {"value", "goal", "unit", "met", "runs"} <= set(result[key]), key
    assert result["P5"]["goal"] == 0.95 and result["P5"]["measured"]
    assert result["P5"]["sizes_compared"] == [4194304, 16777216]
    assert 0.5 < result["P5"]["value"] < 1.5
    assert result["P6"]["goal"] == 3.0 and result["P6"]["value"] > 0
    assert result["ddp_step_s"]["value"] > 0
    assert "16777216" in result["busbw_gbps_by_size"]
    assert "P5" in proc.stdout and "P6" in proc.stdout


def test_nccl_tests_rows() -> None:
    rows = gpu_parse.nccl_tests_rows((SAMPLES / "all_reduce_perf-synthetic.txt").read_text())
    assert [r["size_bytes"] for r in rows] == [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]
    assert rows[-1]["oop_busbw_gbps"] == 1.11 and rows[-1]["busbw_gbps"] == 1.11
    # an older layout without the redop and root columns reads the same
    old = "   134217728      16777216   float    3298.6   20.34   20.34  0e+00    3070.3   21.86   21.86  0e+00"
    (row,) = gpu_parse.nccl_tests_rows(old)
    assert row["size_bytes"] == 134217728 and row["busbw_gbps"] == 21.86


def test_p5_one_gpu_and_no_nccl_tests(tmp_path: Path) -> None:
    run = tmp_path / "run-1"
    run.mkdir()
    node = json.loads((SAMPLES / "validation-node-lab-gloo.json").read_text())
    node["world_size"] = 1
    (run / "validation.json").write_text(json.dumps(node))
    (run / "wall_s").write_text("50.0\n")
    result = gpu_parse.summarize(tmp_path)
    assert result["P5"]["value"] is None and "nccl-tests" in result["P5"]["reason"]
    (run / "nccl-tests.txt").write_text((SAMPLES / "all_reduce_perf-synthetic.txt").read_text())
    result = gpu_parse.summarize(tmp_path)
    assert result["P5"]["value"] is None and "one GPU" in result["P5"]["reason"]
    assert result["P6"]["value"] == pytest.approx(50 / 60, abs=1e-3)
    assert "1 GPU(s)" in result["P6"]["note"]
