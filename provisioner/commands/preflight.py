"""`provision preflight`: the paramiko probe alone (no Ansible)."""

from __future__ import annotations

import json
from typing import Any

import click

from provisioner import options


@click.command(
    "preflight",
    epilog="Exit codes: 0 all hosts ready | 1 a host failed a check (sudo, cloud-init) | "
    "3 a host unreachable (connect, host key, auth) | 2 usage error.",
)
@options.targets
@options.json_output
@click.pass_context
def preflight(ctx: click.Context, /, **_params: Any) -> None:  # noqa: ANN401
    """Probe all hosts in parallel over SSH: reachable, host key, auth, sudo, OS, GPUs, driver."""
    from provisioner.exitcodes import exit_code_for  # noqa: PLC0415
    from provisioner.progress import ssh_preflight_lines  # noqa: PLC0415
    from provisioner.session import resolve_targets  # noqa: PLC0415
    from provisioner.settings import Settings, require_targets  # noqa: PLC0415
    from provisioner.ssh_preflight import probe_options, run_ssh_preflight  # noqa: PLC0415
    from provisioner.wait import wait_hosts  # noqa: PLC0415

    s = Settings.from_params("preflight", ctx.params)
    if s.local:
        raise click.UsageError("--local: the preflight probes hosts over SSH; there is nothing "
                               "to probe on this machine (run `provision --local`)", ctx)
    require_targets(ctx, s)
    tg = resolve_targets(s)
    waited = wait_hosts(s, tg.targets)
    ready = [t for t in tg.targets if waited.get(t.name) is None or waited[t.name].ok]
    probed = {r.host: r for r in run_ssh_preflight(ready, probe_options(s))} if ready else {}
    results = [probed.get(t.name) or waited[t.name] for t in tg.targets]
    if s.as_json:
        click.echo(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        for line in ssh_preflight_lines(results):
            click.echo(line)
    statuses = {r.host: {"skipped": "ok"}.get(r.status, r.status) for r in results}
    ctx.exit(int(exit_code_for(statuses)))
