"""The wheel is a working tool outside the checkout: it carries playbooks/, roles/ and data."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (whl,) = out.glob("provision-*.whl")
    return whl


def test_wheel_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    coll = "provisioner/_ansible/ansible_collections/provision/gpu"
    for pb in ("site", "check", "validate", "unlock"):
        assert f"{coll}/playbooks/{pb}.yml" in names
    assert f"{coll}/galaxy.yml" in names
    assert f"{coll}/meta/runtime.yml" in names
    assert f"{coll}/plugins/modules/host_assess.py" in names
    assert f"{coll}/plugins/module_utils/evaluate.py" in names
    # the lab is beside the product, not in it
    assert not any(n.startswith(("lab/", "provisioner/lab/")) for n in names)
    # the role generator is beside the product too (tools/rolegen.py): the wheel has no generator
    assert not any(n.startswith("tools/") or n.endswith("/rolegen.py") for n in names)
    assert "provisioner/rolevars.py" in names and "provisioner/data/role-variables.yml" in names
    assert "provisioner/data/matrix.yml" in names
    assert "provisioner/data/default-stack.yml" in names
    assert f"{coll}/plugins/module_utils/check_catalogue.py" in names  # `provision checks`
    assert "provisioner/py.typed" in names
    roles = sorted(
        p.name for p in (REPO / "roles").iterdir() if (p / "tasks" / "main.yml").is_file()
    )
    assert roles, "no roles in the checkout"
    for role in roles:
        assert f"{coll}/roles/{role}/tasks/main.yml" in names, role
    assert not any("__pycache__" in n for n in names)
    assert not any(n.startswith("tests/") for n in names)


def test_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    # dependencies come from the current environment (offline, fast); the package from the wheel
    purelib = subprocess.run(
        [str(vpy), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in site.getsitepackages() if p.endswith("site-packages")]
    Path(purelib, "_parent_env.pth").write_text("\n".join(deps) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(vpy),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PROVISION_STATE_DIR": str(tmp_path / "state"),
    }
    where = subprocess.run(
        [
            str(vpy),
            "-c",
            "import provisioner, provisioner.content as c; "
            "print(provisioner.__file__); l = c.locate(); print(l.kind, l.root)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert where[0].startswith(str(venv)), where  # imported from the wheel, not the checkout
    kind, root = where[1].split(" ", 1)
    assert kind == "wheel"
    assert (Path(root) / "playbooks" / "site.yml").is_file()

    exe = venv / "bin" / "provision"
    version = subprocess.run(
        [str(exe), "--version"], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert version.splitlines()[0] == "provision 0.1.0"
    assert "ansible-core 2." in version
    shown = subprocess.run(
        [str(exe), "stack", "show"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "branch: '580'" in shown
    assert os.access(exe, os.X_OK)
