"""`python -m bench` (`make bench`): measure against the lab, write the JSON and the docs table.

Knobs (environment, or the options of the same name):
  BENCH_REPEAT=3          runs per figure (the median is reported; A and B alternate)
  BENCH_SIZES=1,4,8,16    fleet sizes for P3
  BENCH_P1_HOSTS=4        hosts for P1
  BENCH_SMOKE=1           one host, one run, no warm-up (what CI runs; figures are not meaningful)
  BENCH_SKIP=P2,P4        parts to leave out: P1, P3, P2, P4, records, fleet (not measured)
  BENCH_LIGHT_HOSTS=200   light lab hosts of records.fleet_check (P7's measured basis)
  BENCH_LIGHT_FORKS=      --forks of that check (default: the CLI's own choice)
  BENCH_PROFILE=h100-sxm-8
  BENCH_CHECK_ARGS / BENCH_CONVERGE_ARGS   extra `provision` arguments (shell words)
  BENCH_P7_FORKS=64 BENCH_P7_CORES=16 BENCH_P7_NODES=1000
  BENCH_OUT=bench/results BENCH_DOCS=docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import fleet_scale, machine, report, scenarios
from bench import result_model as model
from bench.harness import REPO, Bench, Settings


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default) or default


def _path_env(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", default=_env("BENCH_SMOKE", "0") == "1")
    p.add_argument("--repeat", type=int, default=int(_env("BENCH_REPEAT", "3")))
    p.add_argument("--sizes", default=_env("BENCH_SIZES", "1,4,8,16"))
    p.add_argument("--p1-hosts", type=int, default=int(_env("BENCH_P1_HOSTS", "4")))
    p.add_argument("--skip", default=_env("BENCH_SKIP", ""))
    p.add_argument("--profile", default=_env("BENCH_PROFILE", "h100-sxm-8"))
    p.add_argument("--check-args", default=os.environ.get(
        "BENCH_CHECK_ARGS", "-e gpu_stack_validation_enabled=false"))
    p.add_argument("--converge-args", default=os.environ.get(
        "BENCH_CONVERGE_ARGS", "-e gpu_stack_validation_enabled=false"))
    p.add_argument("--p7-forks", type=int, default=int(_env("BENCH_P7_FORKS", "64")))
    p.add_argument("--p7-cores", type=int, default=int(_env("BENCH_P7_CORES", "16")))
    p.add_argument("--p7-nodes", type=int, default=int(_env("BENCH_P7_NODES", "1000")))
    p.add_argument("--light-hosts", type=int, default=int(_env("BENCH_LIGHT_HOSTS", "200")))
    p.add_argument("--light-forks", type=int, default=int(_env("BENCH_LIGHT_FORKS", "0")))
    # smoke runs write to a temporary directory unless told otherwise: they are not results
    p.add_argument("--out", type=Path, default=_path_env("BENCH_OUT"))
    p.add_argument("--docs", type=Path, default=_path_env("BENCH_DOCS"))
    p.add_argument("--work", type=Path, default=None, help="keep logs and reports here")
    return p.parse_args(argv)


def settings_from(a: argparse.Namespace) -> Settings:
    sizes = tuple(sorted({int(x) for x in str(a.sizes).split(",") if x.strip()}))
    s = Settings(
        repeat=max(1, a.repeat),
        sizes=sizes or (1,),
        p1_hosts=max(1, a.p1_hosts),
        profile=a.profile,
        skip=frozenset(x.strip() for x in str(a.skip).split(",") if x.strip()),
        check_args=tuple(shlex.split(a.check_args)),
        converge_args=tuple(shlex.split(a.converge_args)),
        p7_nodes=a.p7_nodes,
        p7_cores=a.p7_cores,
        p7_forks=a.p7_forks,
        light_hosts=max(1, a.light_hosts),
        light_forks=max(0, a.light_forks),
    )
    if a.smoke:
        s.smoke, s.repeat, s.sizes, s.p1_hosts, s.warmup = True, 1, (1,), 1, False
        s.light_hosts = min(s.light_hosts, 2)
    if max(s.sizes) > 16 or s.p1_hosts > 16:
        raise SystemExit("the lab has at most 16 hosts per fleet")
    return s


def log(line: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {line}", flush=True)


def run_all(s: Settings, work: Path) -> dict[str, Any]:
    started = time.time()
    b = Bench(s, work, log)
    data: dict[str, Any] = {
        "schema": 1,
        "date": dt.date.today().isoformat(),
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "settings": s.to_json(),
    }
    records: dict[str, Any] = {}
    log(f"machine: {machine.one_line(data['machine'])}")
    records.update(scenarios.help_startup(b))
    b.start_lab()
    try:
        if {"P1", "P3", "records"} <= s.skip:
            for key in ("P1", "P3", "check_cpu_s_per_host", "check_tasks_per_host", "P7"):
                data[key] = model.not_measured(key, "skipped (BENCH_SKIP)")
            records["first_ssh_s"] = model.record(None, "s", [], reason="skipped (BENCH_SKIP)")
            records["validation_s"] = model.record(None, "s", [], reason="skipped (BENCH_SKIP)")
        else:
            fleet = b.fleet(max(*s.sizes, s.p1_hosts))
            try:
                found = scenarios.check_fleet(b, fleet)
                records["first_ssh_s"] = found.pop("first_ssh_s", None) or model.record(
                    None, "s", [], reason="P1 skipped")
                data.update(found)
                one = ((found.get("P3") or {}).get("sizes") or {}).get("1") or {}
                records.update(scenarios.validation(b, fleet, one.get("wall_s")))
            finally:
                scenarios.destroy(b, fleet)
        if "fleet" in s.skip:
            records["fleet_check"] = model.record(None, "s", [], reason="skipped (BENCH_SKIP)")
        else:
            records["fleet_check"] = fleet_scale.fleet_check(b)
        if records["fleet_check"].get("value") is not None:
            data["P7"] = scenarios.project_measured(b, records["fleet_check"], data.get("P7"))
        if {"P2", "P4"} <= s.skip:
            data["P4"] = model.not_measured("P4", "skipped (BENCH_SKIP)")
            data["P2"] = model.not_measured("P2", "skipped (BENCH_SKIP)")
        else:
            fleet = b.fleet(1 if "P4" in s.skip else 2 * s.repeat)
            try:
                data.update(scenarios.converge_fleet(b, fleet))
            finally:
                scenarios.destroy(b, fleet)
    finally:
        b.stop_lab()
    data["records"] = records
    data["findings"] = b.findings
    data["duration_s"] = round(time.time() - started, 1)
    head = ("schema", "date", "started", "duration_s", "machine", "settings")
    ordered = {k: data[k] for k in head}
    ordered.update({k: data[k] for k in model.GOAL_KEYS if k in data})
    ordered.update({k: v for k, v in data.items() if k not in ordered})
    return ordered


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    s = settings_from(a)
    work = a.work or Path(tempfile.mkdtemp(prefix="provision-bench-"))
    if a.out is None:
        a.out = work / "results" if s.smoke else REPO / "bench" / "results"
    if a.docs is None:
        a.docs = work / "benchmarks.md" if s.smoke else REPO / "docs" / "benchmarks.md"
    from lab import LabUnavailable, unavailable_reason  # noqa: PLC0415

    reason = unavailable_reason()
    if reason:
        print(f"bench: the lab is unavailable here: {reason}", file=sys.stderr)
        return 4
    try:
        data = run_all(s, work)
    except LabUnavailable as exc:
        print(f"bench: the lab is unavailable here: {exc}", file=sys.stderr)
        return 4
    problems = model.result_problems(data)
    a.out.mkdir(parents=True, exist_ok=True)
    name = data["date"] + ("-smoke" if s.smoke else "")
    path = a.out / f"{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    try:
        shown = str(path.resolve().relative_to(REPO))
    except ValueError:
        shown = str(path)
    report.update_docs(a.docs, report.markdown(data, shown))
    print()
    for line in report.goal_lines(data):
        print(line)
    for f in data["findings"]:
        print(f"finding: {f}")
    print(f"\nwrote {path} and {a.docs} ({data['duration_s']:.0f} s; logs in {work})")
    if problems:
        print("result shape problems: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
