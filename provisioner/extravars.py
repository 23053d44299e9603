"""`-e/--extra-vars` values as ansible-playbook takes them: KEY=VALUE ..., YAML/JSON, or @FILE.

Bounded (MAX_BYTES in all), UTF-8 only, no YAML anchors/aliases (see yamlfile). Connection variables
are refused: they would send Ansible somewhere the preflight never checked, or bypass the options
that own them (`--user`, `--port`, `--key`, `--become`, `-K`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner import inventory as inv
from provisioner import stack as stk
from provisioner import yamlfile
from provisioner.exitcodes import UsageProblem
from provisioner.redact import secret_values
from provisioner.settings import Settings
from provisioner.stack import Stack

MAX_BYTES = yamlfile.MiB  # all -e values and files together

# variable name (exact, or a prefix ending in `*`) -> what to use instead
CONNECTION_VARS = {
    "ansible_host": "--host ADDRESS, or ansible_host in the inventory",
    "ansible_ssh_host": "--host ADDRESS, or ansible_host in the inventory",
    "ansible_port": "--port",
    "ansible_ssh_port": "--port",
    "ansible_user": "--user",
    "ansible_ssh_user": "--user",
    "ansible_connection": "--connection",
    "ansible_private_key_file": "--key",
    "ansible_ssh_private_key_file": "--key",
    "ansible_password": "SSH keys (--key or the ssh agent)",
    "ansible_ssh_pass": "SSH keys (--key or the ssh agent)",
    "ansible_become_pass": "-K/--ask-become-pass",
    "ansible_become_password": "-K/--ask-become-pass",
    "ansible_sudo_pass": "-K/--ask-become-pass",
    "ansible_become": "--become/--no-become",
    "ansible_become_*": "--become/--no-become, or the inventory",
    "ansible_sudo*": "--become/--no-become, or the inventory",
    "ansible_ssh_*": "the inventory (ansible_ssh_common_args), where the preflight reads it",
    "ansible_paramiko_*": "the inventory, where the preflight reads it",
    # the rest of the family that changes how Ansible connects or verifies the host (the vars:
    # entries of ansible-core's connection and become plugins: ansible/ansible
    # lib/ansible/plugins/connection/ssh.py, paramiko_ssh.py, local.py, become/su.py, runas.py)
    "ansible_host_key_checking": "nothing: host keys are always checked against --known-hosts",
    "ansible_scp_*": "the inventory (ansible_ssh_common_args), where the preflight reads it",
    "ansible_sftp_*": "the inventory (ansible_ssh_common_args), where the preflight reads it",
    "ansible_sshpass_*": "SSH keys (--key or the ssh agent)",
    "ansible_private_key*": "--key",
    "ansible_password*": "SSH keys (--key or the ssh agent)",
    "ansible_control_path*": "the inventory, where the preflight reads it",
    "ansible_pipelining": "the inventory or ansible.cfg",
    "ansible_timeout": "the inventory or ansible.cfg",
    "ansible_su_*": "--become/--no-become, or the inventory",
    "ansible_runas_*": "--become/--no-become, or the inventory",
    "ansible_local_*": "--connection, or the inventory",
}


def connection_var_hint(key: str) -> str | None:
    """What to use instead of connection variable `key`; None for other variables."""
    if key in CONNECTION_VARS:
        return CONNECTION_VARS[key]
    for pattern, hint in CONNECTION_VARS.items():
        if pattern.endswith("*") and key.startswith(pattern[:-1]):
            return hint
    return None


def refuse_connection_vars(values: dict[str, Any]) -> None:
    bad = [(k, h) for k in values if (h := connection_var_hint(k))]
    if bad:
        lines = [f"-e {k}: a connection variable; use {h} instead" for k, h in bad]
        raise UsageProblem(
            "\n".join(lines) + "\n(-e cannot change where or how Ansible connects: the preflight "
            "probes the hosts as the inventory and the options give them)"
        )


def _mapping(text: str, where: str) -> dict[str, Any]:
    try:
        data = yamlfile.parse(text, where)
    except yamlfile.YamlFileError as exc:
        raise UsageProblem(f"{exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageProblem(f"{where}: expected a mapping, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_]\w*", k)]
    if bad:
        raise UsageProblem(f"{where}: {_short(bad[0])} is not a variable name")
    return data


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def parse_one(value: str, *, limit: int = MAX_BYTES) -> tuple[dict[str, Any], int]:
    """One -e value: (variables, bytes read)."""
    value = value.strip()
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        try:
            text = yamlfile.read_text(path, limit=limit, what="-e @file")
        except yamlfile.YamlFileError as exc:
            raise UsageProblem(str(exc)) from exc
        return _mapping(text, f"-e @{path}"), len(text.encode("utf-8"))
    size = len(value.encode("utf-8"))
    if size > limit:
        raise UsageProblem(f"-e: {size} bytes of extra variables, over the limit of {limit}")
    if value.startswith(("{", "[")):
        return _mapping(value, f"-e {_short(value)}"), size
    out: dict[str, Any] = {}
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise UsageProblem(f"-e {_short(value)}: {exc}") from exc
    for word in words:
        key, sep, val = word.partition("=")
        if not sep or not key.isidentifier():
            raise UsageProblem(
                f"-e {_short(value)}: expected KEY=VALUE, @FILE or a YAML/JSON mapping"
            )
        out[key] = val  # strings, as ansible-playbook's key=value form gives them
    return out, size


def parse(values: Iterable[str]) -> dict[str, Any]:
    """Later values override earlier ones; MAX_BYTES for all of them together."""
    out: dict[str, Any] = {}
    used = 0
    for v in values:
        data, size = parse_one(v)
        used += size
        if used > MAX_BYTES:
            raise UsageProblem(
                f"-e: {used} bytes of extra variables in all, over the limit of {MAX_BYTES}"
            )
        out.update(data)
    return out


# ------------------------------------------------ the extra variables of a run
def _echo_err(line: str) -> None:
    import click  # noqa: PLC0415

    click.echo(line, err=True)


def connection_overrides(s: Settings) -> dict[str, Any]:
    """With -i, explicit --user/--port/--key/--connection override the inventory (as extra vars,
    the only thing that beats inventory variables); with --host they are in the inventory."""
    if s.hosts:
        return {}
    out: dict[str, Any] = {}
    if s.user:
        out["ansible_user"] = s.user
    if s.port:
        out["ansible_port"] = s.port
    if s.key:
        out["ansible_ssh_private_key_file"] = str(s.key.expanduser())
    if s.connection:
        out["ansible_connection"] = inv.ansible_connection(s.connection)
    return out


@dataclass(frozen=True)
class RunVars:
    """The stack (with -e gpu_stack_* folded in) and the extra variables Ansible gets."""

    stack: Stack
    extravars: dict[str, Any]
    secrets: frozenset[str] = frozenset()  # secret values given with -e (scrubbed from output)


STACK_PREFIX = "gpu_stack_"


def build_extravars(
    s: Settings, stack: Stack, warn: Callable[[str], None] | None = None
) -> RunVars:
    """Stack variables, then connection overrides, the command's own settings, and `-e` last.

    `-e gpu_stack_*` is folded into the stack (same schema and matrix; the report shows it),
    connection variables from -e are refused, and --no-reboot wins over
    -e nvidia_driver_allow_reboot."""
    given = parse(s.extra_vars)
    refuse_connection_vars(given)
    policy = stk.policy_vars() if any(k.startswith(STACK_PREFIX) for k in given) else frozenset()
    folded = {k: v for k, v in given.items() if k.startswith(STACK_PREFIX) and k not in policy}
    stk.check_policy(given)
    stack = stk.fold_overrides(stack, folded)
    rest = {k: v for k, v in given.items() if k not in folded}
    extravars = stack.to_extravars(allow_reboot=not s.no_reboot)
    extravars.update(connection_overrides(s))
    if "gpu_stack_validation_enabled" not in given:
        if s.command == "check":
            extravars["gpu_stack_validation_enabled"] = bool(s.validate)
        elif s.command == "validate":
            extravars["gpu_stack_validation_enabled"] = True
    if "gpu_stack_health_deep" not in given and s.command in ("check", "validate"):
        # the deep health tier (DCGM diag): asked for with check --deep, on in validate
        extravars["gpu_stack_health_deep"] = (
            bool(s.deep) if s.deep is not None else s.command == "validate"
        )
    if s.no_reboot and "nvidia_driver_allow_reboot" in rest:
        (warn or _echo_err)(
            f"warning: --no-reboot wins over -e nvidia_driver_allow_reboot="
            f"{rest.pop('nvidia_driver_allow_reboot')}"
        )
    extravars.update(rest)
    return RunVars(stack, extravars, frozenset(secret_values(given)))
