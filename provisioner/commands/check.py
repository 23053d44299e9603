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
@options.validate
@options.deep
@click.pass_context
def check(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """Read-only compliance check: every check passes, drifts or fails; nothing is changed.

    Prints what changed since the previous check per host (new problems, resolved ones, versions).
    """
    from provisioner.session import execute  # noqa: PLC0415
    from provisioner.settings import Settings, require_targets  # noqa: PLC0415

    s = Settings.from_params("check", ctx.params)
    require_targets(ctx, s)
    ctx.exit(execute(s))
