"""Command line of provision_validate.

  torchrun --standalone --nproc-per-node N -m provision_validate run --results-dir DIR [...]
  python -m provision_validate merge --results-dir DIR --out node.json [--nnodes ...]
  python -m provision_validate lookup --thresholds thresholds.yml --model "NVIDIA H100 80GB HBM3"
      --topology nvswitch --gpus 8 --backend nccl

Run with PYTHONPATH pointing at the directory that holds provision_validate/. Environment:
PROVISION_VALIDATE_BACKEND (auto|nccl|gloo) overrides --backend's default;
PROVISION_VALIDATE_FAULT injects faults (test hooks, see faults.py).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Sequence

from . import bw, checks, thresholds
from .watchdog import block_signals


def _opt_int(text: str | None) -> int | None:
    return None if text in (None, "", "auto") else int(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="provision_validate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="one rank of the validation (under torchrun)")
    r.add_argument("--results-dir", required=True, help="where rank-<R>.json fragments go")
    r.add_argument("--backend", default=os.environ.get("PROVISION_VALIDATE_BACKEND", "auto"),
                   choices=("auto", "nccl", "gloo"))
    r.add_argument("--thresholds", help="threshold data, JSON or YAML")
    r.add_argument("--threshold-overrides", default=os.environ.get(
        "PROVISION_VALIDATE_THRESHOLDS", ""), help="JSON object: allreduce_busbw_gbps, "
        "ddp_scaling_efficiency, straggler_ratio")
    r.add_argument("--gpu-model", default=None, help="GPU name for the threshold lookup "
                   "(default: torch.cuda / nvidia-smi)")
    r.add_argument("--gpu-count", type=_opt_int, default=None)
    r.add_argument("--gpu-names", default="", help="JSON list of GPU names to report when "
                   "neither torch nor nvidia-smi can name them (the role passes its GPU facts)")
    r.add_argument("--topology", default="auto",
                   choices=("auto", "nvswitch", "nvlink", "pcie", "none"))
    r.add_argument("--topology-facts", default="", help="JSON topology summary from the GPU "
                   "facts (nvidia-smi topo -m), recorded in the result")
    r.add_argument("--init-timeout", type=float, default=60.0,
                   help="seconds for the process-group rendezvous")
    r.add_argument("--collective-timeout", type=float, default=60.0,
                   help="seconds any one collective (or DDP step) may take")
    r.add_argument("--min-bytes", type=bw.parse_size, default=None)
    r.add_argument("--max-bytes", type=bw.parse_size, default=None)
    r.add_argument("--step-factor", type=int, default=None)
    r.add_argument("--judge-min-bytes", type=bw.parse_size, default=None,
                   help="busbw is judged on sizes >= this (default max-bytes/4)")
    r.add_argument("--warmup", type=int, default=None)
    r.add_argument("--iters", type=int, default=None)
    r.add_argument("--bw-retries", type=int, default=None,
                   help="repeat a bandwidth measurement under the threshold this often "
                   "(default from the threshold data: 1)")
    r.add_argument("--steps", type=int, default=None, help="DDP training steps")
    r.add_argument("--local-steps", type=int, default=None)
    r.add_argument("--batch", type=int, default=None, help="samples per rank per step")
    r.add_argument("--width", type=int, default=None)
    r.add_argument("--image", type=int, default=None)
    r.add_argument("--hidden", type=int, default=None)
    r.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    r.add_argument("--seed", type=int, default=42)
    r.add_argument("--no-baseline", dest="baseline", action="store_false",
                   help="skip the single-process baseline (no scaling efficiency)")

    m = sub.add_parser("merge", help="merge a node's fragments into the node result")
    m.add_argument("--results-dir", required=True)
    m.add_argument("--out", help="write the node JSON here (default stdout)")
    m.add_argument("--host", default=socket.gethostname())
    m.add_argument("--node-rank", type=int, default=0)
    m.add_argument("--nnodes", type=int, default=1)
    m.add_argument("--nproc-per-node", type=int, default=1)
    m.add_argument("--rc", type=int, default=None, help="torchrun's exit status")
    m.add_argument("--timeout", type=float, default=None, help="the outer timeout used")
    m.add_argument("--elapsed", type=float, default=None)
    m.add_argument("--torchrun-output", default="",
                   help="tail of torchrun's stderr, quoted when torchrun fails but no rank did")

    k = sub.add_parser("lookup", help="print the thresholds that apply")
    k.add_argument("--thresholds", required=True)
    k.add_argument("--model", default=None)
    k.add_argument("--topology", default="none")
    k.add_argument("--gpus", type=int, default=0)
    k.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    k.add_argument("--overrides", default="")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "run":
        block_signals()  # before torch starts any thread
        from . import worker  # noqa: PLC0415 - imports torch: only `run` needs it, signals blocked

        rc = worker.run(args)
        # The rank's result fragment is written and the process group destroyed (or the failure
        # recorded). Leave without running C++ static destructors: a gloo/c10d thread still
        # joinable at interpreter shutdown aborts the process ("terminate called without an
        # active exception", SIGABRT), which torchrun reports as a failed rank although every
        # rank passed. Seen on a loaded 2-core machine, rank 0, after the final barrier.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    if args.cmd == "merge":
        res = checks.merge(args.results_dir, args.host, node_rank=args.node_rank,
                           nnodes=args.nnodes, nproc=args.nproc_per_node, rc=args.rc,
                           timeout_s=args.timeout, elapsed_s=args.elapsed,
                           torchrun_output=args.torchrun_output)
        text = json.dumps(res, indent=1, sort_keys=True, default=str)
        if args.out:
            Path(args.out).write_text(text + "\n", encoding="utf-8")
        else:
            print(text)
        return 0
    data = thresholds.load(args.thresholds)
    ov = json.loads(args.overrides) if args.overrides else {}
    print(json.dumps(thresholds.lookup(data, args.model, args.topology, args.gpus,
                                       args.backend, ov), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
