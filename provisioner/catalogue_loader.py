"""The catalogue of check ids: what each verifies and how to fix it (`provision checks`).

Source: the collection's own catalogue, `plugins/module_utils/check_catalogue.py` of the content
provision runs (imported by path, so it works from a checkout and from the wheel): the one list of
check ids, beside the evaluator that produces them.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.events import owner_of
from provisioner.exitcodes import SetupError

COLLECTION_CATALOG = Path("module_utils") / "check_catalogue.py"
# loaded by path (a fresh module: the collection provision runs, whatever else is imported); its
# own imports (the components) resolve through the collections path
CATALOG_MODULE = "provision_collection_catalog"


@dataclass(frozen=True)
class CheckInfo:
    id: str
    role: str
    verifies: str
    remediation: str
    # health checks: the most disruptive action of the ladder a finding can ask for
    action: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {"id": self.id, "role": self.role, "verifies": self.verifies,
               "remediation": self.remediation}
        if self.action:
            out["action"] = self.action
        return out


def _role(cid: str) -> str:
    if cid.startswith("<role>."):
        return "(any role)"
    if cid.startswith("ssh."):
        return "ssh (CLI preflight)"
    return owner_of({"id": cid})


def _entries(raw: object) -> list[CheckInfo]:
    """Entries from a mapping id -> {verifies|what|description, remediation|fix} or a list of
    mappings with an `id`."""
    items: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(raw, Mapping):
        items = [(str(k), v) for k, v in raw.items() if isinstance(v, Mapping)]
    elif isinstance(raw, list):
        items = [(str(v["id"]), v) for v in raw if isinstance(v, Mapping) and v.get("id")]
    out = []
    for cid, v in items:
        verifies = v.get("verifies") or v.get("what") or v.get("description") or ""
        remediation = v.get("remediation") or v.get("fix") or ""
        out.append(CheckInfo(cid, str(v.get("role") or _role(cid)), str(verifies),
                             str(remediation), str(v.get("action") or "")))
    return out


def collections_path_of(plugins: Path) -> Path:
    """The directory holding ansible_collections/provision/gpu for a collection's plugins/ (a
    checkout: playbooks/collections beside it; an installed collection: four levels up)."""
    beside = plugins.parent / "playbooks" / "collections"
    if (beside / "ansible_collections" / "provision" / "gpu").is_dir():
        return beside
    parents = plugins.resolve().parents
    return parents[3] if len(parents) > 3 else plugins.parent


def from_collection(plugins: Path) -> list[CheckInfo] | None:
    """The collection's catalogue (derived from its components), or None when it has none."""
    path = plugins / COLLECTION_CATALOG
    if not path.is_file():
        return None
    where = str(collections_path_of(plugins))
    added = where not in sys.path
    if added:
        sys.path.insert(0, where)
    try:
        spec = importlib.util.spec_from_file_location(CATALOG_MODULE, path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # any error in that code: a broken install
        raise SetupError(f"check catalogue {path} cannot be loaded: {exc}") from exc
    finally:
        if added:
            sys.path.remove(where)
    for name in ("CATALOG", "CHECKS", "catalog"):
        raw = getattr(module, name, None)
        raw = raw() if callable(raw) else raw
        entries = _entries(raw)
        if entries:
            return entries
    return None


def load(plugins: Path | None) -> tuple[list[CheckInfo], str]:
    """(entries sorted by id, where they came from)."""
    where = plugins / COLLECTION_CATALOG if plugins is not None else COLLECTION_CATALOG
    found = from_collection(plugins) if plugins is not None else None
    if found is None:
        raise SetupError(f"the collection's check catalogue is missing ({where}): broken install?")
    return sorted(found, key=lambda c: c.id), str(where)
