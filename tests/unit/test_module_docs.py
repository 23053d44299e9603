"""The collection's modules document themselves as ansible-doc reads them: DOCUMENTATION, EXAMPLES
and RETURN are YAML, and the documented options are exactly the module's argument_spec."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted((REPO / "plugins" / "modules").glob("*.py"))


def _strings(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                assert isinstance(node.value, ast.Constant)
                out[name] = str(node.value.value)
    return out


def _argument_spec(path: Path) -> set[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "AnsibleModule":
            for kw in node.keywords:
                if kw.arg == "argument_spec" and isinstance(kw.value, ast.Dict):
                    return {k.value for k in kw.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError(f"{path.name}: no AnsibleModule(argument_spec={{...}})")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_docs_are_yaml_and_match_the_argument_spec(path: Path) -> None:
    docs = _strings(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path.name
    doc = yaml.safe_load(docs["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert doc["short_description"] and doc["description"]
    assert yaml.safe_load(docs["EXAMPLES"])
    assert isinstance(yaml.safe_load(docs["RETURN"]), dict)
    assert set(doc.get("options") or {}) == _argument_spec(path)


def test_ansible_doc_renders_every_module() -> None:
    """What `ansible-doc provision.gpu.<module>` shows a user (it printed '[ERROR]: Unable to parse
    documentation' for a colon in a plain YAML scalar)."""
    names = [f"provision.gpu.{p.stem}" for p in MODULES]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "playbooks" / "collections"))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", *names],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ERROR" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert sorted(data) == sorted(names)
    for name in names:
        assert data[name]["doc"]["options"], name
