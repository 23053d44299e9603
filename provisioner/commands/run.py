"""The default action: `provision --host gpu01` runs playbooks/site.yml (the full provisioning)."""

from __future__ import annotations

from typing import Any

import click


def run_full(ctx: click.Context, params: dict[str, Any]) -> None:
    from provisioner.session import Settings, execute  # noqa: PLC0415

    if not params.get("hosts") and not params.get("inventory"):
        click.echo(ctx.get_help())
        ctx.exit(2)
    ctx.exit(execute(Settings.from_params("run", params)))
