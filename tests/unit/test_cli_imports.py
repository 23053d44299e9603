"""`provision --help` stays fast: importing the CLI loads no heavy library (checked, not timed)."""

from __future__ import annotations

import json
import subprocess
import sys

# importlib.metadata: `provisioner.__version__` is read on first use (was: at import, a third of
# `provision --help`'s start and of every shell-completion call)
HEAVY = ("ansible_runner", "ansible", "paramiko", "rich", "yaml", "xml.etree.ElementTree",
         "importlib.metadata")


def _loaded(code: str) -> list[str]:
    probe = (
        code + f"\nimport json, sys; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_imports_nothing_heavy() -> None:
    assert _loaded("import provisioner.cli") == []


def test_rendering_help_imports_nothing_heavy() -> None:
    code = (
        "from click.testing import CliRunner\n"
        "from provisioner.cli import cli\n"
        "r = CliRunner().invoke(cli, ['--help'])\n"
        "assert r.exit_code == 0 and 'Exit codes' in r.output, r.output\n"
    )
    assert _loaded(code) == []


def test_the_probe_is_real() -> None:
    # the check above would pass trivially if the probe could not see imports
    assert "yaml" in _loaded("import yaml")


def test_the_version_is_still_the_installed_one() -> None:
    from importlib.metadata import version  # noqa: PLC0415

    import provisioner  # noqa: PLC0415

    assert provisioner.__version__ == version("provision")
    assert "importlib.metadata" in _loaded("from provisioner import __version__")
