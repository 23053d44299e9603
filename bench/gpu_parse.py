"""The Python half of bench/gpu.sh: GPU facts, nccl-tests output, and the P5/P6 summary.

Standard library only (it runs with the GPU machine's torch interpreter, Python 3.8+).

  python bench/gpu_parse.py facts [--replay DIR]          GPU facts (plugins/module_utils/gpu.py)
  python bench/gpu_parse.py nccl-tests FILE               all_reduce_perf rows as JSON
  python bench/gpu_parse.py summarize --runs DIR --out FILE [--p5-min-bytes N]

P5: torch all-reduce busbw (the validation program, NCCL) / nccl-tests all_reduce_perf busbw on the
same GPUs, same sizes, same NCCL library, at every size >= 1 GiB measured by both; the value is the
smallest ratio (goal >= 0.95). P6: wall time of the full validation run (torchrun of the
validation program + the merge) in minutes (goal <= 3 per 8-GPU node).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GPU_PY = REPO / "plugins" / "module_utils" / "gpu.py"
GIB = 1 << 30
P5_GOAL = 0.95
P6_GOAL_MIN = 3.0


# ----------------------------------------------------------------------------------- facts
def load_gpu_module() -> Any:  # noqa: ANN401 - a module
    spec = importlib.util.spec_from_file_location("provision_gpu_facts", GPU_PY)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {GPU_PY}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def live_run(argv: list[str]) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out"
    return p.returncode, p.stdout, p.stderr


def replay_run(directory: Path) -> Any:  # noqa: ANN401 - a callable
    """A run() that answers from recorded outputs (index.json: argv -> rc, stdout file)."""
    index = json.loads((directory / "index.json").read_text(encoding="utf-8"))

    def run(argv: list[str]) -> tuple[int, str, str]:
        for entry in index:
            if entry["argv"] == list(argv):
                return int(entry["rc"]), (directory / entry["stdout"]).read_text(
                    encoding="utf-8"
                ), ""
        return 127, "", f"{argv[0]}: no recorded output"

    return run


def facts(replay: Path | None) -> dict[str, Any]:
    mod = load_gpu_module()
    return dict(mod.gather(replay_run(replay) if replay else live_run))


# ----------------------------------------------------------------------------------- nccl-tests
def nccl_tests_rows(text: str) -> list[dict[str, Any]]:
    """Data rows of all_reduce_perf: size, count, type, redop, [root,] then out-of-place and
    in-place (time us, algbw GB/s, busbw GB/s, #wrong) - read from the end, so the root column
    (added in nccl-tests 2.x) may be there or not."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or line.lstrip().startswith("#") or not parts[0].isdigit():
            continue
        if len(parts) < 11:
            continue
        try:
            oop = [float(x) for x in parts[-8:-5]]
            inp = [float(x) for x in parts[-4:-1]]
        except ValueError:
            continue
        rows.append(
            {
                "size_bytes": int(parts[0]),
                "count": int(parts[1]),
                "type": parts[2],
                "oop_time_us": oop[0],
                "oop_algbw_gbps": oop[1],
                "oop_busbw_gbps": oop[2],
                "oop_wrong": parts[-5],
                "ip_time_us": inp[0],
                "ip_algbw_gbps": inp[1],
                "ip_busbw_gbps": inp[2],
                "ip_wrong": parts[-1],
                "busbw_gbps": max(oop[2], inp[2]),
            }
        )
    return rows


# ----------------------------------------------------------------------------------- summary
def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _by_size(rows: list[dict[str, Any]]) -> dict[int, float]:
    return {int(r["size_bytes"]): float(r["busbw_gbps"]) for r in rows}


def ddp_step_s(node: dict[str, Any]) -> float | None:
    """Seconds per DDP step: samples per rank per step / the rank's measured samples/s."""
    ddp = node.get("ddp") or {}
    batch = ddp.get("batch_per_rank")
    rates = [float(r["samples_per_s"]) for r in ddp.get("per_rank", []) if r.get("samples_per_s")]
    if not batch or not rates:
        return None
    return float(batch) / statistics.median(rates)


def summarize(runs_dir: Path, p5_min_bytes: int = GIB) -> dict[str, Any]:
    runs = sorted(p for p in runs_dir.iterdir() if p.is_dir() and p.name.startswith("run-"))
    per_run: list[dict[str, Any]] = []
    for d in runs:
        entry: dict[str, Any] = {"run": d.name}
        node_file = d / "validation.json"
        if node_file.exists():
            node = json.loads(node_file.read_text(encoding="utf-8"))
            ar = node.get("allreduce") or {}
            entry["backend"] = node.get("backend")
            entry["world_size"] = node.get("world_size") or node.get("nproc_per_node")
            entry["torch_busbw"] = _by_size(ar.get("rows") or [])
            entry["ddp_step_s"] = ddp_step_s(node)
            entry["checks"] = {c.get("id"): c.get("status") for c in node.get("checks", [])}
            entry["elapsed_s"] = node.get("elapsed_s")
        wall = d / "wall_s"
        if wall.exists():
            entry["wall_s"] = float(wall.read_text(encoding="utf-8").strip())
        nt = d / "nccl-tests.txt"
        if nt.exists():
            entry["nccl_tests_busbw"] = _by_size(nccl_tests_rows(nt.read_text(encoding="utf-8")))
        per_run.append(entry)

    sizes = sorted({s for e in per_run for s in e.get("torch_busbw", {})})
    torch_med = {s: _median([e["torch_busbw"][s] for e in per_run if s in e.get("torch_busbw", {})])
                 for s in sizes}
    nsizes = sorted({s for e in per_run for s in e.get("nccl_tests_busbw", {})})
    nccl_med = {s: _median([e["nccl_tests_busbw"][s] for e in per_run
                            if s in e.get("nccl_tests_busbw", {})]) for s in nsizes}
    common = [s for s in sizes if s in nccl_med and s >= p5_min_bytes]
    world = next((e.get("world_size") for e in per_run if e.get("world_size")), None)

    out: dict[str, Any] = {
        "busbw_gbps_by_size": {
            str(s): {"torch": torch_med.get(s), "nccl_tests": nccl_med.get(s)}
            for s in sorted(set(sizes) | set(nsizes))
        },
        "world_size": world,
        "runs": per_run,
    }
    # P5
    if not nsizes:
        out["P5"] = _nm("P5", P5_GOAL, "ratio", ">=",
                        "nccl-tests' all_reduce_perf was not available (see gpu.sh's log)")
    elif world is not None and int(world) < 2:
        out["P5"] = _nm("P5", P5_GOAL, "ratio", ">=",
                        "one GPU: all-reduce busbw is 0 by definition (2(n-1)/n); P5 needs "
                        ">= 2 GPUs")
    elif not common:
        out["P5"] = _nm("P5", P5_GOAL, "ratio", ">=",
                        f"no message size >= {p5_min_bytes} B measured by both")
    else:
        ratios = {str(s): round(float(torch_med[s] or 0) / float(nccl_med[s] or 1), 4)
                  for s in common if nccl_med[s]}
        value = min(ratios.values())
        out["P5"] = {"value": value, "goal": P5_GOAL, "unit": "ratio", "comparison": ">=",
                     "met": value >= P5_GOAL, "runs": [ratios], "measured": True,
                     "sizes_compared": [int(s) for s in common],
                     "measured_as": "torch busbw / nccl-tests busbw (the better of out-of-place "
                     "and in-place), medians over the runs, smallest ratio over the sizes"}
    # P6
    walls = [float(e["wall_s"]) for e in per_run if e.get("wall_s") is not None]
    if walls:
        minutes = statistics.median(walls) / 60.0
        out["P6"] = {"value": round(minutes, 4), "goal": P6_GOAL_MIN, "unit": "min",
                     "comparison": "<=", "met": minutes <= P6_GOAL_MIN,
                     "runs": [round(w, 3) for w in walls], "measured": True,
                     "gpus": world,
                     "note": None if world == 8 else
                     f"measured with {world} GPU(s); the goal is stated for an 8-GPU node"}
    else:
        out["P6"] = _nm("P6", P6_GOAL_MIN, "min", "<=", "no validation run finished")
    steps = [float(e["ddp_step_s"]) for e in per_run if e.get("ddp_step_s")]
    out["ddp_step_s"] = {"value": _median(steps), "goal": None, "unit": "s", "met": None,
                         "runs": steps, "measured": bool(steps)}
    if not steps:
        out["ddp_step_s"]["reason"] = "no DDP result in the validation output"
    return out


def _nm(key: str, goal: float, unit: str, cmp: str, reason: str) -> dict[str, Any]:
    return {"value": None, "goal": goal, "unit": unit, "comparison": cmp, "met": None,
            "runs": [], "measured": False, "reason": f"{key}: {reason}"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_parse.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("facts")
    f.add_argument("--replay", type=Path, default=None)
    n = sub.add_parser("nccl-tests")
    n.add_argument("file", type=Path)
    s = sub.add_parser("summarize")
    s.add_argument("--runs", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--p5-min-bytes", type=int, default=int(os.environ.get("P5_MIN_BYTES", GIB)))
    s.add_argument("--facts", type=Path, default=None)
    s.add_argument("--extra", default="{}", help="JSON merged into the result (machine, mode)")
    a = p.parse_args(argv)
    if a.cmd == "facts":
        print(json.dumps(facts(a.replay), indent=1, sort_keys=True))
        return 0
    if a.cmd == "nccl-tests":
        print(json.dumps(nccl_tests_rows(a.file.read_text(encoding="utf-8")), indent=1))
        return 0
    result = summarize(a.runs, a.p5_min_bytes)
    if a.facts and a.facts.exists():
        fx = json.loads(a.facts.read_text(encoding="utf-8"))
        result["gpu_facts"] = {k: fx.get(k) for k in ("state", "gpu_count", "gpu_model",
                                                       "driver_version", "cuda_driver_version",
                                                       "nvswitch_count", "topology")}
    result.update(json.loads(a.extra))
    result["p5_min_bytes"] = a.p5_min_bytes
    a.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for key in ("P5", "P6", "ddp_step_s"):
        e = result[key]
        verdict = "" if e.get("met") is None else ("met" if e["met"] else "MISSED")
        shown = e["value"] if e["value"] is not None else "not measured: " + e.get("reason", "")
        print(f"{key:10} {shown} {e['unit']} {verdict}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
