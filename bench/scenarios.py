"""The scenarios, in the order `python -m bench` runs them; each returns the entries it fills."""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench import measure
from bench import result_model as model
from bench.harness import CHECK_RC_OK, PROVISION, Bench, BenchError, Run
from bench.hostside import HostSide
from bench.result_model import goal_entry, median, not_measured, record

Entries = dict[str, Any]
# site.yml's lock tasks (changed on every run by design)
LOCK_TASKS = frozenset(
    {"Take the host's provisioning lock", "Release the host's provisioning lock"}
)
TWO_CORE_NOTE = (
    "lab hosts are containers on the controller's own CPU: on a small machine (2 cores) the hosts "
    "and the controller share it, so wall times grow with hosts faster than on real hosts"
)


def _check_args(b: Bench, fleet: Any, inventory: Path) -> list[str]:  # noqa: ANN401
    return [
        "check",
        "-i",
        str(inventory),
        "--stack",
        str(fleet.stack_path),
        "--known-hosts",
        str(fleet.known_hosts),
        *b.s.check_args,
    ]


def describe_command(command: dict[str, Any]) -> str:
    """The recorded ansible-playbook command line, its extra-vars JSON shortened."""
    words = []
    for w in command.get("command") or []:
        if w.startswith("{"):
            n = len(json.loads(w)) if w.endswith("}") else "?"
            words.append(f"<the CLI's extra vars: {n} keys>")
        else:
            words.append(w)
    return " ".join(words) + f" (in {command.get('cwd')})"


def _runs(runs: Sequence[Run]) -> list[dict[str, Any]]:
    return [r.to_json() for r in runs]


# ------------------------------------------------------------------------------ records: --help
def help_startup(b: Bench) -> Entries:
    n = 1 if b.s.smoke else max(3, b.s.repeat)
    samples = []
    for _ in range(n):
        s = measure.run(
            b._label("help"), [str(PROVISION), "--help"], env=b.provision_env(), log_dir=b.logs
        )
        if s.rc != 0:
            reason = f"provision --help exited {s.rc}"
            return {"help_startup_s": record(None, "s", [], reason=reason)}
        samples.append(s)
    b.log(f"provision --help: {median(s.wall_s for s in samples):.2f} s")
    return {
        "help_startup_s": record(
            median(s.wall_s for s in samples),
            "s",
            [s.to_json() for s in samples],
            cpu_s=round(median(s.cpu_s for s in samples), 3),
        )
    }


# ------------------------------------------------------------------------------ P1 and P3
CHECK_KEYS = ("P3", "check_cpu_s_per_host", "check_tasks_per_host", "P7")


def check_fleet(b: Bench, fleet: Any) -> Entries:  # noqa: ANN401
    """P1 (A/B on p1_hosts hosts), P3 (A over the sizes), the check figures, first SSH."""
    hs = HostSide(fleet)
    b.check_extravars_finding(Path(fleet.stack_path))
    out, a_runs = p1(b, fleet, hs)
    if "P3" in b.s.skip:
        out.update({key: not_measured(key, "skipped (BENCH_SKIP)") for key in CHECK_KEYS})
    else:
        out.update(p3(b, fleet, hs, a_runs))
    return out


def _pair(a: Run, bb: Run) -> dict[str, Any]:
    ratio = round(a.sample.wall_s / bb.sample.wall_s, 4)
    return {"A": a.to_json(), "B": bb.to_json(), "ratio": ratio}


