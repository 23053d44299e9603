"""The default action: `provision --host gpu01` runs playbooks/site.yml (the full provisioning)."""

from __future__ import annotations

import click


def run_full(ctx: click.Context) -> None:
    from provisioner.session import execute  # noqa: PLC0415
    from provisioner.settings import Settings, merge_params, require_targets  # noqa: PLC0415

    if not any(ctx.get_parameter_source(n) != click.core.ParameterSource.DEFAULT
               for n in ctx.params):
        click.echo(ctx.get_help())  # `provision` alone: the help, as a usage error
        ctx.exit(2)
    s = Settings.from_params("run", merge_params(ctx))
    require_targets(ctx, s)
    ctx.exit(execute(s))
