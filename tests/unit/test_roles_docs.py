"""Each role's README variable table matches its meta/argument_specs.yml and defaults/main.yml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
ROLES = ["preflight", "nvidia_repo", "nvidia_driver", "cuda_toolkit", "cudnn", "nccl", "cuda_env",
         "pytorch"]
ROW = re.compile(r"^\| `(?P<name>[a-z_0-9]+)` \| (?P<type>\w+) \| `(?P<default>[^`]*)` \|")


def _fmt(value: object) -> str:
    if value == "":
        return '""'
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@pytest.mark.parametrize("role", ROLES)
def test_readme_table_matches_argument_spec(role: str) -> None:
    spec = yaml.safe_load((ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    readme = (ROLES_DIR / role / "README.md").read_text()
    rows = {m["name"]: m for m in map(ROW.match, readme.splitlines()) if m}
    assert set(rows) == set(options), f"{role}: README vs argument_specs differ"
    for name, opt in options.items():
        assert rows[name]["type"] == opt["type"], name
        assert rows[name]["default"] == _fmt(opt.get("default")), name


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_specified_and_prefixed(role: str) -> None:
    spec = yaml.safe_load((ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLES_DIR / role / "defaults" / "main.yml").read_text())
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        assert name.startswith(role + "_"), name
        if not (isinstance(value, str) and "{{" in value):
            assert value == options[name].get("default"), name
