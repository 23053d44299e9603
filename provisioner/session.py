"""One `provision` run end to end: stack, targets, preflight, playbook, report, exit code.

The commands (`provision`, `provision check`, `provision validate`) are thin wrappers around
`execute()`; everything here is plain Python, testable with a fake runner.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import click

from provisioner import inventory as inv
from provisioner import local
from provisioner import stack as stk
from provisioner.content import Content, locate
from provisioner.events import HostState, RunState
from provisioner.exitcodes import ProvisionError, SetupError, UsageProblem, exit_code_for
from provisioner.extravars import build_extravars
from provisioner.history import diff_reports, format_diff
from provisioner.progress import Progress, json_summary, ssh_preflight_lines, summary_table
from provisioner.report_model import Changes, Check, HostReport, Report
from provisioner.reports import REPORT_FILES, iso, write_all
from provisioner.settings import NO_TARGETS, Settings
from provisioner.ssh_preflight import (
    DEFAULT_KNOWN_HOSTS,
    SshProbeResult,
    matrix_warnings,
    probe_options,
    python_warnings,
    run_ssh_preflight,
    ssh_failure_entry,
)
from provisioner.stack import Stack
from provisioner.state import StateDir, default_state, new_run_id
from provisioner.wait import wait_hosts

__all__ = ["Settings", "execute", "resolve_targets", "versions"]

DEFAULT_MAX_FORKS = 16  # without --forks: one fork per host, up to this many ...
CHECK_FORKS_PER_CPU = 4  # ... or, for the read-only check, up to this many per controller CPU


def default_forks(command: str, hosts: int, cpus: int | None = None) -> int:
    """Forks without --forks: one per host, at most 16 for runs that change hosts (package
    downloads share the mirror), at most 4 per controller CPU (and at least 16) for `check`, whose
    forks mostly wait on SSH (about 0.4 controller CPU-seconds per host; docs/benchmarks.md P7)."""
    cap = DEFAULT_MAX_FORKS
    if command == "check":
        cap = max(DEFAULT_MAX_FORKS, CHECK_FORKS_PER_CPU * (cpus or os.cpu_count() or 1))
    return max(1, min(hosts, cap))


PLAYBOOKS = {"run": "site.yml", "check": "check.yml", "validate": "validate.yml"}


def versions() -> dict[str, str]:
    out = {}
    for name, dist in (
        ("provision", "provision"),
        ("ansible-core", "ansible-core"),
        ("ansible-runner", "ansible-runner"),
    ):
        try:
            out[name] = version(dist)
        except PackageNotFoundError:
            out[name] = "not installed"
    out["python"] = platform.python_version()
    return out


@dataclass
class Targets:
    targets: list[inv.Target]
    inventory_path: Path | None  # None: build one from --host
    from_hosts: bool = field(default=False)


def resolve_targets(s: Settings, system: local.System | None = None) -> Targets:
    if s.local:
        return Targets([local.local_target(system or local.System())], None, from_hosts=True)
    if s.hosts and s.inventory:
        raise UsageProblem("give either --host or -i/--inventory, not both")
    connection = s.connection or "ssh"
    key = str(inv.check_key_file(s.key)) if s.key else None
    default_kh = DEFAULT_KNOWN_HOSTS.expanduser()
    if connection == "paramiko" and s.known_hosts and s.known_hosts.expanduser() != default_kh:
        raise UsageProblem(
            "--connection paramiko: Ansible's paramiko connection reads only ~/.ssh/known_hosts; "
            "use --connection ssh with --known-hosts, or add the keys to ~/.ssh/known_hosts"
        )
    if s.hosts:
        targets = inv.targets_from_hosts(
            s.hosts, port=s.port, user=s.user, key_file=key, connection=connection
        )
        if s.limit:
            targets = inv.limit_targets(targets, s.limit)
        return Targets(targets, None, from_hosts=True)
    if s.inventory:
        path = inv.check_inventory_path(s.inventory)
        targets = inv.targets_from_inventory(
            path, s.limit, port=s.port, user=s.user, key_file=key, connection=s.connection
        )
        return Targets(targets, path)
    raise UsageProblem(NO_TARGETS)


SPECIAL_TAGS = frozenset({"always", "never", "all", "tagged", "untagged"})


def check_tags(s: Settings, roles: list[str]) -> None:
    """--tags/--skip-tags take role names; a typo would silently run nothing, so refuse it."""
    if s.command == "validate" and (s.tags or s.skip_tags):
        # validate.yml runs one role through include_role: --tags would skip it and exit 0
        raise UsageProblem("--tags/--skip-tags do not apply to `provision validate` (one role)")
    for opt, value in (("--tags", s.tags), ("--skip-tags", s.skip_tags)):
        for tag in (t.strip() for t in (value or "").split(",")):
            if tag and tag not in roles and tag not in SPECIAL_TAGS:
                raise UsageProblem(f"{opt}: unknown role {tag!r} (roles: {', '.join(roles)})")


def echo_err(line: str) -> None:
    click.echo(line, err=True)


RunFn = Callable[..., Any]
PreflightFn = Callable[..., list[SshProbeResult]]
WaitFn = Callable[..., list[SshProbeResult]]


@dataclass
class Outcome:
    """What the preflight and the playbook produced, before it becomes a report."""

    hosts: dict[str, HostReport] = field(default_factory=dict)
    probes: dict[str, SshProbeResult] = field(default_factory=dict)
    good: list[inv.Target] = field(default_factory=list)
    artifacts: Path | None = None
    run_status: str = "successful"
    rc: int = 0


def _wait(s: Settings, tg: Targets, fn: WaitFn | None, out: Outcome) -> None:
    """--wait: hosts whose wait failed are reported (ssh.<stage>) and left out."""
    out.good = list(tg.targets)
    waited = wait_hosts(s, tg.targets, fn)
    for r in waited.values():
        if not r.ok:
            out.hosts[r.host] = ssh_failure_entry(r)
    out.good = [t for t in tg.targets if t.name not in waited or waited[t.name].ok]


def _ssh_preflight(
    s: Settings, tg: Targets, stack: Stack, fn: PreflightFn | None, out: Outcome
) -> None:
    if s.no_preflight or s.local or not out.good:
        return
    _take_preflight((fn or run_ssh_preflight)(out.good, probe_options(s)), stack, out)


def _take_preflight(results: list[SshProbeResult], stack: Stack, out: Outcome) -> None:
    """The preflight's lines and warnings; a host it rejects gets its `ssh.<stage>` entry and is
    left out of (or, after a check, has its Ansible result replaced)."""
    for line in ssh_preflight_lines(results):
        echo_err(line)
    distros = stack.distros()
    releases = stack.torch_releases()
    pt = stack.data["pytorch"]
    for r in results:
        out.probes[r.host] = r
        if r.status == "ok":
            warnings = matrix_warnings(r, distros, stack.carries(), stack.cuda_version)
            warnings += python_warnings(r, str(pt["version"]), str(pt["build"]), releases)
            r.warnings.extend(warnings)
            for w in warnings:
                echo_err(f"preflight {r.host}: warning: {w}")
        if not r.ok:
            out.hosts[r.host] = ssh_failure_entry(r)
    out.good = [t for t in out.good if t.name not in out.probes or out.probes[t.name].ok]


def diagnoses(s: Settings) -> bool:
    """`provision check` does not probe every host before (or beside) ansible-playbook: the check
    changes nothing, so the SSH preflight only diagnoses the hosts Ansible could not judge, and a
    host it rejects has its Ansible result replaced by the preflight's (ssh.connect, ssh.hostkey,
    ...). A healthy host costs one SSH login, not two (was: 0.1 controller CPU-s and an sshd login
    per host, beside the playbook; docs/benchmarks.md P1). Runs that change hosts, runs that send
    a become password, and runs whose preflight may learn host keys (--accept-new-host-keys: ssh
    must see the keys it appends) probe every host first."""
    return (s.read_only_check and not s.no_preflight and not s.local
            and not s.ask_become_pass and not s.accept_new_host_keys)


def unjudged(rstate: RunState, names: list[str]) -> list[str]:
    """The hosts a check's playbook did not judge: unreachable, failed before its probe reported
    (sudo, the target's Python), or never reported (the run died first)."""
    out = []
    for name in names:
        h = rstate.hosts.get(name)
        if h is None or h.unreachable or (h.failed and not h.check_lists):
            out.append(name)
    return out


class _Diagnosis:
    """The SSH preflight of a check, on the hosts that need it only: a host is queued as soon as
    Ansible reports it unreachable (its probe then overlaps the rest of the playbook), and after
    the run every host the playbook did not judge. One background thread probes the queue in
    batches (run_ssh_preflight: 32 at a time), started by the first host that needs it: a run
    where every host answers imports no paramiko and opens no second SSH connection."""

    def __init__(self, s: Settings, targets: list[inv.Target], fn: PreflightFn | None) -> None:
        self.s, self.fn = s, fn or run_ssh_preflight
        self.by_name = {t.name: t for t in targets}
        self.queued: set[str] = set()
        self.results: list[SshProbeResult] = []
        self.failure: list[BaseException] = []
        self._queue: list[inv.Target] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "runner_on_unreachable":
            self.add([str((event.get("event_data") or {}).get("host") or "")])

    def add(self, names: list[str]) -> None:
        with self._cond:
            for name in names:
                if name in self.by_name and name not in self.queued:
                    self.queued.add(name)
                    self._queue.append(self.by_name[name])
            if self._queue and self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="provision-preflight", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                got = self.fn(batch, probe_options(self.s))
            except BaseException as exc:  # re-raised in the main thread
                self.failure.append(exc)
                return
            with self._cond:
                self.results.extend(got)

    def finish(self, more: list[str], *, canceled: bool = False) -> list[SshProbeResult]:
        """The results, after the hosts in `more` are probed too. A cancelled run waits for no
        probe (daemon threads): its hosts are reported interrupted, not diagnosed."""
        if not canceled:
            self.add(more)
        with self._cond:
            self._closed = True
            if canceled:
                self._queue.clear()
            self._cond.notify_all()
        if canceled:
            return []
        if self._thread is not None:
            self._thread.join()
        if self.failure:
            raise self.failure[0]
        return self.results


def _diagnosed_check(
    s: Settings, stack: Stack, fn: PreflightFn | None, out: Outcome, *,
    ansible: Callable[[Callable[[dict[str, Any]], None] | None], RunState],
) -> RunState:
    diagnosis = _Diagnosis(s, out.good, fn)
    rstate = ansible(diagnosis.on_event)
    canceled = out.run_status == "canceled"
    more = [] if canceled else unjudged(rstate, list(diagnosis.by_name))
    # a host the preflight rejects gets its entry, which _host_entries keeps over Ansible's
    _take_preflight(diagnosis.finish(more, canceled=canceled), stack, out)
    return rstate


def _ansible(
    s: Settings,
    tg: Targets,
    *,
    content: Content,
    extravars: dict[str, Any],
    secrets: frozenset[str] = frozenset(),
    state: StateDir,
    run_id: str,
    run_fn: RunFn | None,
    out: Outcome,
    watch: Callable[[dict[str, Any]], None] | None = None,
) -> RunState:
    rstate = RunState(check_mode=s.ansible_check)
    if not out.good:
        return rstate
    from provisioner import runner  # noqa: PLC0415

    become_password = None
    if s.ask_become_pass:
        become_password = click.prompt("BECOME password", hide_input=True, err=True)
    limit = s.limit
    if len(out.good) != len(tg.targets):
        limit = ",".join(t.name for t in out.good)
    with tempfile.TemporaryDirectory(prefix="provision-inv-") as tmp:
        req = runner.RunRequest(
            project_dir=content.playbooks,
            playbook=PLAYBOOKS[s.command],
            collections_path=content.collections_path,
            roles_path=content.roles if content.kind == "override" else None,
            inventory=tg.inventory_path or inv.write_inventory(tg.targets, Path(tmp)),
            artifact_dir=state.runs,
            ident=run_id,
            extravars=extravars,
            limit=limit,
            tags=s.tags,
            skip_tags=s.skip_tags,
            check=s.ansible_check,
            diff=bool(s.diff),
            verbosity=s.verbosity,
            forks=s.forks or default_forks(s.command, len(out.good)),
            become=s.become is not False and not s.local,
            become_password=become_password,
            secrets=secrets.union(*(t.secrets for t in tg.targets)),
            known_hosts=s.known_hosts.expanduser().resolve() if s.known_hosts else None,
        )
        progress = Progress(rstate, verbosity=s.verbosity)

        def on_event(event: dict[str, Any]) -> None:
            progress.on_event(event)
            if watch is not None:
                watch(event)

        with progress:
            result = (run_fn or runner.run_playbook)(req, on_event)
        lock_run = str(extravars.get("gpu_stack_run_id") or "") if run_fn is None else ""
        if result.status == "canceled":
            echo_err("interrupted: the run was cancelled")
            if lock_run:
                _release_locks(req, lock_run)
        elif lock_run:
            # a host lost mid-run (connection cut, a reboot) never ran the play's release: free
            # its lock now if it answers again (else it is taken over once stale)
            lost = sorted(name for name, h in rstate.hosts.items() if h.unreachable)
            if lost:
                _release_locks(req, lock_run, limit=",".join(lost))
    rstate.apply_stats({k: dict(v) for k, v in result.stats.items()})
    out.artifacts, out.run_status, out.rc = result.artifacts, result.status, result.rc
    return rstate


def _release_locks(
    req: Any, run_id: str, limit: str | None = None  # noqa: ANN401 - a runner.RunRequest
) -> None:
    """After an interrupted run, or on hosts lost mid-run (`limit`): release this run's
    provisioning locks (playbooks/unlock.yml), so the next run is not refused by them. A second
    Ctrl-C, or a host still down, leaves them to go stale."""
    import dataclasses  # noqa: PLC0415

    from provisioner import runner  # noqa: PLC0415

    echo_err(f"releasing the provisioning locks of run {run_id} ...")
    unlock = dataclasses.replace(
        req, playbook="unlock.yml", ident=f"{req.ident}-unlock",
        extravars={"gpu_stack_run_id": run_id}, check=False, diff=False, tags=None,
        skip_tags=None, limit=limit or req.limit,
    )
    try:
        result = runner.run_playbook(unlock, lambda _event: None)
    except (KeyboardInterrupt, ProvisionError) as exc:
        echo_err(f"warning: locks not released ({exc or 'interrupted'}); they are taken over "
                 "once stale (gpu_stack_lock_stale_s)")
        return
    if result.status != "successful":
        echo_err(f"warning: releasing the locks ended {result.status}; they are taken over once "
                 "stale (gpu_stack_lock_stale_s)")


def controller_name() -> str:
    """user@host of the controller, as another run sees the lock holder."""
    import getpass  # noqa: PLC0415
    import socket  # noqa: PLC0415

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


INTERRUPTED_MSG = "the run was interrupted (Ctrl-C or SIGTERM) before this host's play finished"
# a host in one of these states had not finished when the run was cancelled
UNFINISHED = ("ok", "changed", "drift")


def _host_status(s: Settings, h: HostState, out: Outcome) -> tuple[str, str]:
    status = h.status(check_mode=s.ansible_check)
    # a `fail` check without a failed task is a probe's plan in the middle of a role (what the
    # role was about to change when the run was cut off), not a failed host
    unfinished = status in UNFINISHED or (status == "failed" and not h.failed)
    if out.run_status == "canceled" and unfinished:
        return "interrupted", INTERRUPTED_MSG
    return status, h.unreachable_msg


def _host_entries(s: Settings, tg: Targets, rstate: RunState, out: Outcome) -> None:
    for name, h in rstate.hosts.items():
        if name in out.hosts:
            continue
        status, message = _host_status(s, h, out)
        out.hosts[name] = HostReport(
            status=status,
            checks=[Check.from_dict(c) for c in h.checks],
            facts=dict(h.facts),
            validation=h.validation,
            counts={"ok": h.ok, "changed": h.changed, "failed": h.failed, "skipped": h.skipped},
            message=message,
            preflight=out.probes[name].to_dict() if name in out.probes else None,
        )
    # hosts Ansible never reported (e.g. a playbook error before the first task)
    for t in out.good:
        if t.name in out.hosts or out.run_status == "successful":
            continue
        if out.run_status == "canceled":
            out.hosts[t.name] = HostReport(status="interrupted", message=INTERRUPTED_MSG)
        else:
            why = rstate.early_error()
            out.hosts[t.name] = HostReport(
                status="failed",
                message=f"the run ended {out.run_status} (rc {out.rc}) before this host ran"
                + (f": ansible-playbook said: {why}" if why else ""),
                preflight=out.probes[t.name].to_dict() if t.name in out.probes else None,
            )
    order = [t.name for t in tg.targets]
    out.hosts = {
        **{h: out.hosts[h] for h in order if h in out.hosts},
        **{h: e for h, e in out.hosts.items() if h not in order},
    }


def _report(
    s: Settings, stack: Stack, run_id: str, out: Outcome, *, started: float, finished: float
) -> Report:
    statuses = {h: e.status for h, e in out.hosts.items()}
    code = exit_code_for(
        statuses, run_status=out.run_status, rc=out.rc, drift_is_error=s.command == "check"
    )
    v = versions()
    return Report(
        command=s.command,
        run_id=run_id,
        hosts=out.hosts,
        version=v["provision"],
        versions=v,
        started=iso(started),
        finished=iso(finished),
        finished_ts=round(finished, 3),
        duration_s=round(finished - started, 3),
        check_mode=s.ansible_check,
        run_status=out.run_status,
        ansible_rc=out.rc,
        exit_code=int(code),
        stack=stack.data,
        stack_source=stack.source,
        stack_warnings=list(stack.warnings),
        artifacts=str(out.artifacts) if out.artifacts else None,
    )


def _publish(s: Settings, report: Report, state: StateDir) -> None:
    lines: list[str] = []
    previous = None
    if s.command == "check":
        previous = state.previous_report(
            s.command, report.run_id, set(report.hosts), warn=lambda m: echo_err(f"warning: {m}")
        )
    if previous is not None:
        diffs = diff_reports(previous, report)
        report.changes = Changes(since=previous.run_id, hosts=[d for d in diffs if not d.empty])
        body = format_diff(diffs)
        lines = [f"changes since {previous.run_id}:", *(f"  {x}" for x in body)]
        if not body:
            lines = [f"no changes since {previous.run_id}"]
    try:
        state.save_report(report)
    except OSError as exc:
        raise SetupError(f"cannot write the history in {state.history}: {exc}") from exc
    if s.report_dir is not None:
        try:
            report.report_files = [str(p) for p in write_all(report, s.report_dir.expanduser())]
        except OSError as exc:
            # checked before the run; failing now (a full disk) leaves the run's own exit code
            # (was: replaced by 2) and no partial set
            echo_err(f"error: --report-dir {s.report_dir}: {exc}; none of the report files was "
                     f"written; the run's report is in {state.history}")
    stream = sys.stderr if s.as_json else sys.stdout
    for line in lines:
        click.echo(line, file=stream)
    summary_table(report, stream)
    if s.as_json:
        click.echo(json_summary(report))


def _check_report_dir(s: Settings) -> None:
    """An unwritable --report-dir is a usage error found before the run, not after it."""
    if s.report_dir is None:
        return
    d = s.report_dir.expanduser()
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".provision-write-test-"):
            pass
        for name in REPORT_FILES:
            if (d / name).is_dir():
                raise IsADirectoryError(f"{d / name} is a directory")
    except OSError as exc:
        raise UsageProblem(f"--report-dir {s.report_dir}: not writable ({exc})") from exc


