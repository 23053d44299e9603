"""Merge one node's rank fragments into the node result and evaluate the checks (no torch).

Check ids: validation.allreduce, validation.ddp, validation.multinode; each check is
``{id, status, expected, actual, message, remediation}`` with status pass/fail/skip
(docs/architecture.md, "Checks and facts reported by roles").
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Dict

REMEDIATION = {
    "validation.allreduce": (
        "check the interconnect: nvidia-smi topo -m, nvidia-smi nvlink -s, fabric manager "
        "running on NVSwitch systems, PCIe link width/speed (lspci -vv), NCCL_DEBUG=INFO for the "
        "transport; rerun by hand: torchrun --nproc-per-node N -m provision_validate run"),
    "validation.ddp": (
        "look at the named rank's GPU (nvidia-smi -q: clocks, throttle reasons, ECC/XID in "
        "dmesg) and host load; parameter divergence means a rank computes wrong results "
        "(bad GPU/memory) - drain the node"),
    "validation.multinode": (
        "check the network between the hosts: gpu_stack_validation_network_interface "
        "(NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME), firewall on validation_master_port, "
        "the first host's address; NCCL_DEBUG=INFO shows the transport"),
}

# A rank fragment, a check record, a node result: JSON objects
Json = Dict[str, Any]


def load_fragments(results_dir: str) -> list[Json]:
    frags: list[Json] = []
    for path in sorted(Path(results_dir).glob("rank-*.json")):
        try:
            frags.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            frags.append({"rank": _rank_from_path(path), "status": "error",
                          "error": f"unreadable fragment {path}: {exc}"})
    return sorted(frags, key=lambda f: int(f.get("rank", -1)))


def _rank_from_path(path: Path) -> int:
    try:
        return int(path.name[len("rank-"):-len(".json")])
    except ValueError:
        return -1


def _check(cid: str, status: str, expected: object, actual: object, message: str) -> Json:
    return {"id": cid, "status": status, "expected": expected, "actual": actual,
            "message": message, "remediation": "" if status == "pass" else REMEDIATION[cid]}


def _fmt(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


SECONDARY = ("connection closed by peer", "connection reset by peer", "terminated by signal")


def failure_summary(frags: list[Json], missing: list[int], host: str, rc: int | None,
                    timeout_s: float | None) -> tuple[list[str], str | None]:
    """Messages for ranks that did not finish (the cause first, then ranks that only stopped
    because of it), and the phase where it went wrong."""
    primary: list[str] = []
    secondary: list[Json] = []
    culprits: dict[int, tuple[str, str | None]] = {}
    phase: str | None = None
    for f in frags:
        if f.get("status") == "ok":
            continue
        msg: str = (f.get("error")
                    or f"rank {f.get('rank')} on host {f.get('host')}: {f.get('status')}")
        if any(x in msg.lower() for x in SECONDARY):
            secondary.append(f)
        else:
            primary.append(msg)
            phase = phase or f.get("phase")
        for r in f.get("lagging") or []:
            p = (f.get("peers") or {}).get(str(r)) or {}
            culprits[int(r)] = (p.get("host", "?"), p.get("phase", "never started"))
        if f.get("status") == "timeout" and "stalled" in msg:
            culprits[int(f["rank"])] = (f.get("host", "?"), f.get("phase"))
    if phase is None and secondary:
        phase = secondary[0].get("phase")
    killed = (f" by the outer timeout of {timeout_s:.0f} s"
              if timeout_s and rc in (124, 137) else "")
    for r in missing:
        primary.append(f"rank {r} on host {host}: no result (process killed{killed}; "
                       f"torchrun exit {rc})")
    if secondary:
        stopped = ", ".join(f"{f.get('rank')} on host {f.get('host')}" for f in secondary)
        line = (f"rank(s) {stopped} stopped after the failure (terminated by torchrun or peer "
                "connection closed)")
        if not primary:
            line = "; ".join(f.get("error") or "" for f in secondary)
        primary.append(line)
    if culprits:
        primary.insert(0, "hang: " + "; ".join(
            f"rank {r} on host {h} stopped progressing in phase '{ph}'"
            for r, (h, ph) in sorted(culprits.items())))
    return primary, phase


def _group(phase: str | None) -> str:
    if not phase:
        return "init"
    if phase.startswith("ddp") or phase in ("done",):
        return "ddp"
    if phase.startswith("allreduce") or phase == "initialised":
        return "allreduce"
    return "init"


def evaluate_allreduce(ar: Json | None, thr: Json, world: int, problems: list[str],
                       phase_group: str) -> Json:
    cid = "validation.allreduce"
    limit = (thr or {}).get("allreduce_busbw_gbps")
    expected = f">= {_fmt(limit)} GB/s busbw" if limit is not None else "correct sums"
    if ar is None or (problems and phase_group in ("init", "allreduce")):
        why = "; ".join(problems) or "no all-reduce result"
        return _check(cid, "fail", expected, None, "all-reduce did not complete: " + why)
    judged = ar.get("judged_busbw_gbps")
    actual = {"busbw_gbps": judged, "attempts": [a["judged_busbw_gbps"]
                                                 for a in ar.get("attempts", [])],
              "wrong": ar.get("wrong"), "max_bytes": max(ar.get("sizes") or [0]),
              "world_size": world}
    if not ar.get("correct"):
        return _check(cid, "fail", expected, actual,
                      f"all-reduce returned wrong values: {int(ar.get('wrong', 0))} elements "
                      "differ from the expected sum")
    if world <= 1:
        return _check(cid, "pass", expected, actual,
                      "world size 1: sums correct; bus bandwidth is not defined for one rank "
                      "(2(n-1)/n = 0)")
    if limit is None:
        return _check(cid, "pass", expected, actual,
                      f"sums correct; busbw {_fmt(judged)} GB/s reported, not judged "
                      f"({thr.get('note') or 'no threshold'})")
    n_att = len(ar.get("attempts", []))
    if judged is not None and judged >= limit:
        on_attempt = "" if n_att == 1 else f", on attempt {n_att}"
        return _check(cid, "pass", expected, actual,
                      f"busbw {_fmt(judged)} GB/s >= {_fmt(limit)} GB/s "
                      f"({thr.get('row') or 'override'}){on_attempt}")
    source = thr.get("source") or thr.get("row")
    plural = "" if n_att == 1 else "s"
    measured = ", ".join(_fmt(x) for x in actual["attempts"])
    return _check(cid, "fail", expected, actual,
                  f"all-reduce busbw {_fmt(judged)} GB/s is below the threshold {_fmt(limit)} "
                  f"GB/s (measured vs expected; {source}; {n_att} attempt{plural}: {measured})")


def summarize_ddp(dd: Json) -> Json:
    per = [p for p in dd.get("per_rank") or [] if p]
    hashes = sorted({p["hash"] for p in per})
    local = [p["local_samples_per_s"] for p in per]
    steps = [p["local_step_s"] for p in per]
    best = max(local) if local else None
    single = next((p["single_samples_per_s"] for p in per if p.get("single_samples_per_s")),
                  None)
    world_sps = sum(p["samples_per_s"] for p in per)
    # one rank has nothing to scale against (its "efficiency" would only be baseline noise)
    eff = world_sps / (len(per) * single) if single and len(per) > 1 else None
    return {
        "world_size": len(per),
        "samples_per_s_per_rank": {str(p["rank"]): round(p["samples_per_s"], 2) for p in per},
        "local_samples_per_s_per_rank": {str(p["rank"]): round(p["local_samples_per_s"], 2)
                                         for p in per},
        "world_samples_per_s": round(world_sps, 2),
        "single_samples_per_s": None if single is None else round(single, 2),
        "scaling_efficiency": None if eff is None else round(eff, 4),
        "step_time_spread": round(max(steps) / statistics.median(steps), 4) if steps else None,
        "rank_perf_ratio": {str(p["rank"]): round(p["local_samples_per_s"] / best, 4)
                            for p in per} if best else {},
        "params_identical": len(hashes) == 1,
        "param_hashes": {str(p["rank"]): p["hash"][:16] for p in per},
        "loss_first": per[0]["loss_first_avg"] if per else None,
        "loss_last": per[0]["loss_last_avg"] if per else None,
        "loss_fell_on_all_ranks": all(p["loss_last_avg"] < p["loss_first_avg"] for p in per),
        "hosts": {str(p["rank"]): p["host"] for p in per},
    }


def evaluate_ddp(dd: Json | None, thr: Json, problems: list[str], phase_group: str) -> Json:
    cid = "validation.ddp"
    ratio = (thr or {}).get("straggler_ratio") or 0.7
    eff_min = (thr or {}).get("ddp_scaling_efficiency")
    expected = {"loss": "falls", "params": "bit-identical on all ranks",
                "straggler_ratio": ratio, "scaling_efficiency": eff_min}
    if dd is None or problems:
        why = "; ".join(problems) or "no DDP result"
        what = "did not complete" if phase_group == "ddp" else "not completed"
        return _check(cid, "fail", expected, None, f"DDP job {what}: {why}")
    s = summarize_ddp(dd)
    actual = {k: s[k] for k in ("loss_first", "loss_last", "params_identical",
                                "scaling_efficiency", "step_time_spread",
                                "samples_per_s_per_rank", "local_samples_per_s_per_rank")}
    actual["min_rank_perf_ratio"] = min(s["rank_perf_ratio"].values()) \
        if s["rank_perf_ratio"] else None
    bad: list[str] = []
    if not s["loss_fell_on_all_ranks"]:
        bad.append(f"loss did not fall ({_fmt(s['loss_first'], 4)} -> "
                   f"{_fmt(s['loss_last'], 4)})")
    if not s["params_identical"]:
        groups: dict[str, list[int]] = {}
        for r, h in s["param_hashes"].items():
            groups.setdefault(h, []).append(int(r))
        odd = sorted(groups.values(), key=len)[0]
        odd_ranks = ", ".join(f"{r} on host {s['hosts'].get(str(r), '?')}" for r in sorted(odd))
        bad.append(f"parameters differ across ranks after {int(dd.get('steps', 0))} steps "
                   f"({len(groups)} distinct hashes; odd rank(s) {odd_ranks})")
    for r, q in sorted(s["rank_perf_ratio"].items(), key=lambda x: int(x[0])):
        if q < ratio:
            sps = s["local_samples_per_s_per_rank"][r]
            bad.append(f"straggler: rank {r} on host {s['hosts'].get(r, '?')} runs {sps:.1f} "
                       f"samples/s = {q:.2f} x the best rank (< {ratio:.2f})")
    eff = s["scaling_efficiency"]
    if eff_min is not None and eff is not None and s["world_size"] > 1 and eff < eff_min:
        bad.append(f"scaling efficiency {eff:.3f} < {eff_min:.2f} "
                   f"({s['world_samples_per_s']:.1f} samples/s on {s['world_size']} ranks vs "
                   f"{s['single_samples_per_s']:.1f} on one)")
    if bad:
        return _check(cid, "fail", expected, actual, "; ".join(bad))
    return _check(cid, "pass", expected, actual,
                  f"loss {_fmt(s['loss_first'], 3)} -> {_fmt(s['loss_last'], 3)}, parameters "
                  f"identical on {s['world_size']} ranks, scaling efficiency {_fmt(eff, 3)}, "
                  f"slowest rank {_fmt(actual['min_rank_perf_ratio'], 3)} x best, step-time "
                  f"spread {_fmt(s['step_time_spread'], 3)}")


def merge(results_dir: str, host: str, *, node_rank: int = 0, nnodes: int = 1,
          nproc: int = 1, rc: int | None = None, timeout_s: float | None = None,
          elapsed_s: float | None = None, torchrun_output: str = "") -> Json:
    """The node result: fragments of this node's ranks, merged, with the three checks.

    torchrun_output: the tail of torchrun's stderr, quoted when torchrun failed but no rank did.
    """
    frags = load_fragments(results_dir)
    expected = list(range(node_rank * nproc, node_rank * nproc + nproc))
    have = {int(f.get("rank", -1)) for f in frags}
    missing = [r for r in expected if r not in have]
    ok = [f for f in frags if f.get("status") == "ok"]
    ref: Json = ok[0] if ok else next((f for f in frags if f.get("environment")), {})
    problems, phase = failure_summary(frags, missing, host, rc, timeout_s)
    group = _group(phase) if problems else "done"
    if problems and rc == 0 and not missing and all(f.get("status") == "ok" for f in frags):
        problems = []
    if rc not in (0, None) and not problems:
        last = [ln.strip() for ln in torchrun_output.splitlines() if ln.strip()][-3:]
        quoted = "; its last output: " + " / ".join(last) if last else ""
        problems = [f"torchrun exited {rc} without a failed rank fragment{quoted}"]
        group = "init"
    world = int(ref.get("world_size") or nnodes * nproc)
    thr = ref.get("thresholds") or {}
    ar = next((f["allreduce"] for f in frags if f.get("allreduce")), None)
    dd = next((f["ddp"] for f in frags if f.get("ddp")), None)
    checks = [evaluate_allreduce(ar, thr, world, problems, group),
              evaluate_ddp(dd, thr, problems, group)]
    if nnodes > 1:
        failed = [c for c in checks if c["status"] == "fail"]
        expected_m = {"nnodes": nnodes, "world_size": nnodes * nproc}
        actual_m = {"nnodes": ref.get("nnodes"), "world_size": world,
                    "busbw_gbps": (ar or {}).get("judged_busbw_gbps")}
        if failed or world != nnodes * nproc:
            why = ("; ".join(c["message"] for c in failed)
                   or f"world size {world} != {nnodes * nproc}")
            checks.append(_check("validation.multinode", "fail", expected_m, actual_m,
                                 f"multi-node run (node {node_rank} of {nnodes}) failed: {why}"))
        else:
            checks.append(_check("validation.multinode", "pass", expected_m, actual_m,
                                 f"{nnodes} nodes x {nproc} ranks: all-reduce and DDP passed "
                                 f"across the network (busbw {_fmt(actual_m['busbw_gbps'])} "
                                 "GB/s)"))
    else:
        checks.append(_check("validation.multinode", "skip", None, None,
                             "single node (1 host in the play)"))
    env = ref.get("environment") or {}
    return {
        "program": "provision_validate", "version": ref.get("version"),
        "host": host, "node_rank": node_rank, "nnodes": nnodes, "nproc_per_node": nproc,
        "world_size": world, "backend": ref.get("backend"),
        "status": "fail" if any(c["status"] == "fail" for c in checks) else "pass",
        "torchrun_rc": rc, "timeout_s": timeout_s, "elapsed_s": elapsed_s,
        "versions": {k: env.get(k) for k in ("torch", "torch_cuda", "nccl", "cudnn", "python")},
        "gpu_names": env.get("gpu_names"), "topology": env.get("topology"),
        "nccl_env": env.get("nccl_env"), "gloo_env": env.get("gloo_env"),
        "environment": env,
        "thresholds": thr,
        "allreduce": ar,
        "ddp": dict(dd, summary=summarize_ddp(dd)) if dd else None,
        "ranks": [{k: f.get(k) for k in ("rank", "host", "status", "phase", "error",
                                         "elapsed_s")} for f in frags]
        + [{"rank": r, "host": host, "status": "missing", "phase": None,
            "error": "no result fragment", "elapsed_s": None} for r in missing],
        "problems": problems,
        "checks": checks,
    }
