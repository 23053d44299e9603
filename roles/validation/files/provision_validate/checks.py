"""Merge one node's rank fragments into the node result and evaluate the checks (no torch).

Check ids: validation.allreduce, validation.ddp, validation.multinode; each check is
``{id, status, expected, actual, message, remediation}`` with status pass/fail/skip
(docs/architecture.md, "Checks and facts reported by roles").
"""

from __future__ import annotations

import glob
import json
import os
import statistics

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
        "check the network between the hosts: validation_network_interface "
        "(NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME), firewall on validation_master_port, "
        "the first host's address; NCCL_DEBUG=INFO shows the transport"),
}


def load_fragments(results_dir: str) -> list[dict]:
    frags = []
    for path in sorted(glob.glob(os.path.join(results_dir, "rank-*.json"))):
        try:
            with open(path, encoding="utf-8") as fh:
                frags.append(json.load(fh))
        except (OSError, ValueError) as exc:
            frags.append({"rank": _rank_from_path(path), "status": "error",
                          "error": "unreadable fragment %s: %s" % (path, exc)})
    return sorted(frags, key=lambda f: int(f.get("rank", -1)))


def _rank_from_path(path: str) -> int:
    base = os.path.basename(path)
    try:
        return int(base[len("rank-"):-len(".json")])
    except ValueError:
        return -1


def _check(cid: str, status: str, expected, actual, message: str) -> dict:
    return {"id": cid, "status": status, "expected": expected, "actual": actual,
            "message": message, "remediation": "" if status == "pass" else REMEDIATION[cid]}


def _fmt(x, nd: int = 2) -> str:
    return "n/a" if x is None else ("%.*f" % (nd, x))


SECONDARY = ("connection closed by peer", "connection reset by peer", "terminated by signal")


