"""The measurements against the lab: P1, P3 (and from it check_cpu_s_per_host,
check_tasks_per_host, P7), P2 and P4, and the records without a goal. docs/benchmarks.md explains
each one; this module only runs and reads.

A = `provision ...`, B = plain `ansible-playbook` given the same playbook, inventory and variables:
B's command line is the one the CLI itself handed to ansible-playbook (ansible-runner writes it to
the run's artifacts, <state>/runs/<run id>/command), so the two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench import measure, parse
from bench.hostside import HostSide

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PROVISION = BIN / "provision"
# What ansible-runner adds to the environment for its own event capture (callback, artifacts, fact
# cache). B runs without these: they are how the CLI listens, not Ansible configuration.
RUNNER_ENV = frozenset(
    {
        "ANSIBLE_CALLBACK_PLUGINS",
        "ANSIBLE_STDOUT_CALLBACK",
        "ANSIBLE_CACHE_PLUGIN",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION",
        "AWX_ISOLATED_DATA_DIR",
    }
)
CHECK_RC_OK = (0, 5)  # provision check: compliant, or drift found (a fresh lab host drifts)
Log = Callable[[str], None]


@dataclass
class Settings:
    repeat: int = 3
    sizes: tuple[int, ...] = (1, 4, 8, 16)
    p1_hosts: int = 4
    profile: str = "h100-sxm-8"
    smoke: bool = False
    warmup: bool = True
    skip: frozenset[str] = frozenset()
    # passed to every `provision check` (A) and so, through the recorded command, to B
    check_args: tuple[str, ...] = ("-e", "gpu_stack_validation_enabled=false")
    # passed to the converge runs (P4 fresh runs, P2 no-op reruns)
    converge_args: tuple[str, ...] = ("-e", "gpu_stack_validation_enabled=false")
    p7_nodes: int = 1000
    p7_cores: int = 16
    p7_forks: int = 64
    timeout_s: float = 1800.0
    # records.fleet_check: light lab hosts for one measured check (P7's basis); 0: CLI default forks
    light_hosts: int = 200
    light_forks: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "repeat": self.repeat,
            "sizes": list(self.sizes),
            "p1_hosts": self.p1_hosts,
            "profile": self.profile,
            "smoke": self.smoke,
            "warmup": self.warmup,
            "skip": sorted(self.skip),
            "check_args": list(self.check_args),
            "converge_args": list(self.converge_args),
            "p7": {"nodes": self.p7_nodes, "cores": self.p7_cores, "forks": self.p7_forks},
            "light": {"hosts": self.light_hosts, "forks": self.light_forks or None},
        }


@dataclass
class Run:
    """One measured run with what was read around it."""

    sample: measure.Sample
    hosts: list[str]
    host_cpu_s: float | None = None
    recap: dict[str, dict[str, int]] = field(default_factory=dict)
    first_ssh_s: float | None = None
    report: dict[str, Any] | None = None
    command: dict[str, Any] | None = None  # the artifacts' command file (A runs)
    apt_updates: dict[str, int] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    changed_tasks: list[str] = field(default_factory=list)  # A runs, from the runner's events

    @property
    def tasks_per_host(self) -> float | None:
        counts = [parse.tasks_of(self.recap[h]) for h in self.hosts if h in self.recap]
        if not counts or len(counts) != len(self.hosts):
            return None
        return sum(counts) / len(counts)

    @property
    def changed(self) -> int:
        return sum(c.get("changed", 0) for c in self.recap.values())

    def to_json(self) -> dict[str, Any]:
        out = self.sample.to_json()
        out["hosts"] = len(self.hosts)
        out["host_cpu_s"] = None if self.host_cpu_s is None else round(self.host_cpu_s, 3)
        out["tasks_per_host"] = self.tasks_per_host
        out["changed"] = self.changed
        if self.first_ssh_s is not None:
            out["first_ssh_s"] = round(self.first_ssh_s, 3)
        if self.apt_updates:
            out["apt_updates"] = self.apt_updates
        if self.phases:
            out["phases"] = self.phases
        if self.changed_tasks:
            out["changed_tasks"] = self.changed_tasks
        return out


def _events(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not report or not report.get("artifacts"):
        return []
    events: list[dict[str, Any]] = []
    with contextlib.suppress(OSError):
        for f in (Path(report["artifacts"]) / "job_events").iterdir():
            with contextlib.suppress(OSError, ValueError):
                events.append(json.loads(f.read_text(encoding="utf-8")))
    return events


def changed_tasks(events: list[dict[str, Any]]) -> list[str]:
    """'host: task' of every result that reported changed."""
    out = []
    for ev in events:
        data = ev.get("event_data") or {}
        if ev.get("event") == "runner_on_ok" and (data.get("res") or {}).get("changed"):
            out.append(f"{data.get('host')}: {data.get('task')}")
    return sorted(out)


def phases(
    report: dict[str, Any] | None, sample: measure.Sample, events: list[dict[str, Any]]
) -> dict[str, float]:
    """Where a `provision` run's wall time went, from its report and its runner events:
    preflight (the slowest host's paramiko probe, in parallel; 0 in a check where every host
    answered Ansible, which probes none), before_playbook (process start to ansible-playbook's
    first event: CLI start-up, stack, a run's preflight, ansible-runner and ansible-playbook
    start-up), playbook (first to last event), after_playbook (last event to the
    process's exit: summary, reports, history)."""
    if not report:
        return {}
    first = last = None
    for ev in events:
        if ev.get("event") in ("playbook_on_start", "playbook_on_stats") and ev.get("created"):
            ts = dt.datetime.fromisoformat(ev["created"]).timestamp()
            if ev["event"] == "playbook_on_start":
                first = ts
            else:
                last = ts
    pre = [
        float((h.get("preflight") or {}).get("seconds") or 0)
        for h in (report.get("hosts") or {}).values()
    ]
    out = {"preflight": round(max(pre), 3) if pre else 0.0}
    if first is not None and last is not None:
        end = sample.started + sample.wall_s
        out.update(
            before_playbook=round(first - sample.started, 3),
            playbook=round(last - first, 3),
            after_playbook=round(end - last, 3),
        )
    return out


class BenchError(Exception):
    """A run did not do what the measurement needs; the figure is recorded as not measured."""


def _tail(text: str, n: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


class Bench:
    def __init__(self, settings: Settings, work: Path, log: Log) -> None:
        self.s = settings
        self.work = work
        self.log = log
        # short: ssh's ControlPath (~/.ansible/cp/<hash>.<random>) must fit a unix socket path
        self.home = Path(tempfile.mkdtemp(prefix="pb-home-", dir="/tmp"))
        self.state = work / "state"
        self.logs = work / "logs"
        for d in (self.state, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.lab: Any = None
        self.findings: list[str] = []
        self._n = 0

    # ----------------------------------------------------------------- environments
    def base_env(self) -> dict[str, str]:
        """No ANSIBLE_* from the caller: both sides get exactly what is written here."""
        return {
            "PATH": f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
        }

    def provision_env(self) -> dict[str, str]:
        return {**self.base_env(), "PROVISION_STATE_DIR": str(self.state)}

    # ----------------------------------------------------------------- lab
    def start_lab(self) -> None:
        from lab import Lab  # noqa: PLC0415

        self.lab = Lab()
        self.lab.reap_stale_fleets()
        self.log("lab: base image and repository")
        self.lab.ensure_base(log=False)
        self.lab.start_repo()

    def stop_lab(self) -> None:
        if self.lab is not None:
            self.lab.stop_repo()
        shutil.rmtree(self.home, ignore_errors=True)

    def fleet(self, n: int) -> Any:  # noqa: ANN401
        t0 = time.monotonic()
        fleet = self.lab.create_fleet(n, [self.s.profile])
        self.log(f"lab: {n} host(s) booted in {time.monotonic() - t0:.1f} s")
        return fleet

    def inventory(self, fleet: Any, hosts: Sequence[str], name: str) -> Path:  # noqa: ANN401
        """An inventory of exactly these hosts of the fleet (same variables as the fleet's)."""
        data = yaml.safe_load(Path(fleet.inventory_path).read_text(encoding="utf-8"))
        group = data["all"]["children"]["gpu_servers"]
        group["hosts"] = {h: v for h, v in group["hosts"].items() if h in hosts}
        path = self.work / "inventories" / f"{name}.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    # ----------------------------------------------------------------- one run
    def _label(self, what: str) -> str:
        self._n += 1
        return f"{self._n:03d}-{what}"

    def measured(
        self,
        what: str,
        argv: Sequence[str],
        env: dict[str, str],
        hostside: HostSide,
        hosts: Sequence[str],
        *,
        cwd: str | Path | None = None,
        ssh: bool = False,
        apt: bool = False,
    ) -> Run:
        label = self._label(what)
        cpu0 = hostside.cpu_s(hosts)
        sample = measure.run(
            label, argv, env=env, cwd=cwd, timeout=self.s.timeout_s, log_dir=self.logs
        )
        cpu1 = hostside.cpu_s(hosts)
        host_cpu: float | None = None
        if all(cpu0[h] is not None and cpu1[h] is not None for h in hosts):
            host_cpu = sum(float(cpu1[h] or 0) - float(cpu0[h] or 0) for h in hosts)
        run = Run(sample=sample, hosts=list(hosts), host_cpu_s=host_cpu)
        if ssh:
            firsts = [hostside.first_ssh(h, sample.started) for h in hosts]
            seen = [t for t in firsts if t is not None]
            if seen:
                run.first_ssh_s = min(seen) - sample.started
        if apt:
            until = sample.started + sample.wall_s + 1
            run.apt_updates = {h: hostside.apt_updates(h, sample.started, until) for h in hosts}
        self.log(
            f"  {label}: rc {sample.rc}, {sample.wall_s:.1f} s wall, controller "
            f"{sample.cpu_s:.2f} CPU-s, hosts "
            + ("?" if host_cpu is None else f"{host_cpu:.2f}")
            + " CPU-s"
        )
        return run

    def provision_run(
        self,
        what: str,
        args: Sequence[str],
        hostside: HostSide,
        hosts: Sequence[str],
        *,
        ok_rc: Sequence[int],
        ssh: bool = False,
        apt: bool = False,
    ) -> Run:
        """`provision ARGS --report-dir DIR`: read its report, the recap and the command it ran."""
        report_dir = self.work / "reports" / f"{self._n + 1:03d}-{what}"
        argv = [str(PROVISION), *args, "--report-dir", str(report_dir)]
        run = self.measured(what, argv, self.provision_env(), hostside, hosts, ssh=ssh, apt=apt)
        report_file = report_dir / "report.json"
        if report_file.exists():
            run.report = json.loads(report_file.read_text(encoding="utf-8"))
        artifacts = (run.report or {}).get("artifacts")
        if artifacts:
            art = Path(artifacts)
            with contextlib.suppress(OSError, ValueError):
                run.command = json.loads((art / "command").read_text(encoding="utf-8"))
            with contextlib.suppress(OSError):
                run.recap = parse.play_recap((art / "stdout").read_text(encoding="utf-8"))
        events = _events(run.report)
        run.phases = phases(run.report, run.sample, events)
        run.changed_tasks = changed_tasks(events)
        if run.sample.rc not in ok_rc:
            words = "provision " + " ".join(a for a in args[:1] if not a.startswith("-"))
            problems = self._problems(run)
            raise BenchError(
                f"`{words.strip()}` exited {run.sample.rc}"
                + (f": {problems}" if problems else f": {_tail(run.sample.output)}")
            )
        return run

    @staticmethod
    def _problems(run: Run) -> str:
        """The failing checks of a report, failed tasks first, for a reason line."""
        tasks: list[str] = []
        checks: list[str] = []
        for host, entry in ((run.report or {}).get("hosts") or {}).items():
            for c in entry.get("checks", []):
                if c.get("status") != "fail":
                    continue
                if str(c.get("id", "")).endswith(".task"):
                    tasks.append(f"{host}: {c.get('id')}: {str(c.get('actual'))[:240]}")
                else:
                    checks.append(str(c.get("id")))
        parts = tasks[:2]
        if checks:
            parts.append(f"{len(checks)} failed check(s): {', '.join(checks[:8])}")
        return "; ".join(parts)

    def plain_run(
        self,
        what: str,
        command: dict[str, Any],
        env: dict[str, str],
        hostside: HostSide,
        hosts: Sequence[str],
        *,
        ssh: bool = False,
    ) -> Run:
        """Plain ansible-playbook with the argv the CLI used, in the CLI's working directory."""
        argv = list(command["command"])
        argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
        run = self.measured(what, argv, env, hostside, hosts, cwd=command.get("cwd"), ssh=ssh)
        path = Path(run.sample.output_path)
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        run.recap = parse.play_recap(text or run.sample.output)
        if run.sample.rc != 0:
            raise BenchError(
                f"plain ansible-playbook exited {run.sample.rc}: {_tail(run.sample.output)}"
            )
        return run

    def p1_plain_env(self, command: dict[str, Any]) -> dict[str, str]:
        """P1's B: the environment the CLI gave ansible-playbook (runner.build_env: pipelining,
        host key checking, known hosts, collections path), without ansible-runner's own keys."""
        recorded = {str(k): str(v) for k, v in (command.get("env") or {}).items()}
        env = {
            k: v
            for k, v in recorded.items()
            if k not in RUNNER_ENV and not k.startswith(("RUNNER_", "AWX_"))
        }
        env["HOME"] = str(self.home)
        env.setdefault("PATH", self.base_env()["PATH"])
        return env

    def p2_plain_env(self) -> dict[str, str]:
        """P2's B: Ansible's default configuration (no ansible.cfg, no ANSIBLE_* variables)."""
        return self.base_env()

    # ----------------------------------------------------------------- the CLI's own variables
    def check_extravars_finding(self, stack_path: Path) -> None:
        """Does `provision check` turn validation off by itself? (the design says it does)"""
        from provisioner import extravars  # noqa: PLC0415
        from provisioner import stack as stk  # noqa: PLC0415
        from provisioner.settings import Settings  # noqa: PLC0415

        s = Settings(command="check")
        ev = extravars.build_extravars(s, stk.load(stack_path)).extravars
        if any(f.startswith("`provision check` hands") for f in self.findings):
            return
        if bool(ev.get("gpu_stack_validation_enabled")):
            stray = sorted(k for k in ev if k.startswith("validation_"))
            self.findings.append(
                "`provision check` hands ansible-playbook gpu_stack_validation_enabled="
                f"{ev.get('gpu_stack_validation_enabled')!r} (from the stack) and sets "
                f"{', '.join(stray) or 'nothing'} instead, a name no role reads: the nightly check "
                "runs the validation role on every host. The bench passes "
                "`-e gpu_stack_validation_enabled=false` to both sides so that it measures the "
                "designed check (assert + one probe); fix: provisioner/extravars.py "
                "build_extravars "
                "must set gpu_stack_validation_enabled."
            )

    def stack_show_vars(self, stack_path: Path) -> dict[str, Any]:
        """`provision stack show --vars --json` for the lab's stack."""
        sample = measure.run(
            self._label("stack-show"),
            [str(PROVISION), "stack", "show", "--vars", "--json", "--stack", str(stack_path)],
            env=self.provision_env(),
            log_dir=self.logs,
        )
        if sample.rc != 0:
            raise BenchError(f"provision stack show --vars exited {sample.rc}: {sample.output}")
        text = Path(sample.output_path).read_text(encoding="utf-8")
        start = text.find("{")
        return dict(json.loads(text[start:]))

    @staticmethod
    def extravars_of(command: dict[str, Any]) -> dict[str, Any]:
        argv = list(command.get("command") or [])
        out: dict[str, Any] = {}
        for i, arg in enumerate(argv[:-1]):
            value = argv[i + 1]
            if arg not in ("-e", "--extra-vars"):
                continue
            if value.startswith("{"):
                out.update(json.loads(value))
            elif value.startswith("@"):  # runs/<id>/extravars, kept by provisioner.runner
                with contextlib.suppress(OSError, ValueError):
                    out.update(json.loads(Path(value[1:]).read_text(encoding="utf-8")))
        return out

    def same_variables(self, command: dict[str, Any], shown: dict[str, Any]) -> list[str]:
        """Keys of `stack show --vars` the CLI's run did not pass with the same value."""
        passed = self.extravars_of(command)
        overridden = set()
        for i, arg in enumerate(self.s.check_args[:-1]):
            if arg == "-e":
                overridden.add(self.s.check_args[i + 1].split("=", 1)[0])
        return sorted(k for k, v in shown.items() if k not in overridden and passed.get(k) != v)
