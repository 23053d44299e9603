"""`provision preflight`: the paramiko probe alone (no Ansible)."""

from __future__ import annotations

import json
from typing import Any

import click

from provisioner import options


@click.command(
    "preflight",
    epilog="Exit codes: 0 all hosts ready | 1 a host failed a check (sudo) | "
    "3 a host unreachable (connect, host key, auth) | 2 usage error.",
)
@options.targets
@options.preflight_opts
@click.pass_context
def preflight(ctx: click.Context, /, **params: Any) -> None:  # noqa: ANN401
    """Probe all hosts in parallel over SSH: reachable, host key, auth, sudo, OS, GPUs, driver."""
    from provisioner.exitcodes import exit_code_for  # noqa: PLC0415
    from provisioner.preflight import (  # noqa: PLC0415
        DEFAULT_KNOWN_HOSTS,
        ProbeOptions,
        run_preflight,
    )
    from provisioner.progress import preflight_lines  # noqa: PLC0415
    from provisioner.session import Settings, resolve_targets  # noqa: PLC0415

    merged = options.merged(ctx, params)
    s = Settings.from_params("run", merged)
    tg = resolve_targets(s)
    opts = ProbeOptions(
        known_hosts=(s.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser(),
        accept_new=bool(s.accept_new_host_keys),
        need_sudo=s.become is not False and not s.ask_become_pass,
    )
    results = run_preflight(tg.targets, opts)
    if s.as_json:
        click.echo(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        for line in preflight_lines(results):
            click.echo(line)
    statuses = {r.host: {"skipped": "ok"}.get(r.status, r.status) for r in results}
    ctx.exit(int(exit_code_for(statuses)))
