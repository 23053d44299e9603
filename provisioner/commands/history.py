"""`provision history list|diff|show`."""

from __future__ import annotations

import json

import click


@click.group("history")
def history() -> None:
    """Reports of earlier runs, kept in the state directory."""


@history.command("list")
@click.option("-n", "--last", "last", type=click.IntRange(1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def list_runs(last: int, as_json: bool) -> None:
    """List recent runs (newest last)."""
    from provisioner.state import default_state  # noqa: PLC0415

    st = default_state()
    rows = []
    for path in st.list_history()[-last:]:
        try:
            rep = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        s = rep.get("summary", {})
        rows.append({
            "run_id": rep.get("run_id", path.stem),
            "command": rep.get("command"),
            "started": rep.get("started"),
            "exit_code": rep.get("exit_code"),
            "summary": {k: s.get(k, 0) for k in
                        ("hosts", "ok", "changed", "drift", "failed", "unreachable")},
        })
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no runs in {st.history}")
    for r in rows:
        s = r["summary"]
        counts = " ".join(f"{k}={v}" for k, v in s.items() if v)
        click.echo(f"{r['run_id']}  {r['command']:<8}  exit {r['exit_code']}  {counts}")


@history.command("diff", context_settings={"ignore_unknown_options": True})
@click.argument("run_a")
@click.argument("run_b", required=False, default="latest")
@click.option("--json", "as_json", is_flag=True)
@click.option("--all", "show_all", is_flag=True, help="Also list hosts with no changes.")
def diff(run_a: str, run_b: str, as_json: bool, show_all: bool) -> None:
    """What changed from RUN_A to RUN_B (ids, id prefixes, files, latest, previous, -N)."""
    from provisioner.exitcodes import UsageProblem  # noqa: PLC0415
    from provisioner.history import diff_reports, format_diff  # noqa: PLC0415
    from provisioner.state import default_state  # noqa: PLC0415

    st = default_state()
    try:
        a, b = st.load_report(run_a), st.load_report(run_b)
    except LookupError as exc:
        raise UsageProblem(str(exc)) from exc
    diffs = diff_reports(a, b)
    if as_json:
        click.echo(json.dumps(
            {"from": a.get("run_id"), "to": b.get("run_id"),
             "hosts": [d.to_dict() for d in diffs if show_all or not d.empty]}, indent=2))
        return
    click.echo(f"{a.get('run_id')} -> {b.get('run_id')}")
    lines = format_diff(diffs, only_changed=not show_all)
    for line in lines or ["no changes"]:
        click.echo(line)


@history.command("show")
@click.argument("run", default="latest")
def show(run: str) -> None:
    """Print a stored report.json."""
    from provisioner.exitcodes import UsageProblem  # noqa: PLC0415
    from provisioner.state import default_state  # noqa: PLC0415

    try:
        click.echo(json.dumps(default_state().load_report(run), indent=2))
    except LookupError as exc:
        raise UsageProblem(str(exc)) from exc