def _median_or_none(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(median(vals), 3) if vals else None


def _median_phases(runs: Sequence[Run]) -> dict[str, float]:
    keys = sorted({k for r in runs for k in r.phases})
    return {
        k: round(median(r.phases[k] for r in runs if k in r.phases), 3)
        for k in keys
    }


def p1(b: Bench, fleet: Any, hs: HostSide) -> tuple[Entries, list[Run]]:  # noqa: ANN401
    """A and B alternated (AB, BA, AB, ...), after one warm-up of each."""
    if "P1" in b.s.skip:
        reason = "skipped (BENCH_SKIP)"
        return {"P1": not_measured("P1", reason),
                "first_ssh_s": record(None, "s", [], reason=reason)}, []
    hosts = [h.name for h in fleet.hosts][: b.s.p1_hosts]
    a_args = _check_args(b, fleet, b.inventory(fleet, hosts, f"check-{len(hosts)}"))
    a_runs: list[Run] = []
    b_runs: list[Run] = []
    c_runs: list[Run] = []  # diagnostic: A without the CLI's SSH preflight (not in smoke mode)
    sides = "AB" if b.s.smoke else "ABC"
    b.log(f"P1: provision check vs plain ansible-playbook --check, {len(hosts)} host(s)")
    try:
        first = b.provision_run("p1-A-warmup", a_args, hs, hosts, ok_rc=CHECK_RC_OK)
        if not first.command:
            raise BenchError("the CLI's run left no artifacts/command to build B from")
        command = first.command
        differ = b.same_variables(command, b.stack_show_vars(Path(fleet.stack_path)))
        if differ:
            b.findings.append(
                "P1: the CLI's ansible-playbook variables differ from `provision stack show "
                f"--vars` in {', '.join(differ)}"
            )
        env_b = b.p1_plain_env(command)
        if b.s.warmup:
            b.plain_run("p1-B-warmup", command, env_b, hs, hosts)
        for i in range(b.s.repeat):
            for side in sides if i % 2 == 0 else sides[::-1]:
                if side == "A":
                    a_runs.append(
                        b.provision_run("p1-A", a_args, hs, hosts, ok_rc=CHECK_RC_OK, ssh=True)
                    )
                elif side == "B":
                    b_runs.append(b.plain_run("p1-B", command, env_b, hs, hosts, ssh=True))
                else:
                    c_args = [*a_args, "--no-preflight"]
                    c_runs.append(
                        b.provision_run("p1-A-no-preflight", c_args, hs, hosts, ok_rc=CHECK_RC_OK)
                    )
    except BenchError as exc:
        return {"P1": not_measured("P1", str(exc)),
                "first_ssh_s": record(None, "s", [], reason=f"P1 not measured: {exc}")}, []
    a_wall = median(r.sample.wall_s for r in a_runs)
    b_wall = median(r.sample.wall_s for r in b_runs)
    out: Entries = {}
    out["P1"] = goal_entry(
        "P1",
        a_wall / b_wall,
        [_pair(a, bb) for a, bb in zip(a_runs, b_runs, strict=True)],
        hosts=len(hosts),
        A_wall_s=round(a_wall, 3),
        B_wall_s=round(b_wall, 3),
        A_cpu_s=round(median(r.sample.cpu_s for r in a_runs), 3),
        B_cpu_s=round(median(r.sample.cpu_s for r in b_runs), 3),
        A_phases=_median_phases(a_runs),
        A_host_cpu_s=_median_or_none(r.host_cpu_s for r in a_runs),
        B_host_cpu_s=_median_or_none(r.host_cpu_s for r in b_runs),
        A_no_preflight_wall_s=_median_or_none(r.sample.wall_s for r in c_runs),
        A_no_preflight_runs=_runs(c_runs),
        A="provision " + shlex.join(a_args),
        B=describe_command(command),
        B_env=sorted(k for k in env_b if k.startswith("ANSIBLE_")),
        ratio_of="median A wall / median B wall",
    )
    b.log(f"P1 = {a_wall:.2f} s / {b_wall:.2f} s = {a_wall / b_wall:.3f}")
    a_first = [r.first_ssh_s for r in a_runs if r.first_ssh_s is not None]
    b_first = [r.first_ssh_s for r in b_runs if r.first_ssh_s is not None]
    out["first_ssh_s"] = record(
        median(a_first) if a_first else None,
        "s",
        [{"A": r.first_ssh_s, "B": rb.first_ssh_s} for r, rb in zip(a_runs, b_runs, strict=True)],
        reason="no sshd 'Accepted' entry found in the hosts' journals",
        plain_ansible_playbook_s=round(median(b_first), 3) if b_first else None,
        measured_as="process start to sshd's first 'Accepted publickey' on any host of the run",
    )
    return out, a_runs


def p3(b: Bench, fleet: Any, hs: HostSide, p1_runs: list[Run]) -> Entries:  # noqa: ANN401
    """`provision check` over the sizes, interleaved; P1's A runs serve P1's size."""
    names = [h.name for h in fleet.hosts]
    by_size: dict[int, list[Run]] = {n: [] for n in b.s.sizes}
    if p1_runs and len(p1_runs[0].hosts) in by_size:
        by_size[len(p1_runs[0].hosts)] = list(p1_runs)
    inventories = {n: b.inventory(fleet, names[:n], f"check-{n}") for n in b.s.sizes}
    b.log(f"P3: provision check over {', '.join(map(str, b.s.sizes))} host(s)")
    try:
        for _ in range(b.s.repeat):
            for n in (n for n in b.s.sizes if len(by_size[n]) < b.s.repeat):
                args = _check_args(b, fleet, inventories[n])
                by_size[n].append(
                    b.provision_run(f"p3-{n}", args, hs, names[:n], ok_rc=CHECK_RC_OK)
                )
    except BenchError as exc:
        return {key: not_measured(key, f"P3 runs failed: {exc}") for key in CHECK_KEYS}
    sizes = {str(n): size_row(runs) for n, runs in by_size.items()}
    largest = max(b.s.sizes)
    big = by_size[largest]
    out: Entries = {}
    out["P3"] = record(
        sizes[str(largest)]["wall_s"],
        "s",
        [],
        sizes=sizes,
        value_is=f"median wall time of `provision check` over {largest} host(s)",
        note=TWO_CORE_NOTE,
    )
    cpu_per_host = median(r.sample.cpu_s / largest for r in big)
    out["check_cpu_s_per_host"] = goal_entry(
        "check_cpu_s_per_host",
        cpu_per_host,
        [round(r.sample.cpu_s / largest, 4) for r in big],
        hosts=largest,
        host_cpu_s_per_host=round(float(sizes[str(largest)]["host_cpu_s"] or 0) / largest, 3),
        measured_as="user+sys of the whole controller process tree (provision, ansible-playbook, "
        "its forks, ssh and the ssh ControlPersist masters) / hosts",
    )
    tasks = [t for t in (r.tasks_per_host for r in big) if t is not None]
    out["check_tasks_per_host"] = (
        goal_entry(
            "check_tasks_per_host",
            median(tasks),
            tasks,
            hosts=largest,
            measured_as="PLAY RECAP per host: ok (changed included) + failed + skipped + rescued",
        )
        if tasks
        else not_measured("check_tasks_per_host", "no PLAY RECAP found in the runs' artifacts")
    )
    out["P7"] = project(b, sizes, cpu_per_host)
    return out


def size_row(runs: Sequence[Run]) -> dict[str, Any]:
    host_cpu = [r.host_cpu_s for r in runs if r.host_cpu_s is not None]
    tasks = [r.tasks_per_host for r in runs if r.tasks_per_host is not None]
    return {
        "wall_s": round(median(r.sample.wall_s for r in runs), 3),
        "controller_cpu_s": round(median(r.sample.cpu_s for r in runs), 3),
        "host_cpu_s": round(median(host_cpu), 3) if host_cpu else None,
        "tasks_per_host": median(tasks) if tasks else None,
        "phases": _median_phases(runs),
        "runs": _runs(runs),
    }


def project(b: Bench, sizes: dict[str, Any], cpu_per_host: float) -> dict[str, Any]:
    """P7 from the measured controller CPU per host and the per-host wall time of a 1-host check."""
    if "1" not in sizes:
        return not_measured("P7", "P3 did not measure a 1-host check (BENCH_SIZES lacks 1)")
    wall = float(sizes["1"]["wall_s"])
    p = model.Projection(
        nodes=b.s.p7_nodes,
        cores=b.s.p7_cores,
        forks=b.s.p7_forks,
        cpu_s_per_host=cpu_per_host,
        wall_s_per_host=wall,
    )
    from provisioner.session import default_forks  # noqa: PLC0415

    cli_forks = default_forks("check", b.s.p7_nodes, b.s.p7_cores)
    cli_default = model.Projection(
        nodes=b.s.p7_nodes,
        cores=b.s.p7_cores,
        forks=cli_forks,
        cpu_s_per_host=cpu_per_host,
        wall_s_per_host=wall,
    )
    lines = p.arithmetic()
    for line in lines:
        b.log(f"P7 {line}")
    return goal_entry(
        "P7",
        p.minutes,
        [],
        arithmetic=lines,
        inputs={
            "nodes": p.nodes,
            "cores": p.cores,
            "forks": p.forks,
            "cpu_s_per_host": round(cpu_per_host, 4),
            "wall_s_per_host": round(wall, 3),
        },
        assumptions=(
            "per-host wall time = the median wall of a 1-host `provision check` (a host in a wave "
            "takes as long as one host alone while the controller has CPU to spare); controller "
            "CPU per host from the largest P3 fleet; hosts answer like lab hosts (loopback SSH)"
        ),
        cli_default_forks=cli_forks,
        at_cli_default_forks=cli_default.arithmetic()[-1],
    )


def project_measured(b: Bench, fleet: dict[str, Any], from_p3: dict[str, Any] | None) -> Entries:
    """P7 from the measured light-fleet run (records.fleet_check): its controller CPU-s per host,
    and the wall time of its 1-host check as the per-host time of a wave."""
    cpu = float(fleet["controller_cpu_s_per_host"])
    wall = float(fleet["one_host_wall_s"])
    n, wall_n = int(fleet["hosts"]), float(fleet["value"])
    p = model.Projection(b.s.p7_nodes, b.s.p7_cores, b.s.p7_forks, cpu, wall)
    from provisioner.session import default_forks  # noqa: PLC0415

    cli_forks = default_forks("check", b.s.p7_nodes, b.s.p7_cores)
    cli_default = model.Projection(b.s.p7_nodes, b.s.p7_cores, cli_forks, cpu, wall)
    lines = [
        f"measured:    {n} light hosts in {wall_n:.1f} s at {fleet.get('forks')} forks (fan-out "
        f"reached {fleet.get('fanout_reached')}), {cpu:.3f} controller CPU-s/host, "
        f"load average before {fleet.get('load_avg_before')}",
        *p.arithmetic(),
    ]
    for line in lines:
        b.log(f"P7 {line}")
    detail: dict[str, Any] = {}
    if from_p3 and from_p3.get("value") is not None:
        detail["from_p3"] = {"value": from_p3["value"], "inputs": from_p3.get("inputs")}
    return goal_entry(
        "P7",
        p.minutes,
        [],
        arithmetic=lines,
        basis=f"records.fleet_check ({n} light hosts, measured)",
        inputs={
            "nodes": p.nodes,
            "cores": p.cores,
            "forks": p.forks,
            "cpu_s_per_host": round(cpu, 4),
            "wall_s_per_host": round(wall, 3),
            "measured_hosts": n,
            "measured_wall_s": wall_n,
        },
        assumptions=(
            f"controller CPU-s per host stays what {n} hosts measured (it is per host: forks, ssh "
            "and result handling, which do not grow with the fleet); a host in a wave takes as "
            "long as the measured 1-host check (true while forks x CPU-s/host / wall s/host <= "
            "cores); "
            "the controller's cores are free for the check; hosts answer like lab hosts over "
            "loopback SSH (a real network adds latency to the waves bound, not CPU); memory is not "
            "a bound (the measured peak PSS grows with forks, not with hosts)"
        ),
        cli_default_forks=cli_forks,
        at_cli_default_forks=cli_default.arithmetic()[-1],
        **detail,
    )


# ------------------------------------------------------------------------------ records: validation
def validation(b: Bench, fleet: Any, check_wall_1: float | None) -> Entries:  # noqa: ANN401
    """The validation program's own time on one host, inside `provision check --validate` (check
    mode: it runs on a host that is not provisioned yet, where `provision validate` fails the
    host on the driver checks first)."""
    if "records" in b.s.skip:
        return {"validation_s": record(None, "s", [], reason="skipped (BENCH_SKIP)")}
    hs = HostSide(fleet)
    host = fleet.hosts[0].name
    inv = b.inventory(fleet, [host], "validate-1")
    args = [
        "check", "--validate", "-i", str(inv), "--stack", str(fleet.stack_path),
        "--known-hosts", str(fleet.known_hosts), "-e", "gpu_stack_validation_enabled=true",
    ]
    runs: list[Run] = []
    b.log("validation: provision check --validate, 1 host")
    try:
        for _ in range(b.s.repeat):
            runs.append(b.provision_run("validate", args, hs, [host], ok_rc=CHECK_RC_OK))
    except BenchError as exc:
        return {"validation_s": record(None, "s", _runs(runs), reason=str(exc))}
    elapsed: list[float] = []
    backend = None
    for r in runs:
        v = (((r.report or {}).get("hosts") or {}).get(host) or {}).get("validation") or {}
        if isinstance(v.get("elapsed_s"), int | float):
            elapsed.append(float(v["elapsed_s"]))
            backend = v.get("backend")
    wall = median(r.sample.wall_s for r in runs)
    return {
        "validation_s": record(
            median(elapsed) if elapsed else None,
            "s",
            _runs(runs),
            reason="the reports carry no validation result (validation.elapsed_s)",
            check_validate_wall_s=round(wall, 3),
            added_to_check_s=None if check_wall_1 is None else round(wall - check_wall_1, 3),
            backend=backend,
            measured_as="the validation job's own time (torchrun, report validation.elapsed_s) "
            "on one lab host (gloo on CPU, 2 ranks), inside `provision check --validate`; "
            "added_to_check_s = that run's wall minus a 1-host `provision check`",
        )
    }


# ------------------------------------------------------------------------------ P4 and P2
def _converge_args(b: Bench, fleet: Any, inventory: Path) -> list[str]:  # noqa: ANN401
    return [
        "-i",
        str(inventory),
        "--stack",
        str(fleet.stack_path),
        "--known-hosts",
        str(fleet.known_hosts),
        *b.s.converge_args,
    ]


def converge_fleet(b: Bench, fleet: Any) -> Entries:  # noqa: ANN401
    """P4 (fresh runs vs the package installs alone) and P2 (no-op reruns, A/B)."""
    out: Entries = {}
    hs = HostSide(fleet)
    names = [h.name for h in fleet.hosts]
    b.check_extravars_finding(Path(fleet.stack_path))
    with_p4 = "P4" not in b.s.skip
    r = b.s.repeat if with_p4 else 1
    fresh, alone = names[:r], names[r : 2 * r]
    for h in names:
        hs.install_apt_counter(h)
    fresh_runs: list[Run] = []
    alone_runs: list[dict[str, Any]] = []
    transactions: list[list[str]] = []
    reason = ""
    b.log("P4: fresh provisioning runs vs the package installs alone")
    try:
        for i in range(r):
            inv = b.inventory(fleet, [fresh[i]], f"converge-{fresh[i]}")
            run = b.provision_run(
                "p4-fresh", _converge_args(b, fleet, inv), hs, [fresh[i]], ok_rc=(0,), apt=True
            )
            fresh_runs.append(run)
            if not transactions:
                history = hs.apt_history(fresh[i])
                transactions = [t.requested for t in history if t.requested]
                if not transactions:
                    raise BenchError("the fresh run installed no package (apt history is empty)")
            if with_p4:
                alone_runs.append(
                    installs_alone(
                        b, fleet, host=alone[i], donor=fresh[i], transactions=transactions
                    )
                )
    except BenchError as exc:
        reason = str(exc)
    if reason:
        why = f"no converged host: {reason}"
        out["P4"] = not_measured("P4", why, _runs(fresh_runs))
        out["P2"] = not_measured("P2", why)
        return out
    out["P2"] = (
        not_measured("P2", "skipped (BENCH_SKIP)")
        if "P2" in b.s.skip
        else noop_reruns(b, fleet, hs, fresh[0])
    )
    if not with_p4:
        out["P4"] = not_measured("P4", "skipped (BENCH_SKIP)")
        return out
    per_run = [sum(x.apt_updates.values()) / len(x.apt_updates) for x in fresh_runs]
    run_wall = median(x.sample.wall_s for x in fresh_runs)
    alone_sum = median(a["sum_s"] for a in alone_runs)
    out["P4"] = goal_entry(
        "P4",
        median(per_run),
        per_run,
        run_s=round(run_wall, 3),
        installs_alone_s=round(alone_sum, 3),
        run_over_installs=round(run_wall / alone_sum, 3) if alone_sum else None,
        installs=alone_runs,
        transactions=transactions,
        fresh_runs=_runs(fresh_runs),
        measured_as="apt index refreshes counted on the host by an APT::Update::Pre-Invoke hook "
        "(apt-get and python-apt alike); installs alone = one apt-get update plus each "
        "transaction of the fresh run as its own apt-get install, on another fresh host",
    )
    return out


def installs_alone(
    b: Bench, fleet: Any, *, host: str, donor: str, transactions: list[list[str]]  # noqa: ANN401
) -> dict[str, Any]:
    """On a fresh host: the repository as the run left it on `donor` (keyring, sources, pins),
    then one `apt-get update` and each transaction alone, timed on the host."""
    setup = (
        "tar -C / -cf - etc/apt/sources.list.d etc/apt/preferences.d usr/share/keyrings "
        "etc/apt/trusted.gpg.d 2>/dev/null | base64 -w0"
    )
    res = fleet.run(donor, setup, timeout=120)
    if res.rc not in (0, 2) or not res.stdout.strip():
        raise BenchError(f"cannot copy the apt setup of {donor}: {res.stderr[-300:]}")
    res = fleet.runtime(host).run_nsenter(
        "base64 -d | tar -C / -xf -", timeout=120, input_text=res.stdout.strip()
    )
    if res.rc != 0:
        raise BenchError(f"cannot set up apt on {host}: {res.stderr[-300:]}")
    steps: list[dict[str, Any]] = []
    commands = ["apt-get update -q"] + [
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
        "--allow-change-held-packages " + " ".join(shlex.quote(p) for p in tx)
        for tx in transactions
    ]
    for command in commands:
        t0 = time.monotonic()
        res = fleet.run(host, command, timeout=900)
        wall = time.monotonic() - t0
        if res.rc != 0:
            raise BenchError(f"{host}: `{command[:120]}` exited {res.rc}: {res.stderr[-300:]}")
        steps.append({"command": command, "wall_s": round(wall, 3)})
    total = sum(s["wall_s"] for s in steps)
    b.log(f"  installs alone on {host}: {len(steps)} steps, {total:.1f} s")
    return {"host": host, "sum_s": round(total, 3), "steps": steps}


def noop_reruns(b: Bench, fleet: Any, hs: HostSide, host: str) -> dict[str, Any]:  # noqa: ANN401
    """P2: `provision` rerun on a converged host vs plain ansible-playbook, Ansible's defaults."""
    inv = b.inventory(fleet, [host], f"noop-{host}")
    args = _converge_args(b, fleet, inv)
    a_runs: list[Run] = []
    b_runs: list[Run] = []
    b.log("P2: no-op rerun, provision vs plain ansible-playbook (default configuration)")
    try:
        first = b.provision_run("p2-A-warmup", args, hs, [host], ok_rc=(0,))
        if not first.command:
            raise BenchError("the CLI's run left no artifacts/command to build B from")
        # B is the conventional converge of the same roles: every task runs and proves its own
        # idempotence (`-e gpu_stack_converge=all`, the last -e wins). Without it B would skip
        # the components the probe found compliant exactly as A does: converge-from-check is in
        # the roles, and what P2 measures is that design against a plain idempotent rerun.
        command = {**first.command,
                   "command": [*first.command["command"], "-e", "gpu_stack_converge=all"]}
        env_b = b.p2_plain_env()
        for i in range(b.s.repeat):
            for side in "AB" if i % 2 == 0 else "BA":
                if side == "A":
                    a_runs.append(b.provision_run("p2-A", args, hs, [host], ok_rc=(0,)))
                else:
                    b_runs.append(b.plain_run("p2-B", command, env_b, hs, [host]))
    except BenchError as exc:
        return not_measured("P2", str(exc))
    # The host's provisioning lock is taken and released by every run (two changed results by
    # design); anything else that changes makes the rerun no no-op.
    extra = sorted({t for r in a_runs for t in r.changed_tasks if not _lock_task(t)})
    lock_changes = max((len(r.changed_tasks) for r in a_runs), default=0)
    b_changed = sorted({r.changed for r in b_runs})
    if extra or any(c > lock_changes for c in b_changed):
        return not_measured(
            "P2",
            f"the rerun is not a no-op: changed {extra or 'only the lock'} (provision), "
            f"changed counts {b_changed} (plain)",
            [{"A": a.to_json(), "B": bb.to_json()} for a, bb in zip(a_runs, b_runs, strict=True)],
        )
    if lock_changes:
        b.findings.append(
            f"A no-op rerun of a provisioned host reports {lock_changes} changed results, the host "
            "lock's take and release (provision.gpu.host_lock), so its report status is `changed`, "
            "never `ok`, and plain Ansible's recap shows changed="
            f"{lock_changes}: the lock should report changed=false."
        )
    a_wall = median(r.sample.wall_s for r in a_runs)
    b_wall = median(r.sample.wall_s for r in b_runs)
    return goal_entry(
        "P2",
        a_wall / b_wall,
        [_pair(a, bb) for a, bb in zip(a_runs, b_runs, strict=True)],
        A_wall_s=round(a_wall, 3),
        B_wall_s=round(b_wall, 3),
        A_cpu_s=round(median(r.sample.cpu_s for r in a_runs), 3),
        B_cpu_s=round(median(r.sample.cpu_s for r in b_runs), 3),
        tasks_per_host={"A": a_runs[0].tasks_per_host, "B": b_runs[0].tasks_per_host},
        A="provision " + shlex.join(args),
        B=describe_command(command) + "; no ANSIBLE_* variables, no ansible.cfg; every "
        "task runs (gpu_stack_converge=all)",
        ratio_of="median A wall / median B wall",
    )


def _lock_task(task: str) -> bool:
    return task.split(": ", 1)[-1] in LOCK_TASKS


def destroy(b: Bench, fleet: Any) -> None:  # noqa: ANN401
    with contextlib.suppress(Exception):
        fleet.destroy()
    b.log("lab: fleet destroyed")
