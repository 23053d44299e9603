"""Bandwidth arithmetic of provision_validate reproduces published nccl-tests all_reduce_perf rows.

Each row is size (B), time (us), algbw, busbw as all_reduce_perf printed it, with the number of
ranks the run had. nccl-tests computes the bandwidths from the unrounded time and prints the time
rounded to 2 decimals, so a recomputed value may differ from the printed one by the printed
value's rounding (0.005) plus the effect of the time's rounding (value x 0.005 / time_us).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "roles" / "validation" / "files"))

from provision_validate import bw

# (source, nranks, size_bytes, time_us, algbw, busbw)
ROWS = [
    # an nccl-tests all_reduce_perf row (NVIDIA/nccl-tests:src/util.cu column layout; out-of-place
    # and in-place of one row); 2 ranks
    ("nccl-tests row", 2, 1073741824, 9306.7, 115.37, 115.37),
    ("nccl-tests row in-place", 2, 1073741824, 9291.5, 115.56, 115.56),
    # NVIDIA/dgx-spark-playbooks PR #103 (2 nodes x 1 GB10)
    ("NVIDIA/dgx-spark-playbooks#103", 2, 65536, 67.93, 0.96, 0.96),
    # kvcache-ai/Mooncake PR #3484 (8 ranks: factor 2*7/8 = 1.75)
    ("kvcache-ai/Mooncake#3484", 8, 8388608, 81.16, 103.36, 180.88),
    ("kvcache-ai/Mooncake#3484", 8, 16777216, 121.33, 138.28, 242.00),
    ("kvcache-ai/Mooncake#3484", 8, 33554432, 195.40, 171.72, 300.51),
    # deepseek-ai/DeepEP issue #303 (8x H20, small sizes)
    ("deepseek-ai/DeepEP#303", 8, 4096, 16.69, 0.25, 0.43),
]


def _tol(value: float, time_us: float) -> float:
    return 0.005 + value * 0.005 / time_us + 1e-9


@pytest.mark.parametrize("case", ROWS, ids=[f"{r[0]}:{r[2]}" for r in ROWS])
def test_published_rows(case) -> None:
    source, n, size, time_us, algbw, busbw = case
    row = bw.row(size, time_us, n)
    assert abs(row["algbw_gbps"] - algbw) <= _tol(algbw, time_us), (source, row)
    assert abs(row["busbw_gbps"] - busbw) <= _tol(busbw, time_us), (source, row)


def test_most_rows_match_to_two_decimals_exactly() -> None:
    exact = sum(round(bw.row(s, t, n)["busbw_gbps"], 2) == b for _, n, s, t, _, b in ROWS)
    assert exact >= len(ROWS) - 1


def test_bus_factors() -> None:
    assert bw.bus_factor(2) == 1.0
    assert bw.bus_factor(8) == 1.75
    assert bw.bus_factor(1) == 0.0  # one rank moves nothing over a bus
    assert bw.bus_factor(4, "all_gather") == 0.75
    assert bw.bus_factor(16, "broadcast") == 1.0
    with pytest.raises(ValueError):
        bw.bus_factor(0)


def test_h100_nvls_anchor_is_consistent() -> None:
    # nccl-tests #212: 8x H100 NVLS, algbw ~275 GB/s <-> busbw ~480 GB/s
    t = 8 * (1 << 30) / (275e9)
    assert round(bw.busbw_gbps(8 * (1 << 30), t, 8)) == 481


def test_time_must_be_positive() -> None:
    with pytest.raises(ValueError):
        bw.algbw_gbps(1024, 0.0)


def test_sweep_sizes_and_parse() -> None:
    assert bw.sweep_sizes(1 << 20, 16 << 20, 4) == [1 << 20, 4 << 20, 16 << 20]
    assert bw.sweep_sizes(1 << 20, 6 << 20, 2) == [1 << 20, 2 << 20, 4 << 20, 6 << 20]
    assert bw.sweep_sizes(1 << 20, 4 << 30, 2)[-1] == 4 << 30
    assert bw.parse_size("64M") == 64 << 20
    assert bw.parse_size("4G") == 4 << 30
    assert bw.parse_size("512K") == 512 << 10
    assert bw.parse_size("1000") == 1000
    with pytest.raises(ValueError):
        bw.sweep_sizes(0, 10)


def test_judged_busbw_ignores_small_messages() -> None:
    rows = [{"size_bytes": 1 << 20, "busbw_gbps": 99.0},
            {"size_bytes": 1 << 30, "busbw_gbps": 40.0},
            {"size_bytes": 4 << 30, "busbw_gbps": 45.0}]
    assert bw.judged_busbw(rows, 1 << 30) == 45.0
    assert bw.judged_busbw(rows, 8 << 30) is None