def execute(
    s: Settings,
    *,
    state: StateDir | None = None,
    run_fn: RunFn | None = None,
    preflight_fn: PreflightFn | None = None,
    wait_fn: WaitFn | None = None,
    system: local.System | None = None,
    now: Callable[[], float] = time.time,
) -> int:
    """Run one command; returns the exit code. Raises ProvisionError for usage/setup problems."""
    started = now()
    rv = build_extravars(s, stk.load(s.stack_path))
    stack, extravars = rv.stack, rv.extravars
    system = system or local.System()
    if s.local:
        local.check(s, extravars, system)
    for w in stack.warnings if not s.no_preflight else stack.all_warnings:
        echo_err(f"warning: stack: {w}")
    tg = resolve_targets(s, system)
    content = locate()
    content.playbook(PLAYBOOKS[s.command])  # SetupError (exit 4) before any host is contacted
    check_tags(s, content.role_names())
    state = state or default_state()
    try:
        state.ensure()
    except OSError as exc:
        raise SetupError(
            f"cannot create the state directory {state.root}: {exc} (set PROVISION_STATE_DIR)"
        ) from exc
    if run_fn is None:
        from provisioner import runner  # noqa: PLC0415

        runner.find_ansible_playbook()  # SetupError (exit 4) before any host is contacted
    _check_report_dir(s)
    run_id = new_run_id(s.command)
    # health.gpu_count: the GPUs each host had at its last passing run (the inventory's
    # gpu_stack_health_expected_gpus wins)
    extravars.setdefault(
        "gpu_stack_health_history_gpus",
        state.gpu_counts([t.name for t in tg.targets]),
    )
    if s.command == "run" and not s.ansible_check:
        # the host's provisioning lock names this run (provision.gpu.host_lock)
        extravars.setdefault("gpu_stack_run_id", run_id)
        extravars.setdefault("gpu_stack_run_controller", controller_name())
        extravars.setdefault("gpu_stack_run_pid", os.getpid())
    resumed = None
    if s.local and s.command == "run" and not s.ansible_check:
        resumed = local.begin(state.root, system, echo_err)
    out = Outcome()
    _wait(s, tg, wait_fn, out)

    def ansible(watch: Callable[[dict[str, Any]], None] | None = None) -> RunState:
        return _ansible(
            s, tg, content=content, extravars=extravars, secrets=rv.secrets, state=state,
            run_id=run_id, run_fn=run_fn, out=out, watch=watch,
        )

    if diagnoses(s):
        rstate = _diagnosed_check(s, stack, preflight_fn, out, ansible=ansible)
    else:
        _ssh_preflight(s, tg, stack, preflight_fn, out)
        rstate = ansible()
    _host_entries(s, tg, rstate, out)
    report = _report(s, stack, run_id, out, started=started, finished=now())
    _publish(s, report, state)
    if s.local:
        local.after_run(s, report, state.root, system, echo_err, resumed=resumed)
    return report.exit_code
