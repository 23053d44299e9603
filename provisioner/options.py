"""Options shared by several commands, defined once as decorators (pip-tools style).

Keep this module light: it is imported by `provision --help`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


targets = _stack(
    click.option("--host", "hosts", multiple=True, metavar="[USER@]HOST[:PORT]",
                 help="Target host (repeatable). Builds an inventory; group gpu_servers."),
    click.option("-i", "--inventory", metavar="PATH", envvar="PROVISION_INVENTORY",
                 help="Ansible inventory file or directory (must exist) instead of --host."),
    click.option("--limit", metavar="PATTERN", help="Limit the inventory to PATTERN."),
    click.option("--user", "-u", metavar="USER", help="SSH user (default: inventory or you)."),
    click.option("--port", type=click.IntRange(1, 65535), help="SSH port (default 22)."),
    click.option("--key", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                 help="SSH private key file."),
    click.option("--become/--no-become", default=None,
                 help="Use sudo on the targets (default: on)."),
    click.option("--ask-become-pass", "-K", is_flag=True, default=None,
                 help="Prompt for the sudo password."),
    click.option("--forks", type=click.IntRange(1, 500), help="Parallel hosts (Ansible forks)."),
    click.option("--connection", type=click.Choice(["ssh", "paramiko"]), default=None,
                 help="Connection plugin (default ssh)."),
    click.option("--known-hosts", type=click.Path(dir_okay=False, path_type=Path),
                 metavar="FILE", help="known_hosts file (default ~/.ssh/known_hosts)."),
    click.option("--accept-new-host-keys", is_flag=True, default=None,
                 help="Add unknown host keys to the known_hosts file (never changed ones)."),
)

run_opts = _stack(
    click.option("--stack", "stack_path", type=click.Path(dir_okay=False, path_type=Path),
                 metavar="FILE", envvar="PROVISION_STACK", help="Stack manifest (YAML)."),
    click.option("-e", "--extra-vars", "extra_vars", multiple=True, metavar="KEY=VALUE|@FILE",
                 help="Extra variables, as ansible-playbook takes them (repeatable); "
                      "they override the stack's."),
    click.option("--tags", metavar="ROLES", help="Only these roles (comma-separated)."),
    click.option("--skip-tags", metavar="ROLES", help="Skip these roles (comma-separated)."),
    click.option("--diff", is_flag=True, default=None, help="Show file differences."),
    click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path),
                 metavar="DIR", help="Write report.json, junit.xml and provision.prom here."),
    click.option("-v", "--verbose", "verbosity", count=True,
                 help="Ansible verbosity (-v .. -vvvv); -v also prints skipped tasks."),
    click.option("--json", "as_json", is_flag=True, default=None,
                 help="Print the machine-readable report on stdout."),
    click.option("--no-preflight", is_flag=True, default=None,
                 help="Skip the SSH preflight probe."),
)

full_run_opts = _stack(
    click.option("--check", "check_mode", is_flag=True, default=None,
                 help="Ansible check mode: report what would change, change nothing."),
    click.option("--no-reboot", is_flag=True, default=None,
                 help="Never reboot; a host that needs one fails with driver.reboot."),
)

preflight_opts = _stack(
    click.option("--json", "as_json", is_flag=True, default=None,
                 help="Print results as JSON on stdout."),
)

ALL_KEYS = (
    "hosts", "inventory", "limit", "user", "port", "key", "become", "ask_become_pass", "forks",
    "connection", "known_hosts", "accept_new_host_keys", "stack_path", "extra_vars", "tags",
    "skip_tags", "diff", "report_dir", "verbosity", "as_json", "no_preflight", "check_mode",
    "no_reboot",
)


def merged(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """Subcommand values, falling back to what was given before the subcommand.

    `provision --host x check` and `provision check --host x` mean the same.
    """
    parent = ctx.parent.params if ctx.parent is not None else {}
    out = {k: parent.get(k) for k in ALL_KEYS}
    for k, v in params.items():
        if not _unset(v) or k not in out or _unset(out[k]):
            out[k] = v
    return out


def _unset(value: object) -> bool:
    return value is None or value == () or (type(value) is int and value == 0)
