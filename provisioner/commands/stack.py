"""`provision stack show|validate`."""

from __future__ import annotations

import json
from typing import Any

import click

from provisioner import options


@click.group("stack")
def stack() -> None:
    """The stack manifest: the desired versions, checked against the compatibility matrix."""


@stack.command("show")
@options.stack
@options.json_output
@click.option("--vars", "as_vars", is_flag=True, help="Show the role variables it maps to.")
@click.pass_context
def show(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """Print the resolved stack (defaults filled in)."""
    from provisioner import stack as stk  # noqa: PLC0415

    p = ctx.params
    as_json, as_vars = bool(p["as_json"]), bool(p["as_vars"])
    s = stk.load(p["stack_path"])
    for w in s.all_warnings:
        click.echo(f"warning: {w}", err=True)
    data = s.to_extravars() if as_vars else s.data
    if as_json:
        click.echo(json.dumps(data, indent=2))
    elif as_vars:
        import yaml  # noqa: PLC0415

        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    else:
        click.echo(f"# source: {s.source}")
        click.echo(stk.dump(s), nl=False)


@stack.command("validate")
@options.stack
@click.pass_context
def validate(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """Check the stack against the matrix; exit 2 naming the rule it breaks."""
    from provisioner import stack as stk  # noqa: PLC0415

    s = stk.load(ctx.params["stack_path"])
    for w in s.all_warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"stack {s.name} ({s.source}): valid")
