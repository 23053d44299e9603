"""The default action: `provision --host gpu01` runs playbooks/site.yml (the full provisioning).

The hidden subcommand `run`: provisioner.route makes it the subcommand when none is named."""

from __future__ import annotations

from typing import Any

import click

from provisioner import options
from provisioner.exitcodes import EXIT_CODES_HELP


@click.command("run", hidden=True, epilog=EXIT_CODES_HELP)
@options.targets
@options.run_opts
@options.full_run_opts
@click.pass_context
def run(ctx: click.Context, /, **params: Any) -> None:  # noqa: ANN401
    """The full provisioning: preflight, driver, CUDA, cuDNN, NCCL, environment, PyTorch,
    validation (`provision --host HOST`, or -i INVENTORY)."""
    from provisioner.session import execute  # noqa: PLC0415
    from provisioner.settings import Settings, require_targets  # noqa: PLC0415

    s = Settings.from_params("run", params)
    require_targets(ctx, s)
    ctx.exit(execute(s))
