"""`provision history list|diff|show`."""

from __future__ import annotations

import json
from typing import Any

import click

from provisioner import options
from provisioner.report_model import SUMMARY_KEYS, Report


@click.group("history")
def history() -> None:
    """Reports of earlier runs, kept in the state directory; the fleet view of one run."""


@history.command("list")
@click.option("-n", "--last", "last", type=click.IntRange(1), default=20, show_default=True)
@options.json_output
@click.pass_context
def list_runs(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """List recent runs (newest last)."""
    from provisioner.state import default_state  # noqa: PLC0415

    p = ctx.params
    st = default_state()
    rows = [_row(rep) for rep in st.iter_reports(st.list_history()[-int(p["last"]):], _warn)]
    if p["as_json"]:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no runs in {st.history}")
    for r in rows:
        counts = " ".join(f"{k}={v}" for k, v in r["summary"].items() if v)
        click.echo(f"{r['run_id']}  {r['command']:<8}  exit {r['exit_code']}  {counts}")


def _row(rep: Report) -> dict[str, Any]:
    s = rep.summary
    return {
        "run_id": rep.run_id,
        "command": rep.command,
        "started": rep.started,
        "exit_code": rep.exit_code,
        "summary": {k: s.get(k, 0) for k in SUMMARY_KEYS},
    }


def _warn(line: str) -> None:
    click.echo(f"warning: {line}", err=True)


@history.command("diff", context_settings={"ignore_unknown_options": True})
@click.argument("run_a")
@click.argument("run_b", required=False, default="latest")
@options.json_output
@click.option("--all", "show_all", is_flag=True, help="Also list hosts with no changes.")
@click.pass_context
def diff(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """What changed from RUN_A to RUN_B (ids, id prefixes, files, latest, previous, -N)."""
    from provisioner.history import diff_reports, format_diff  # noqa: PLC0415
    from provisioner.state import default_state  # noqa: PLC0415

    p = ctx.params
    st = default_state()
    a, b = st.load_report(p["run_a"]), st.load_report(p["run_b"])
    diffs = diff_reports(a, b)
    if p["as_json"]:
        click.echo(json.dumps(
            {"from": a.run_id, "to": b.run_id,
             "hosts": [d.to_dict() for d in diffs if p["show_all"] or not d.empty]}, indent=2))
        return
    click.echo(f"{a.run_id} -> {b.run_id}")
    lines = format_diff(diffs, only_changed=not p["show_all"])
    for line in lines or ["no changes"]:
        click.echo(line)


@history.command("show")
@click.argument("run", default="latest")
@click.pass_context
def show(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """Print a stored report.json."""
    from provisioner.state import default_state  # noqa: PLC0415

    p = ctx.params
    click.echo(json.dumps(default_state().load_raw(p["run"]), indent=2))


@history.command("fleet")
@click.argument("run", required=False)
@click.option(
    "--busbw-below",
    "below",
    type=click.FloatRange(0, 100, min_open=True, max_open=True),
    default=None,
    help="Flag a host more than this many % below its GPU model's median busbw [default: 10].",
)
@options.json_output
@click.pass_context
def fleet(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """All-reduce busbw per host against the median of its GPU model (RUN: default the newest
    run with validation results)."""
    from provisioner.fleet import BUSBW_BELOW_MEDIAN_PCT, busbw_rows, format_rows  # noqa: PLC0415
    from provisioner.state import default_state  # noqa: PLC0415

    p = ctx.params
    below = BUSBW_BELOW_MEDIAN_PCT if p["below"] is None else float(p["below"])
    st = default_state()
    if p["run"]:
        rep = st.load_report(p["run"])
        rows = busbw_rows(rep, below)
    else:
        rep, rows = None, []
        for candidate in reversed(list(st.iter_reports(st.list_history(), _warn))):
            rows = busbw_rows(candidate, below)
            if rows:
                rep = candidate
                break
    if p["as_json"]:
        click.echo(json.dumps(
            {"run_id": rep.run_id if rep else None, "busbw_below_median_pct": below,
             "hosts": [r.to_dict() for r in rows]}, indent=2))
        return
    if rep is None:
        click.echo(f"no run with validation results in {st.history}")
        return
    click.echo(f"{rep.run_id}  all-reduce busbw by GPU model")
    for line in format_rows(rows, below) or [f"no validation results in {rep.run_id}"]:
        click.echo(line)
