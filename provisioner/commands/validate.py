"""`provision validate`: the validation role alone (playbooks/validate.yml)."""

from __future__ import annotations

from typing import Any

import click

from provisioner import options
from provisioner.exitcodes import EXIT_CODES_HELP


@click.command("validate", epilog=EXIT_CODES_HELP)
@options.targets
@options.run_opts
@options.deep
@click.pass_context
def validate(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """Run the validation role alone (NCCL all-reduce, DDP smoke test), after the deep health tier
    (DCGM's diagnostic; --no-deep leaves it out)."""
    from provisioner.session import execute  # noqa: PLC0415
    from provisioner.settings import Settings, require_targets  # noqa: PLC0415

    s = Settings.from_params("validate", ctx.params)
    require_targets(ctx, s)
    ctx.exit(execute(s))