def failure_summary(frags: list[dict], missing: list[int], host: str, rc: int | None,
                    timeout_s: float | None) -> tuple[list[str], str | None]:
    """Messages for ranks that did not finish (the cause first, then ranks that only stopped
    because of it), and the phase where it went wrong."""
    primary, secondary = [], []
    culprits = {}
    phase = None
    for f in frags:
        if f.get("status") == "ok":
            continue
        msg = f.get("error") or "rank %s on host %s: %s" % (
            f.get("rank"), f.get("host"), f.get("status"))
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
    for r in missing:
        primary.append("rank %d on host %s: no result (process killed%s; torchrun exit %s)" % (
            r, host, " by the outer timeout of %.0f s" % timeout_s if timeout_s and rc in
            (124, 137) else "", rc))
    if secondary:
        line = "rank(s) %s stopped after the failure (terminated by torchrun or peer connection "\
            "closed)" % ", ".join("%s on host %s" % (f.get("rank"), f.get("host"))
                                  for f in secondary)
        if not primary:
            line = "; ".join(f.get("error") or "" for f in secondary)
        primary.append(line)
    if culprits:
        primary.insert(0, "hang: " + "; ".join(
            "rank %d on host %s stopped progressing in phase '%s'" % (r, h, ph)
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


def evaluate_allreduce(ar: dict | None, thr: dict, world: int, problems: list[str],
                       phase_group: str) -> dict:
    cid = "validation.allreduce"
    limit = (thr or {}).get("allreduce_busbw_gbps")
    expected = (">= %s GB/s busbw" % _fmt(limit)) if limit is not None else "correct sums"
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
                      "all-reduce returned wrong values: %d elements differ from the expected "
                      "sum" % ar.get("wrong", 0))
    if world <= 1:
        return _check(cid, "pass", expected, actual,
                      "world size 1: sums correct; bus bandwidth is not defined for one rank "
                      "(2(n-1)/n = 0)")
    if limit is None:
        return _check(cid, "pass", expected, actual,
                      "sums correct; busbw %s GB/s reported, not judged (%s)"
                      % (_fmt(judged), thr.get("note") or "no threshold"))
    n_att = len(ar.get("attempts", []))
    if judged is not None and judged >= limit:
        return _check(cid, "pass", expected, actual,
                      "busbw %s GB/s >= %s GB/s (%s)%s" % (
                          _fmt(judged), _fmt(limit), thr.get("row") or "override",
                          "" if n_att == 1 else ", on attempt %d" % n_att))
    return _check(cid, "fail", expected, actual,
                  "all-reduce busbw %s GB/s is below the threshold %s GB/s (measured vs "
                  "expected; %s; %d attempt%s: %s)" % (
                      _fmt(judged), _fmt(limit), thr.get("source") or thr.get("row"), n_att,
                      "" if n_att == 1 else "s",
                      ", ".join(_fmt(x) for x in actual["attempts"])))


def summarize_ddp(dd: dict) -> dict:
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


def evaluate_ddp(dd: dict | None, thr: dict, problems: list[str], phase_group: str) -> dict:
    cid = "validation.ddp"
    ratio = (thr or {}).get("straggler_ratio") or 0.7
    eff_min = (thr or {}).get("ddp_scaling_efficiency")
    expected = {"loss": "falls", "params": "bit-identical on all ranks",
                "straggler_ratio": ratio, "scaling_efficiency": eff_min}
    if dd is None or problems:
        why = "; ".join(problems) or "no DDP result"
        what = "did not complete" if phase_group == "ddp" else "not completed"
        return _check(cid, "fail", expected, None, "DDP job %s: %s" % (what, why))
    s = summarize_ddp(dd)
    actual = {k: s[k] for k in ("loss_first", "loss_last", "params_identical",
                                "scaling_efficiency", "step_time_spread",
                                "samples_per_s_per_rank", "local_samples_per_s_per_rank")}
    actual["min_rank_perf_ratio"] = min(s["rank_perf_ratio"].values()) \
        if s["rank_perf_ratio"] else None
    bad = []
    if not s["loss_fell_on_all_ranks"]:
        bad.append("loss did not fall (%s -> %s)" % (_fmt(s["loss_first"], 4),
                                                     _fmt(s["loss_last"], 4)))
    if not s["params_identical"]:
        groups = {}
        for r, h in s["param_hashes"].items():
            groups.setdefault(h, []).append(int(r))
        odd = sorted(groups.values(), key=len)[0]
        bad.append("parameters differ across ranks after %d steps (%d distinct hashes; odd "
                   "rank(s) %s)" % (dd.get("steps", 0), len(groups), ", ".join(
                       "%d on host %s" % (r, s["hosts"].get(str(r), "?")) for r in sorted(odd))))
    for r, q in sorted(s["rank_perf_ratio"].items(), key=lambda x: int(x[0])):
        if q < ratio:
            bad.append("straggler: rank %s on host %s runs %.1f samples/s = %.2f x the best rank "
                       "(< %.2f)" % (r, s["hosts"].get(r, "?"),
                                    s["local_samples_per_s_per_rank"][r], q, ratio))
    eff = s["scaling_efficiency"]
    if eff_min is not None and eff is not None and s["world_size"] > 1 and eff < eff_min:
        bad.append("scaling efficiency %.3f < %.2f (%.1f samples/s on %d ranks vs %.1f on one)"
                   % (eff, eff_min, s["world_samples_per_s"], s["world_size"],
                      s["single_samples_per_s"]))
    if bad:
        return _check(cid, "fail", expected, actual, "; ".join(bad))
    return _check(cid, "pass", expected, actual,
                  "loss %s -> %s, parameters identical on %d ranks, scaling efficiency %s, "
                  "slowest rank %s x best, step-time spread %s" % (
                      _fmt(s["loss_first"], 3), _fmt(s["loss_last"], 3), s["world_size"],
                      _fmt(eff, 3), _fmt(actual["min_rank_perf_ratio"], 3),
                      _fmt(s["step_time_spread"], 3)))


def merge(results_dir: str, host: str, node_rank: int = 0, nnodes: int = 1,
          nproc: int = 1, rc: int | None = None, timeout_s: float | None = None,
          elapsed_s: float | None = None, torchrun_output: str = "") -> dict:
    """The node result: fragments of this node's ranks, merged, with the three checks.

    torchrun_output: the tail of torchrun's stderr, quoted when torchrun failed but no rank did.
    """
    frags = load_fragments(results_dir)
    expected = list(range(node_rank * nproc, node_rank * nproc + nproc))
    have = {int(f.get("rank", -1)) for f in frags}
    missing = [r for r in expected if r not in have]
    ok = [f for f in frags if f.get("status") == "ok"]
    ref = ok[0] if ok else (next((f for f in frags if f.get("environment")), None) or {})
    problems, phase = failure_summary(frags, missing, host, rc, timeout_s)
    group = _group(phase) if problems else "done"
    if problems and rc == 0 and not missing and all(f.get("status") == "ok" for f in frags):
        problems = []
    if rc not in (0, None) and not problems:
        last = [ln.strip() for ln in torchrun_output.splitlines() if ln.strip()][-3:]
        problems = ["torchrun exited %s without a failed rank fragment%s" % (
            rc, "; its last output: " + " / ".join(last) if last else "")]
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
            checks.append(_check("validation.multinode", "fail", expected_m, actual_m,
                                 "multi-node run (node %d of %d) failed: %s" % (
                                     node_rank, nnodes, "; ".join(c["message"] for c in failed)
                                     or "world size %d != %d" % (world, nnodes * nproc))))
        else:
            checks.append(_check("validation.multinode", "pass", expected_m, actual_m,
                                 "%d nodes x %d ranks: all-reduce and DDP passed across the "
                                 "network (busbw %s GB/s)" % (nnodes, nproc, _fmt(
                                     actual_m["busbw_gbps"]))))
    else:
        checks.append(_check("validation.multinode", "skip", None, None,
                             "single node (1 host in the play)"))
    env = ref.get("environment") or {}
    result = {
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
    return result
