"""Where each command-line option goes: the group holds only what is global (`--version`,
`--help`); every other option belongs to the subcommand that declares it.

`provision --host gpu01` (no subcommand) is the full run, the subcommand `run` (hidden). Options
written before a subcommand are handed to it, as documented (docs/cli.md): `provision --host a
check --host b` is `provision check --host a --host b` (repeatable options accumulate, `-v` counts
add up, for any other option the later value wins and a warning names the one it replaced); an
option the subcommand does not take is refused (exit 2), never dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from provisioner.exitcodes import UsageProblem

DEFAULT = "run"


def _takes_value(opt: click.Option) -> bool:
    return not opt.is_flag and not opt.count


def _option_map(command: click.Command, ctx: click.Context) -> dict[str, click.Option]:
    out: dict[str, click.Option] = {}
    for p in command.get_params(ctx):  # with the help option
        if isinstance(p, click.Option):
            for o in (*p.opts, *p.secondary_opts):
                out[o] = p
    return out


def _split(args: list[str], group: click.Group, ctx: click.Context,
           options: dict[str, click.Option]) -> tuple[list[str], list[str], list[str]]:
    """(global tokens, command path, the rest): the leading option tokens (with their values) up
    to the first subcommand name, the subcommand (and a nested one: `stack show`), then the rest."""
    lead: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--" or not tok.startswith("-") or tok == "-":
            break
        lead.append(tok)
        opt = options.get(tok.split("=", 1)[0])
        if opt is not None and _takes_value(opt) and "=" not in tok and i + 1 < len(args):
            lead.append(args[i + 1])
            i += 1
        i += 1
    rest = args[i:]
    if not rest or rest[0] not in group.list_commands(ctx):
        return lead, [], rest
    path = [rest[0]]
    cmd = group.get_command(ctx, rest[0])
    if isinstance(cmd, click.Group) and len(rest) > 1 and rest[1] in cmd.list_commands(ctx):
        path.append(rest[1])
    return lead, path, rest[len(path):]


def _leaf(group: click.Group, ctx: click.Context, path: list[str]) -> click.Command:
    cmd: click.Command | None = group
    for name in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(ctx, name)
    assert cmd is not None
    return cmd


def _given(tokens: list[str], options: dict[str, click.Option]) -> list[tuple[str, str, object]]:
    """(option name, the spelling used, value) for each option among tokens."""
    out = []
    i = 0
    while i < len(tokens):
        name, _, inline = tokens[i].partition("=")
        opt = options.get(name)
        if opt is None or opt.name is None:
            i += 1
            continue
        if _takes_value(opt):
            value: object = inline if inline else (tokens[i + 1] if i + 1 < len(tokens) else None)
            i += 1 if inline else 2
        else:
            value = name not in opt.secondary_opts
            i += 1
        out.append((opt.name, name, value))
    return out


def route(group: click.Group, ctx: click.Context, args: list[str],
          warn: Callable[[str], None] | None = None) -> list[str]:
    """The arguments with the options written before a subcommand moved after it (or the default
    subcommand `run` put first when none is named)."""
    say = warn or (lambda line: click.echo(line, err=True))
    own = _option_map(group, ctx)
    run = group.get_command(ctx, DEFAULT)
    assert run is not None
    every = {**_option_map(run, ctx), **own}
    lead, path, rest = _split(args, group, ctx, every)
    kept = [t for t in lead if t in own]
    moved = [t for t in lead if t not in own]
    if not path:
        if not moved and not rest:
            return args  # `provision`, `provision --help`, `provision --version`
        return [*kept, DEFAULT, *moved, *rest]
    leaf = _leaf(group, ctx, path)
    takes = _option_map(leaf, ctx)
    refused = [spelled for _, spelled, _ in _given(moved, every) if spelled not in takes]
    refused += [t for t in moved if t.startswith("-") and t.split("=", 1)[0] not in every]
    where = "provision " + " ".join(path)
    if refused:
        raise UsageProblem(
            f"{', '.join(dict.fromkeys(refused))}: not an option of `{where}` "
            f"(given before the subcommand; see `{where} --help`)"
        )
    before = {n: (s, v) for n, s, v in _given(moved, takes)}
    for name, spelled, value in _given(rest, takes):
        opt = takes[spelled]
        if name in before and not opt.multiple and not opt.count and before[name][1] != value:
            shown = _shown(opt, spelled, value)
            say(f"warning: {shown} given twice: {value!r} (to `{where}`) replaces "
                f"{before[name][1]!r} (given to `provision`)")
    return [*kept, *path, *moved, *rest]


def _shown(opt: click.Option, spelled: str, value: object) -> str:
    if opt.secondary_opts and value is False:
        return max(opt.secondary_opts, key=len)
    return max(opt.opts, key=len)
