"""One typed settings object for a run, from the options of the subcommand that runs it.

Each option belongs to one subcommand (provisioner.options lists them; provisioner.route hands
options written before a subcommand to it), so the subcommand's own parameters are the settings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click


@dataclass(frozen=True)
class Settings:
    command: str  # run | check | validate | preflight
    hosts: tuple[str, ...] = ()
    inventory: str | None = None
    limit: str | None = None
    user: str | None = None
    port: int | None = None
    key: Path | None = None
    become: bool | None = None
    ask_become_pass: bool | None = None
    forks: int | None = None
    connection: str | None = None
    known_hosts: Path | None = None
    accept_new_host_keys: bool | None = None
    wait: float | None = None  # --wait DURATION, in seconds
    local: bool | None = None  # --local: this machine, local connection
    stack_path: Path | None = None
    extra_vars: tuple[str, ...] = ()
    tags: str | None = None
    skip_tags: str | None = None
    diff: bool | None = None
    report_dir: Path | None = None
    verbosity: int = 0
    as_json: bool | None = None
    no_preflight: bool | None = None
    check_mode: bool | None = None
    no_reboot: bool | None = None
    validate: bool | None = None  # `check --validate`
    deep: bool | None = None  # `check --deep`, `validate --no-deep`: the DCGM diagnostic

    @classmethod
    def from_params(cls, command: str, params: dict[str, Any], **extra: Any) -> Settings:  # noqa: ANN401
        known = {f.name for f in fields(cls)} - {"command"}
        values = {**params, **extra}
        unknown = set(values) - known
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        values["hosts"] = tuple(values.get("hosts") or ())
        values["extra_vars"] = tuple(values.get("extra_vars") or ())
        values["verbosity"] = int(values.get("verbosity") or 0)
        return cls(command=command, **values)

    @property
    def ansible_check(self) -> bool:
        return self.command == "check" or bool(self.check_mode)

    @property
    def read_only_check(self) -> bool:
        """`provision check`: check.yml, whose one probe (host_assess) changes nothing and reads
        Python, the GPUs and the driver itself (not `run --check`, which plays site.yml)."""
        return self.command == "check"


NO_TARGETS = "no hosts: give --host HOST (repeatable) or -i INVENTORY (or --local)"

# options that name or reach remote hosts: meaningless with --local (refused, never dropped)
NOT_WITH_LOCAL = (
    ("hosts", "--host"), ("inventory", "-i/--inventory"), ("limit", "--limit"), ("user", "--user"),
    ("port", "--port"), ("key", "--key"), ("connection", "--connection"),
    ("known_hosts", "--known-hosts"), ("accept_new_host_keys", "--accept-new-host-keys"),
    ("ask_become_pass", "--ask-become-pass"), ("wait", "--wait"),
    ("become", "--become/--no-become"),  # it runs as root, without become
)


def require_targets(ctx: click.Context, s: Settings) -> None:
    """One error line and the usage line (not the whole help) when no host was given."""
    if s.local:
        given = [opt for name, opt in NOT_WITH_LOCAL if getattr(s, name) not in (None, False, ())]
        if s.become is False:
            given.append("--no-become")
        if given:
            raise click.UsageError(
                f"--local provisions this machine itself: {', '.join(given)} cannot go with it", ctx
            )
        return
    if not s.hosts and not s.inventory:
        raise click.UsageError(NO_TARGETS, ctx)
