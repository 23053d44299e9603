"""One typed settings object for a run, merged from the options given before and after a subcommand.

`provision --host a check --host b -v` and `provision check --host a --host b -v` mean the same:
multi-value options (`--host`, `-e`) accumulate, `-v` counts add up, and for any other option a
value given after the subcommand wins over one given before it (the earlier one is named on
stderr). A command-line value beats one from the environment (`$PROVISION_INVENTORY`, ...).
An option given before a subcommand that does not take it is refused, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from provisioner.exitcodes import UsageProblem

ACCUMULATE = frozenset({"hosts", "extra_vars"})
COUNT = frozenset({"verbosity"})
_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.PROMPT)


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


def _option_name(param: click.Parameter, value: object) -> str:
    if isinstance(param, click.Option):
        if param.secondary_opts and value is False:
            return max(param.secondary_opts, key=len)
        return max(param.opts, key=len)
    return param.name or "?"


def _command_path(ctx: click.Context) -> str:
    return ctx.command_path or "provision"


def merge_params(
    ctx: click.Context, warn: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The invoked command's parameters merged with those given to the groups above it.

    Raises UsageProblem for an option given to a group that the command does not take."""
    say = warn or (lambda line: click.echo(line, err=True))
    chain: list[click.Context] = []
    c: click.Context | None = ctx
    while c is not None:
        chain.insert(0, c)
        c = c.parent
    leaf = ctx
    out: dict[str, Any] = {}
    source: dict[str, ParameterSource | None] = {}
    where: dict[str, str] = {}
    refused: list[str] = []
    for level in chain:
        params = {p.name: p for p in level.command.params if p.name}
        for name, value in level.params.items():
            src = level.get_parameter_source(name)
            given = src in _GIVEN
            if level is not leaf and name not in leaf.params:
                if given and name in params:
                    refused.append(_option_name(params[name], value))
                continue
            if name not in out:
                out[name], source[name], where[name] = value, src, _command_path(level)
                continue
            if name in ACCUMULATE:
                out[name] = (*(out[name] or ()), *(value or ()))
            elif name in COUNT:
                out[name] = int(out[name] or 0) + int(value or 0)
            elif given:
                if source[name] in _GIVEN and out[name] != value and name in params:
                    opt = _option_name(params[name], value)
                    say(f"warning: {opt} given twice: {value!r} (to `{_command_path(level)}`) "
                        f"replaces {out[name]!r} (given to `{where[name]}`)")
                out[name], source[name], where[name] = value, src, _command_path(level)
            elif source[name] not in _GIVEN and src == ParameterSource.ENVIRONMENT:
                out[name], source[name] = value, src
    if refused:
        raise UsageProblem(
            f"{', '.join(refused)}: not an option of `{_command_path(leaf)}` "
            f"(given before the subcommand; see `{_command_path(leaf)} --help`)"
        )
    return out


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
