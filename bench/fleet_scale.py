"""`records.fleet_check`: `provision check` over a fleet of light lab hosts (lab/light.py, 200 by
default), measured once: wall time, controller CPU-s per host, the controller's memory, the fan-out
actually reached and the hosts' own CPU; plus the median of BENCH_REPEAT 1-host checks on the same
fleet for the per-host wall time. P7 is projected from them (bench/scenarios.py project_measured).

While the big run goes, a sampler thread (once a second) reads:
* the controller's memory: the summed PSS (`/proc/<pid>/smaps_rollup`) of every process the bench
  started except the light hosts' own (provision, ansible-playbook and its forks, ssh clients and
  their ControlPersist masters); PSS splits shared pages between the processes that map them, so
  the forks' shared interpreter is not counted once per fork;
* the fan-out reached: how many hosts are running something besides their idle processes (`IDLE`)
  at that moment (a command of the play: sh, sudo, python3, nvidia-smi ...), from their cgroups.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import measure
from bench.harness import PROVISION, Bench
from bench.result_model import median, record

KEY = "fleet_check"
# what a light host runs while idle: its sshd (listener and the sessions of open connections) and
# the `unshare` that started it; "" is a process that ended between the listing and the read
IDLE = frozenset({"sshd", "sshd-session", "unshare", ""})
# light hosts carry the base without the stack: their checks fail (1) or drift (5); every host must
# still have been reached and judged (no `unreachable`, no setup or usage error)
FLEET_RC_OK = (0, 1, 5)


def _ppid_map() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text(encoding="utf-8")
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(root: int, exclude: Iterable[int] = ()) -> set[int]:
    """Every descendant of root, without the subtrees of `exclude`."""
    parents = _ppid_map()
    kids: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    skip = set(exclude)
    found: set[int] = set()
    todo = [p for p in kids.get(root, []) if p not in skip]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += [c for c in kids.get(pid, []) if c not in skip]
    return found


def pss_kib(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8").splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


class Sampler(threading.Thread):
    """Peak controller PSS and peak number of busy hosts while a run goes (see the module doc)."""

    def __init__(self, fleet: Any, interval: float = 1.0) -> None:  # noqa: ANN401 - LightFleet
        super().__init__(daemon=True)
        self.fleet = fleet
        self.interval = interval
        self.stop_event = threading.Event()
        self.peak_pss_kib = 0
        self.peak_procs = 0
        self.peak_busy = 0
        self.samples = 0
        self._host_roots = fleet.process_ids()
        self._procs_files = fleet.cgroup_procs_files()

    def busy_hosts(self) -> int:
        busy = 0
        for path in self._procs_files:
            with contextlib.suppress(OSError, ValueError):
                pids = [int(p) for p in path.read_text(encoding="utf-8").split()]
                if any(_comm(p) not in IDLE for p in pids):
                    busy += 1
        return busy

    def run(self) -> None:
        while not self.stop_event.is_set():
            procs = descendants(os.getpid(), self._host_roots)
            pss = sum(pss_kib(p) for p in procs)
            self.peak_pss_kib = max(self.peak_pss_kib, pss)
            self.peak_procs = max(self.peak_procs, len(procs))
            self.peak_busy = max(self.peak_busy, self.busy_hosts())
            self.samples += 1
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)


def _forks(report_dir: Path) -> int | None:
    """The --forks the CLI gave ansible-playbook (from the run's recorded command)."""
    with contextlib.suppress(OSError, ValueError):
        report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
        command = json.loads(
            (Path(report["artifacts"]) / "command").read_text(encoding="utf-8")
        ).get("command") or []
        for i, word in enumerate(command):
            if word == "--forks" and i + 1 < len(command):
                return int(command[i + 1])
            if word.startswith("--forks="):
                return int(word.split("=", 1)[1])
    return None


def _statuses(report_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError):
        report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
        for entry in (report.get("hosts") or {}).values():
            status = str(entry.get("status", "?"))
            counts[status] = counts.get(status, 0) + 1
    return counts


def _check(b: Bench, fleet: Any, hosts: list[str], what: str, sample: bool) -> dict[str, Any]:  # noqa: ANN401
    inventory = b.inventory(fleet, hosts, what)
    report_dir = b.work / "reports" / what
    argv = [
        str(PROVISION),
        "check",
        "-i",
        str(inventory),
        "--stack",
        str(fleet.stack_path),
        "--known-hosts",
        str(fleet.known_hosts),
        *b.s.check_args,
        *(["--forks", str(b.s.light_forks)] if b.s.light_forks else []),
        "--report-dir",
        str(report_dir),
    ]
    sampler = Sampler(fleet) if sample else None
    host0 = fleet.cgroup_usage_usec()
    load0 = os.getloadavg()
    if sampler:
        sampler.start()
    try:
        s = measure.run(
            b._label(what), argv, env=b.provision_env(), timeout=b.s.timeout_s, log_dir=b.logs
        )
    finally:
        if sampler:
            sampler.stop()
    host1 = fleet.cgroup_usage_usec()
    statuses = _statuses(report_dir)
    row: dict[str, Any] = {
        "hosts": len(hosts),
        "rc": s.rc,
        "wall_s": round(s.wall_s, 3),
        "controller_cpu_s": round(s.cpu_s, 3),
        "controller_cpu_s_per_host": round(s.cpu_s / len(hosts), 4),
        "host_cpu_s": round((host1 - host0) / 1e6, 3),
        "forks": _forks(report_dir),
        "host_statuses": statuses,
        "load_avg_before": [round(x, 2) for x in load0],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "sample": s.to_json(),
    }
    if sampler:
        row["controller_peak_pss_mib"] = round(sampler.peak_pss_kib / 1024, 1)
        row["controller_peak_processes"] = sampler.peak_procs
        row["fanout_reached"] = sampler.peak_busy
        row["sampler_samples"] = sampler.samples
    b.log(
        f"  {what}: rc {s.rc}, {s.wall_s:.1f} s wall, controller {s.cpu_s:.1f} CPU-s "
        f"({s.cpu_s / len(hosts):.3f}/host), hosts {row['host_cpu_s']:.1f} CPU-s, "
        f"statuses {statuses}"
        + (
            f", peak PSS {row['controller_peak_pss_mib']} MiB, fan-out {row['fanout_reached']}"
            if sampler
            else ""
        )
    )
    if s.rc not in FLEET_RC_OK:
        row["output_tail"] = s.output[-2000:]
    return row


def fleet_check(b: Bench) -> dict[str, Any]:
    """Bring up the light fleet, run the 1-host and the N-host check once each, tear it down."""
    n = b.s.light_hosts
    t0 = time.monotonic()
    try:
        fleet = b.lab.create_light_fleet(n, [b.s.profile])
    except Exception as exc:  # any failure to start is the figure's reason
        return record(None, "s", [], reason=f"light fleet of {n} hosts did not start: {exc}")
    up_s = time.monotonic() - t0
    b.log(f"lab: {n} light host(s) up in {up_s:.1f} s")
    try:
        names = [h.name for h in fleet.hosts]
        ones = [_check(b, fleet, names[:1], "fleet-1", sample=False) for _ in range(b.s.repeat)]
        big = _check(b, fleet, names, f"fleet-{n}", sample=True)
    finally:
        fleet.destroy()
    reached = (big["host_statuses"] or {}).get("unreachable", 0) == 0 and big["rc"] in FLEET_RC_OK
    if not reached:
        return record(
            None,
            "s",
            [big, *ones],
            reason=f"the {n}-host check exited {big['rc']} with statuses {big['host_statuses']}",
        )
    return record(
        big["wall_s"],
        "s",
        [big, *ones],
        value_is=f"wall time of one `provision check` over {n} light hosts",
        hosts=n,
        light_fleet_up_s=round(up_s, 1),
        controller_cpu_s_per_host=big["controller_cpu_s_per_host"],
        controller_peak_pss_mib=big.get("controller_peak_pss_mib"),
        fanout_reached=big.get("fanout_reached"),
        forks=big["forks"],
        host_cpu_s_per_host=round(big["host_cpu_s"] / n, 4),
        one_host_wall_s=round(median(r["wall_s"] for r in ones), 3),
        load_avg_before=big["load_avg_before"],
        measured_on=(
            "light lab hosts (sshd in namespaces over the shared read-only base, simulated "
            "nvidia-smi, no systemd) on the controller's own CPU; the machine's load is recorded "
            "before and after each run"
        ),
    )
