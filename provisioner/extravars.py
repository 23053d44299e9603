"""`-e/--extra-vars` values as ansible-playbook takes them: KEY=VALUE ..., YAML/JSON, or @FILE."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from provisioner.exitcodes import UsageProblem


def _yaml(text: str, where: str) -> dict[str, Any]:
    import yaml  # noqa: PLC0415 - lazy

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageProblem(f"-e {where}: not valid YAML/JSON: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageProblem(f"-e {where}: expected a mapping, got {type(data).__name__}")
    return data


def parse_one(value: str) -> dict[str, Any]:
    value = value.strip()
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        if not path.is_file():
            raise UsageProblem(f"-e {value}: file not found")
        return _yaml(path.read_text(encoding="utf-8"), value)
    if value.startswith(("{", "[")):
        return _yaml(value, repr(value))
    out: dict[str, Any] = {}
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise UsageProblem(f"-e {value!r}: {exc}") from exc
    for word in words:
        key, sep, val = word.partition("=")
        if not sep or not key.isidentifier():
            raise UsageProblem(f"-e {value!r}: expected KEY=VALUE, @FILE or a YAML/JSON mapping")
        out[key] = val  # strings, as ansible-playbook's key=value form gives them
    return out


def parse(values: Iterable[str]) -> dict[str, Any]:
    """Later values override earlier ones."""
    out: dict[str, Any] = {}
    for v in values:
        out.update(parse_one(v))
    return out
