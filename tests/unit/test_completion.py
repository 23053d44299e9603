"""Shell completion through Click's mechanism (`_PROVISION_COMPLETE=bash_source provision`),
documented in the README and docs/cli.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import REPO

from provisioner.cli import cli

PROVISION = Path(sys.executable).parent / "provision"


def complete(shell: str, words: str, cword: int) -> list[str]:
    env = {**os.environ, "_PROVISION_COMPLETE": f"{shell}_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(cword)}
    proc = subprocess.run([str(PROVISION)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F _provision_completion provision"),
        ("zsh", "#compdef provision"),
        ("fish", "complete --no-files --command provision"),
    ],
)
def test_the_completion_script_is_produced(shell: str, marker: str) -> None:
    env = {**os.environ, "_PROVISION_COMPLETE": f"{shell}_source"}
    proc = subprocess.run([str(PROVISION)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout
    assert f"_PROVISION_COMPLETE={shell}_complete" in proc.stdout


def test_provision_ch_completes_to_the_commands_starting_with_ch() -> None:
    offered = {line.split(",", 1)[1] for line in complete("bash", "provision ch", 1)}
    expected = {n for n in cli.list_commands(click.Context(cli)) if n.startswith("ch")}
    assert "check" in offered
    assert offered == expected  # `check`, and `checks` where that command exists
    assert "stack" not in offered


def test_options_and_subcommand_options_complete() -> None:
    assert "plain,--stack" in complete("bash", "provision --sta", 1)
    assert "plain,--validate" in complete("bash", "provision check --vali", 2)


def test_bash_runs_the_generated_script_to_a_completion() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = (
        'eval "$(_PROVISION_COMPLETE=bash_source provision)"\n'
        "COMP_WORDS=(provision sta); COMP_CWORD=1\n"
        "_provision_completion provision\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{PROVISION.parent}:{os.environ.get('PATH', '')}"}
    proc = subprocess.run([bash, "--norc", "-c", script], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["stack"]


def test_completion_is_documented() -> None:
    for doc in ("README.md", "docs/cli.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        assert "_PROVISION_COMPLETE=bash_source provision" in text, doc
