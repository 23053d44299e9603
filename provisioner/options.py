"""Every option, defined once as a decorator; each subcommand lists the options it takes (the
group itself takes only --version and --help).

An option may still be written before a subcommand (`provision --host a check --host b`):
provisioner.route hands it to the subcommand. Keep this module light: `provision --help` imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class NonEmptyPath(click.Path):
    """click.Path that refuses an empty value (click would turn '' into '.', the current
    directory: `--report-dir ''` would then overwrite ./report.json)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:  # noqa: ANN401
        if isinstance(value, str) and not value.strip():
            self.fail("an empty value is not a path (leave the option out instead)", param, ctx)
        return super().convert(value, param, ctx)


class NonEmptyText(click.types.StringParamType):
    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:  # noqa: ANN401
        if isinstance(value, str) and not value.strip():
            self.fail("an empty value (leave the option out instead)", param, ctx)
        return value


class Duration(click.types.FloatParamType):
    """A duration: `10m`, `300s`, `1h30m`, or plain seconds; converted to seconds (float)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:  # noqa: ANN401
        if isinstance(value, int | float):
            return float(value)
        from provisioner.wait import parse_duration  # noqa: PLC0415

        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def use(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply option decorators in the order listed (the first shows first in --help)."""

    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


# --- targets and connection

host = click.option(
    "--host", "hosts", multiple=True, metavar="[USER@]HOST[:PORT]", type=NonEmptyText(),
    help="Target host (repeatable). Builds an inventory; group gpu_servers.")
inventory = click.option(
    "-i", "--inventory", metavar="PATH", envvar="PROVISION_INVENTORY", type=NonEmptyText(),
    help="Ansible inventory file or directory (must exist) instead of --host.")
limit = click.option("--limit", metavar="PATTERN", type=NonEmptyText(),
                     help="Limit the inventory to PATTERN.")
user = click.option("--user", "-u", metavar="USER", type=NonEmptyText(),
                    help="SSH user (default: inventory or you).")
port = click.option("--port", type=click.IntRange(1, 65535), help="SSH port (default 22).")
key = click.option("--key", type=NonEmptyPath(dir_okay=False, path_type=Path), metavar="FILE",
                   help="SSH private key file.")
become = click.option("--become/--no-become", default=None,
                      help="Use sudo on the targets (default: on).")
ask_become_pass = click.option("--ask-become-pass", "-K", is_flag=True, default=None,
                               help="Prompt for the sudo password.")
forks = click.option("--forks", type=click.IntRange(1, 500),
                     help="Parallel hosts (Ansible forks).")
connection = click.option("--connection", type=click.Choice(["ssh", "paramiko"]), default=None,
                          help="Connection plugin (default ssh).")
known_hosts = click.option(
    "--known-hosts", type=NonEmptyPath(dir_okay=False, path_type=Path), metavar="FILE",
    help="known_hosts file (default ~/.ssh/known_hosts).")
accept_new_host_keys = click.option(
    "--accept-new-host-keys", is_flag=True, default=None,
    help="Add unknown host keys to the known_hosts file (never changed ones).")
wait = click.option(
    "--wait", "wait", type=Duration(), metavar="DURATION",
    help="First wait up to DURATION (10m, 300s, 1h30m) for each host's SSH to answer and its "
         "cloud-init to finish (fresh instances).")
local = click.option(
    "--local", is_flag=True, default=None,
    help="Provision this machine itself: local connection, no SSH, as root (cloud-init "
         "user-data). A needed reboot resumes after boot (provision-resume.service).")

# --- what to run and what to write

stack = click.option(
    "--stack", "stack_path", type=NonEmptyPath(dir_okay=False, path_type=Path), metavar="FILE",
    envvar="PROVISION_STACK", help="Stack manifest (YAML).")
extra_vars = click.option(
    "-e", "--extra-vars", "extra_vars", multiple=True, metavar="KEY=VALUE|@FILE",
    type=NonEmptyText(),
    help="Extra variables, as ansible-playbook takes them (repeatable); gpu_stack_* variables "
         "are folded into the stack and checked against the matrix.")
tags = click.option("--tags", metavar="ROLES", help="Only these roles (comma-separated).")
skip_tags = click.option("--skip-tags", metavar="ROLES", help="Skip these roles (comma-separated).")
diff = click.option("--diff", is_flag=True, default=None, help="Show file differences.")
report_dir = click.option(
    "--report-dir", type=NonEmptyPath(file_okay=False, path_type=Path), metavar="DIR",
    help="Write report.json, junit.xml and provision.prom here.")
verbose = click.option("-v", "--verbose", "verbosity", count=True,
                       help="Ansible verbosity (-v .. -vvvv); -v also prints skipped tasks.")
json_output = click.option("--json", "as_json", is_flag=True, default=None,
                           help="Machine-readable JSON on stdout (the full report, for runs).")
no_preflight = click.option("--no-preflight", is_flag=True, default=None,
                            help="Skip the SSH preflight probe.")
check_mode = click.option("--check", "check_mode", is_flag=True, default=None,
                          help="Ansible check mode: report what would change, change nothing.")
no_reboot = click.option("--no-reboot", is_flag=True, default=None,
                         help="Never reboot; a host that needs one fails with driver.reboot.")
validate = click.option("--validate", is_flag=True, default=None,
                        help="Also run the validation role (uses the GPUs).")
deep = click.option("--deep/--no-deep", default=None,
                    help="Deep health tier: NVIDIA DCGM's `dcgmi diag -r N` (N = dcgm.diag_level, "
                    "under dcgm.diag_timeout_s; loads the GPUs). Off for check, on for validate.")

TARGETS = (host, inventory, limit, user, port, key, become, ask_become_pass, forks, connection,
           known_hosts, accept_new_host_keys, wait, local)
RUN = (stack, extra_vars, tags, skip_tags, diff, report_dir, verbose, json_output, no_preflight)
FULL_RUN = (check_mode, no_reboot)

targets = use(*TARGETS)
run_opts = use(*RUN)
full_run_opts = use(*FULL_RUN)
