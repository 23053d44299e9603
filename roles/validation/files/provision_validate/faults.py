"""Fault injection - TEST HOOKS ONLY, never set in production.

PROVISION_VALIDATE_FAULT holds one or more faults separated by ';', each ``kind[:k=v[,k=v]]``:

  stall:rank=1[,phase=allreduce|ddp|init]  the rank sleeps forever in that phase (default
                                            allreduce): the watchdog must fail it, naming rank/host
  corrupt_grad:rank=1                       the rank perturbs its gradients after the DDP
                                            all-reduce: parameters diverge across ranks
  corrupt_allreduce:rank=1                  the rank contributes a wrong value to the correctness
                                            all-reduce
  slow_bw[:factor=20]                       every timed all-reduce loop is stretched x factor
                                            (bandwidth under the threshold); add rank=R to limit it
  slow:rank=1[,delay_ms=50]                 the rank sleeps delay_ms per local compute step
                                            (a straggler)
"""

from __future__ import annotations

import os
from typing import Dict

ENV = "PROVISION_VALIDATE_FAULT"
KINDS = ("stall", "corrupt_grad", "corrupt_allreduce", "slow_bw", "slow")

# one fault: {"kind": ..., and its k=v options as given}
Fault = Dict[str, str]


def parse(text: str | None) -> list[Fault]:
    faults = []
    for raw in (text or "").split(";"):
        part = raw.strip()
        if not part:
            continue
        kind, _, rest = part.partition(":")
        kind = kind.strip()
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r} in {ENV} (known: {', '.join(KINDS)})")
        fault = {"kind": kind}
        for kv in rest.split(","):
            if not kv.strip():
                continue
            k, _, v = kv.partition("=")
            fault[k.strip()] = v.strip()
        faults.append(fault)
    return faults


class Faults:
    def __init__(self, rank: int, text: str | None = None) -> None:
        self.rank = rank
        self.faults = parse(os.environ.get(ENV) if text is None else text)

    def get(self, kind: str, phase: str | None = None) -> Fault | None:
        for f in self.faults:
            if f["kind"] != kind:
                continue
            if "rank" in f and int(f["rank"]) != self.rank:
                continue
            if phase is not None and f.get("phase", "allreduce") != phase:
                continue
            return f
        return None

    def describe(self) -> list[Fault]:
        return list(self.faults)
