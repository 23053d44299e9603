"""The collection tarball (`ansible-galaxy collection build`, what AWX and the execution
environment install) and execution-environment.yml (ansible-builder, schema version 3)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO

BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text(encoding="utf-8"))
TARBALL = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
EE = REPO / "execution-environment.yml"


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("collection")
    proc = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = out / TARBALL
    assert path.is_file(), list(out.iterdir())
    return path


def test_tarball_has_the_roles_modules_and_playbooks_and_no_development_trees(
    tarball: Path,
) -> None:
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    roles = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/tasks/main.yml"))
    assert len(roles) >= 9
    for role in roles:
        assert f"roles/{role}/tasks/main.yml" in names, role
        assert f"roles/{role}/meta/argument_specs.yml" in names, role
    modules = sorted(p.name for p in (REPO / "plugins" / "modules").glob("*.py"))
    assert "host_assess.py" in modules and "host_lock.py" in modules
    assert "plugins/module_utils/evaluate.py" in names
    for module in modules:
        assert f"plugins/modules/{module}" in names
    for required in ("MANIFEST.json", "FILES.json", "meta/runtime.yml", "playbooks/site.yml",
                     "playbooks/check.yml", "playbooks/validate.yml", "README.md", "LICENSE"):
        assert required in names, required
    top = {n.split("/", 1)[0] for n in names}
    for unwanted in ("tests", "lab", "provisioner", ".venv", ".git", "contrib", "context",
                     "dist", "pyproject.toml", "Makefile"):
        assert unwanted not in top, unwanted
    assert not [n for n in names if n.startswith("playbooks/collections")]
    assert not [n for n in names if n.endswith((".pyc", ".png"))]


def test_installed_tarball_runs_the_playbooks_by_fqcn_outside_the_checkout(
    tarball: Path, tmp_path: Path
) -> None:
    """What AWX / the execution environment does: install the tarball, run provision.gpu.site."""
    collections = tmp_path / "collections"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections),
           "ANSIBLE_HOME": str(tmp_path / "ansible-home"), "ANSIBLE_ROLES_PATH": str(tmp_path)}
    proc = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", str(tarball),
         "-p", str(collections)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = collections / "ansible_collections" / "provision" / "gpu"
    assert (installed / "roles" / "nvidia_driver" / "tasks" / "main.yml").is_file()
    for playbook in ("site", "check", "validate"):
        proc = subprocess.run(
            [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
             f"provision.gpu.{playbook}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
         "provision.gpu.nonexistent"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )
    assert proc.returncode != 0


def test_execution_environment_carries_this_collection_version() -> None:
    ee = yaml.safe_load(EE.read_text(encoding="utf-8"))
    assert ee["version"] == 3
    deps = ee["dependencies"]
    assert deps["galaxy"]["collections"] == [
        {"name": f"/build/collections/{TARBALL}", "type": "file"}
    ]
    assert ee["additional_build_files"] == [{"src": f"dist/{TARBALL}", "dest": "collections"}]
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    core = deps["ansible_core"]["package_pip"]
    assert f'"{core}"' in pyproject, "the EE's ansible-core range must be the CLI's"
    assert deps["python_interpreter"]["python_path"].endswith("python3.11")


def test_ansible_builder_creates_the_build_context(tarball: Path, tmp_path: Path) -> None:
    builder = shutil.which("ansible-builder", path=str(BIN)) or shutil.which("ansible-builder")
    assert builder, "ansible-builder is a dev dependency (pip install -e '.[dev]')"
    (tmp_path / "dist").mkdir()
    shutil.copy(tarball, tmp_path / "dist" / TARBALL)
    shutil.copy(EE, tmp_path / EE.name)
    proc = subprocess.run(
        [builder, "create", "-f", EE.name, "--context", "context",
         "--output-filename", "Containerfile"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    context = tmp_path / "context"
    assert (context / "_build" / "collections" / TARBALL).read_bytes() == tarball.read_bytes()
    containerfile = (context / "Containerfile").read_text(encoding="utf-8")
    assert "COPY _build /build" in containerfile
    assert "ansible-galaxy collection install" in containerfile
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2.18,<2.20 ansible-runner' in containerfile
    requirements = yaml.safe_load(
        (context / "_build" / "requirements.yml").read_text(encoding="utf-8")
    )
    assert requirements["collections"][0]["name"] == f"/build/collections/{TARBALL}"
