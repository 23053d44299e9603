"""One support table (provisioner/data/support.yml): the releases and the component -> role ->
variable-prefix map; every platform list in the product is generated from it (make roles)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
import yaml

from provisioner import events, support
from tools import rolegen, supportgen

REPO = Path(__file__).resolve().parents[2]


def _table_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: object) -> dict:
    path = tmp_path / "support.yml"
    shutil.copy(support.TABLE, path)
    data = yaml.safe_load(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setattr(support, "TABLE", path)
    return data


def _load_platforms(text: str, tmp_path: Path) -> object:
    """A generated module_utils file (standard library only), loaded from its text."""
    path = tmp_path / f"generated_{abs(hash(text))}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("generated_platforms", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_adding_an_os_release_is_one_data_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acceptance test of the support table: Debian 13 added to support.yml, nothing else
    edited; every role's meta/main.yml, the README table, the probe's release list and the text of
    preflight.os follow, and no other generated file changes."""
    def add(data: dict) -> None:
        data["releases"].append({
            "os": "Debian", "family": "debian", "os_ids": ["debian"], "version": "13",
            "galaxy": {"name": "Debian", "version": "trixie"}, "repo": "debian13",
            "status": "preflight-stops", "lab": "nothing", "evidence": "not in the matrix yet",
        })

    _table_with(tmp_path, monkeypatch, add)
    rendered = rolegen.render()
    changed = {p for p, text in rendered.items() if p.read_text(encoding="utf-8") != text}
    metas = set(REPO.glob("roles/*/meta/main.yml"))
    assert len(metas) == 11
    module_utils = REPO / "plugins" / "module_utils"
    assert changed == metas | {REPO / "README.md", module_utils / "platforms.py",
                               module_utils / "components" / "preflight.py"}
    for meta in metas:
        platforms = yaml.safe_load(rendered[meta])["galaxy_info"]["platforms"]
        debian = next(p for p in platforms if p["name"] == "Debian")
        assert debian["versions"] == ["bullseye", "bookworm", "trixie"], meta
    assert "| Debian 13 | not in the matrix | accepted; the default stack stops in preflight" in (
        rendered[REPO / "README.md"])
    plat = _load_platforms(rendered[module_utils / "platforms.py"], tmp_path)
    ok, _ = plat.Platform({"ID": "debian", "VERSION_ID": "13"}, "x86_64", "k").support()  # type: ignore[attr-defined]
    assert ok
    text = rendered[module_utils / "components" / "preflight.py"]
    os_spec = text.split('"preflight.os",', 1)[1].split("CheckSpec(", 1)[0]
    assert "Debian 11/12/13," in "".join(re.findall(r'"([^"]*)"', os_spec))


def test_the_refused_release_and_its_reason_come_from_the_table(tmp_path: Path) -> None:
    text = (REPO / "plugins" / "module_utils" / "platforms.py").read_text(encoding="utf-8")
    plat = _load_platforms(text, tmp_path)
    table = support.load_table()
    (el8,) = [r for r in table["releases"] if r["status"] == "refused"]
    for os_id in ("rhel", "rocky", "almalinux", "centos"):
        ok, reason = plat.Platform({"ID": os_id, "VERSION_ID": "8.9"}, "x86_64", "k").support()  # type: ignore[attr-defined]
        assert (ok, reason) == (False, el8["reason"]), os_id
    accepted = {(r["os_ids"][0], r["version"]) for r in supportgen.accepted(table)}
    for os_id, version in accepted:
        ok, _ = plat.Platform({"ID": os_id, "VERSION_ID": version}, "x86_64", "k").support()  # type: ignore[attr-defined]
        assert ok, (os_id, version)


def test_a_status_the_matrix_contradicts_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ubuntu 24.04 marked supported while the matrix has no confirmed CUDA of the default stack
    there: the generator stops, naming the release and what preflight.cuda_repo would do."""
    def promote(data: dict) -> None:
        for rel in data["releases"]:
            if rel["version"] == "24.04":
                rel["status"] = "supported"

    _table_with(tmp_path, monkeypatch, promote)
    with pytest.raises(SystemExit, match=r"Ubuntu 24.04: status supported, but the matrix says"):
        rolegen.render()


def test_components_roles_and_variable_prefixes() -> None:
    """Each component's role exists and owns its check ids; its variables carry the prefix."""
    schema = rolegen.load_schema()
    for component, entry in support.load_table()["components"].items():
        role = entry["role"]
        assert (REPO / "roles" / role / "tasks" / "main.yml").is_file(), role
        assert entry["variables"] == role + "_"
        for name in schema["roles"].get(role, {}).get("variables") or {}:
            assert name.startswith(entry["variables"]), name
        assert events.owner_of({"id": f"{component}.x"}) == role
