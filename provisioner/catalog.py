"""The catalogue of check ids: what each verifies and how to fix it (`provision checks`).

Source: the collection's own catalogue, `plugins/module_utils/catalog.py` of the content provision
runs (imported by path, so it works from a checkout and from the wheel): the one list of check ids,
beside the evaluator that produces them.
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

COLLECTION_CATALOG = Path("module_utils") / "catalog.py"


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


def _collections_path(plugins: Path) -> str | None:
    """The directory holding ansible_collections/provision/gpu for this plugins/ directory: the
    installed layout (.../ansible_collections/provision/gpu/plugins) or a checkout's
    playbooks/collections link. None when neither is there."""
    root = plugins.parent
    if root.parent.name == "provision" and root.parent.parent.name == "ansible_collections":
        return str(root.parent.parent.parent)
    linked = root / "playbooks" / "collections"
    if (linked / "ansible_collections" / "provision" / "gpu").is_dir():
        return str(linked)
    return None


def from_collection(plugins: Path) -> list[CheckInfo] | None:
    """The collection's catalogue, or None when the content has none."""
    path = plugins / COLLECTION_CATALOG
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("provision_collection_catalog", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    # the catalogue imports the collection's components (ansible_collections.provision.gpu): make
    # the directory holding ansible_collections/ importable while it loads
    added = _collections_path(plugins)
    if added is not None:
        sys.path.insert(0, added)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any error in that code: a broken install
        raise SetupError(f"check catalogue {path} cannot be loaded: {exc}") from exc
    finally:
        if added is not None and added in sys.path:
            sys.path.remove(added)
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
