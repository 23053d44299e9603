"""Bandwidth arithmetic with nccl-tests' definitions (NVIDIA/nccl-tests doc/PERFORMANCE.md).

algbw = S / t (GB/s, 1 GB = 1e9 bytes); busbw = algbw * factor, where the all-reduce factor is
2(n-1)/n. busbw is comparable to the per-rank hardware bottleneck (NVLink, PCIe, NIC) for ring and
tree algorithms; with NVLS/CollNet it can exceed the line rate.
"""

from __future__ import annotations

from typing import Any, Callable

GB = 1e9

BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def bus_factor(nranks: int, collective: str = "all_reduce") -> float:
    """nccl-tests' bus bandwidth factor for ``collective`` over ``nranks`` ranks."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks!r}")
    return BUS_FACTORS[collective](nranks)


def algbw_gbps(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s) for ``size_bytes`` moved in ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds!r}")
    return size_bytes / seconds / GB


def busbw_gbps(size_bytes: float, seconds: float, nranks: int,
               collective: str = "all_reduce") -> float:
    """Bus bandwidth in GB/s: algbw times the collective's bus factor."""
    return algbw_gbps(size_bytes, seconds) * bus_factor(nranks, collective)


def row(size_bytes: int, time_us: float, nranks: int) -> dict[str, Any]:
    """One sweep row as nccl-tests prints it: size (B), time (us), algbw and busbw (GB/s)."""
    t = time_us / 1e6
    return {
        "size_bytes": int(size_bytes),
        "time_us": round(time_us, 2),
        "algbw_gbps": algbw_gbps(size_bytes, t),
        "busbw_gbps": busbw_gbps(size_bytes, t, nranks),
    }


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """Message sizes from min_bytes to max_bytes (inclusive), multiplying by ``factor``."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"bad sweep {min_bytes!r}..{max_bytes!r} x{factor!r}")
    sizes: list[int] = []
    s = min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes)
    return sizes


def judged_busbw(rows: list[dict[str, Any]], judge_min_bytes: int) -> float | None:
    """The busbw compared with the threshold: the best busbw among sizes >= judge_min_bytes
    (small messages are latency-bound and say nothing about the links)."""
    big = [r["busbw_gbps"] for r in rows if r["size_bytes"] >= judge_min_bytes]
    return max(big) if big else None


def parse_size(text: str | int) -> int:
    """'64M' -> 67108864; binary suffixes K/M/G as nccl-tests uses them."""
    if isinstance(text, int):
        return text
    t = str(text).strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)
