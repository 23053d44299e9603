"""`provision checks`: every check id, what it verifies, and its remediation."""

from __future__ import annotations

import json
from typing import Any

import click

from provisioner import options


@click.command("checks")
@click.argument("prefix", required=False, default="")
@options.json_output
@click.pass_context
def checks(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """List every check id (or those starting with PREFIX, e.g. `driver`): what it verifies and
    how to fix it."""
    from provisioner import catalogue_loader as catalog  # noqa: PLC0415
    from provisioner.content import locate  # noqa: PLC0415
    from provisioner.exitcodes import UsageProblem  # noqa: PLC0415

    p = ctx.params
    entries, source = catalog.load(locate().plugins)
    prefix = str(p["prefix"] or "")
    shown = [c for c in entries if c.id.startswith(prefix)]
    if not shown:
        raise UsageProblem(f"no check id starts with {prefix!r} (ids: provision checks)")
    if p["as_json"]:
        click.echo(json.dumps([c.to_dict() for c in shown], indent=2))
        return
    for c in shown:
        click.echo(f"{c.id}  ({c.role})")
        click.echo(f"    verifies: {c.verifies}")
        click.echo(f"    fix: {c.remediation}")
        if c.action:
            click.echo(f"    action: up to {c.action}")
    click.echo(f"{len(shown)} check(s); catalogue: {source}", err=True)
