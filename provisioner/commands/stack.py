"""`provision stack show|validate`."""

from __future__ import annotations

import json
from pathlib import Path

import click

_stack_opt = click.option(
    "--stack", "stack_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
    envvar="PROVISION_STACK", help="Stack manifest (default: the built-in stack).",
)


@click.group("stack")
def stack() -> None:
    """The stack manifest: the desired versions, checked against the compatibility matrix."""


@stack.command("show")
@_stack_opt
@click.option("--json", "as_json", is_flag=True, help="JSON instead of YAML.")
@click.option("--vars", "as_vars", is_flag=True, help="Show the role variables it maps to.")
def show(stack_path: Path | None, as_json: bool, as_vars: bool) -> None:
    """Print the resolved stack (defaults filled in)."""
    from provisioner import stack as stk  # noqa: PLC0415

    s = stk.load(stack_path)
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
@_stack_opt
def validate(stack_path: Path | None) -> None:
    """Check the stack against the matrix; exit 2 naming the rule it breaks."""
    from provisioner import stack as stk  # noqa: PLC0415

    s = stk.load(stack_path)
    for w in s.all_warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"stack {s.name} ({s.source}): valid")
