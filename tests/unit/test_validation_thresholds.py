"""Threshold data and lookup by (GPU model, topology, GPU count, backend)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "roles" / "validation" / "files"))

from provision_validate import thresholds  # noqa: E402

# The one thresholds file: read where it is used (the validation role copies it to the hosts)
DATA_FILE = REPO / "roles" / "validation" / "files" / "thresholds.yml"


@pytest.fixture(scope="module")
def data() -> dict:
    return yaml.safe_load(DATA_FILE.read_text(encoding="utf-8"))


def test_there_is_one_thresholds_file() -> None:
    assert sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("**/thresholds.yml")
                  if ".venv" not in p.parts and "collections" not in p.parts) == [
        "roles/validation/files/thresholds.yml"]


def test_every_row_has_source_confidence_and_numbers(data: dict) -> None:
    ids = set()
    for row in data["rows"]:
        assert row["id"] not in ids
        ids.add(row["id"])
        assert len(str(row.get("source", ""))) > 20, row["id"]
        assert row["confidence"] in ("M", "T", "S", "D", "U"), row["id"]
        assert row["backend"] in ("nccl", "gloo")
        if row["backend"] == "nccl":
            assert row["topology"] in ("nvswitch", "nvlink", "pcie")
            assert row["models"] and row["gpus"]
        assert row["allreduce_busbw_gbps"] > 0
        assert 0 < row["straggler_ratio"] < 1
        if row["confidence"] == "D":
            assert row.get("derivation"), f"{row['id']}: derived rows show their arithmetic"


@pytest.mark.parametrize("case", [
    ("NVIDIA H100 80GB HBM3", "nvswitch", 8, "h100-sxm-8", 460, 0.90),
    ("NVIDIA H100 SXM5 80GB", "nvswitch", 8, "h100-sxm-8", 460, 0.90),
    ("NVIDIA H200", "nvswitch", 8, "h200-sxm-8", 431, 0.90),
    ("NVIDIA A100-SXM4-80GB", "nvswitch", 8, "a100-sxm-8", 228, 0.90),
    ("NVIDIA A100-SXM4-40GB", "nvswitch", 4, "a100-sxm-partial", 225, 0.90),
    ("NVIDIA H100 80GB HBM3", "nvswitch", 4, "h100-h200-sxm-partial", 340, 0.90),
    ("NVIDIA GeForce RTX 4090", "pcie", 4, "pcie-gen4-geforce", 6, 0.80),
    ("NVIDIA A100 80GB PCIe", "pcie", 4, "pcie-gen4-datacenter", 18, 0.80),
    ("NVIDIA L40S", "pcie", 8, "pcie-gen5-datacenter", 37, 0.80),
    ("NVIDIA L4", "pcie", 2, "pcie-gen4-datacenter", 18, 0.80),
    ("Tesla T4", "pcie", 4, "pcie-gen3", 9, 0.80),
    ("NVIDIA H100 PCIe", "nvlink", 2, "h100-pcie-nvlink-2", 95, 0.90),
])
def test_lookup_by_model_topology_count(data, case) -> None:
    model, topo, count, row, busbw, eff = case
    got = thresholds.lookup(data, model, topo, count, "nccl")
    assert got["row"] == row
    assert got["allreduce_busbw_gbps"] == busbw
    assert got["ddp_scaling_efficiency"] == eff
    assert got["straggler_ratio"] == 0.7
    assert got["source"] and got["overridden"] == []


def test_count_and_topology_must_match(data: dict) -> None:
    # 8x H100 without NVSwitch is not the 460 GB/s board
    got = thresholds.lookup(data, "NVIDIA H100 80GB HBM3", "pcie", 8, "nccl")
    assert got["row"] is None and got["allreduce_busbw_gbps"] is None
    assert got["ddp_scaling_efficiency"] == 0.80  # the PCIe default still applies
    assert "no threshold row" in got["note"]
    # a single GPU has no all-reduce row
    assert thresholds.lookup(data, "Tesla T4", "pcie", 1, "nccl")["row"] is None


def test_gloo_uses_the_cpu_row_whatever_the_gpus(data: dict) -> None:
    got = thresholds.lookup(data, "NVIDIA H100 80GB HBM3", "nvswitch", 8, "gloo")
    assert got["row"] == "cpu-gloo"
    assert got["allreduce_busbw_gbps"] == 0.05
    assert got["note"] == thresholds.CPU_NOTE == ("backend gloo on CPU: GPU thresholds not "
                                                  "applicable")


def test_overrides_replace_values_and_are_recorded(data: dict) -> None:
    got = thresholds.lookup(data, "NVIDIA H100 80GB HBM3", "nvswitch", 8, "nccl",
                            {"allreduce_busbw_gbps": 470, "straggler_ratio": "0.8"})
    assert got["allreduce_busbw_gbps"] == 470.0 and got["straggler_ratio"] == 0.8
    assert got["ddp_scaling_efficiency"] == 0.90
    assert sorted(got["overridden"]) == ["allreduce_busbw_gbps", "straggler_ratio"]
    assert got["source"].startswith("override")
    with pytest.raises(ValueError, match="unknown threshold override"):
        thresholds.lookup(data, "x", "pcie", 2, "nccl", {"busbw": 1})


def test_load_reads_json_and_yaml(tmp_path: Path, data: dict) -> None:
    j = tmp_path / "t.json"
    j.write_text(json.dumps(data), encoding="utf-8")
    assert thresholds.load(str(j)) == data
    assert thresholds.load(str(DATA_FILE)) == data


def test_multinode_nccl_is_not_judged_by_the_node_row(data: dict) -> None:
    got = thresholds.lookup(data, "NVIDIA H100 80GB HBM3", "network", 8, "nccl")
    assert got["row"] is None and got["allreduce_busbw_gbps"] is None
    assert got["ddp_scaling_efficiency"] is None
    assert "bound by the NICs" in got["note"]
    forced = thresholds.lookup(data, "NVIDIA H100 80GB HBM3", "network", 8, "nccl",
                               {"allreduce_busbw_gbps": 340})
    assert forced["allreduce_busbw_gbps"] == 340.0
