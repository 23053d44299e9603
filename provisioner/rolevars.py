"""The role-variables schema (provisioner/data/role-variables.yml): where it is and how it loads.

Both the stack (which -e names are site policy) and the role generator (tools/rolegen.py, beside
the product, not in the wheel) read it through this module, so neither imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provisioner import yamlfile

DATA_DIR = Path(__file__).resolve().parent / "data"
SCHEMA = DATA_DIR / "role-variables.yml"


def load_schema(path: Path = SCHEMA) -> dict[str, Any]:
    """The schema as a mapping; SystemExit naming the file when it is not schema 1."""

    data = yamlfile.load_packaged(path)
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise SystemExit(f"{path}: not a role-variables schema (schema: 1)")
    return data


def gpu_stack_variables(schema: dict[str, Any] | None = None) -> set[str]:
    """Every variable the gpu_stack role declares."""
    data = schema if schema is not None else load_schema()
    return set(data["roles"]["gpu_stack"]["variables"])
