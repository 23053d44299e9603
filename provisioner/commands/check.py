"""`provision check`: read-only compliance (playbooks/check.yml in check mode)."""

from __future__ import annotations

from typing import Any

import click

from provisioner import options
from provisioner.exitcodes import EXIT_CODES_HELP


@click.command(
    "check",
    epilog="Exit codes for check: 0 compliant, 5 drift, 1 failed, 3 unreachable, 130 interrupted. "
    + EXIT_CODES_HELP,
)
@options.targets
@options.run_opts
@click.option("--validate", is_flag=True, help="Also run the validation role (uses the GPUs).")
@click.pass_context
def check(ctx: click.Context, /, validate: bool, **params: Any) -> None:  # noqa: ANN401
    """Read-only compliance check: every check passes, drifts or fails; nothing is changed.

    Prints what changed since the previous check per host (new problems, resolved ones, versions).
    """
    from provisioner.session import Settings, execute  # noqa: PLC0415

    merged = options.merged(ctx, params)
    merged.pop("check_mode", None)
    merged.pop("no_reboot", None)
    ctx.exit(execute(Settings.from_params("check", merged, validate=validate)))
