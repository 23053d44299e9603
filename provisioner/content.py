"""Locate the Ansible content, the collection provision.gpu: installed wheel or source checkout.

The collection root holds galaxy.yml, playbooks/, roles/ and plugins/. Ansible finds the collection
through `collections_path`, a directory holding `ansible_collections/provision/gpu`: in a checkout
the playbook-adjacent `playbooks/collections` (a link to the repository root, which also serves
plain ansible-playbook and AWX), in the wheel `provisioner/_ansible`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from provisioner.exitcodes import SetupError

PACKAGE_DIR = Path(__file__).resolve().parent


COLLECTION = ("provision", "gpu")


@dataclass(frozen=True)
class Content:
    root: Path  # the collection root
    kind: str  # "wheel" | "checkout" | "override"
    collections_path: Path  # holds ansible_collections/provision/gpu

    @property
    def playbooks(self) -> Path:
        return self.root / "playbooks"

    @property
    def roles(self) -> Path:
        return self.root / "roles"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    def role_names(self) -> list[str]:
        if not self.roles.is_dir():
            return []
        return sorted(p.name for p in self.roles.iterdir() if (p / "tasks").is_dir())

    def playbook(self, name: str) -> Path:
        path = self.playbooks / name
        if not path.is_file():
            raise SetupError(f"playbook {name} not found in {self.playbooks} ({self.kind} content)")
        return path


def candidates(package_dir: Path = PACKAGE_DIR) -> list[tuple[Path, str, Path]]:
    """(collection root, kind, collections path), the installed content first."""
    wheel = package_dir / "_ansible"
    checkout = package_dir.parent
    return [
        (wheel.joinpath("ansible_collections", *COLLECTION), "wheel", wheel),
        (checkout, "checkout", checkout / "playbooks" / "collections"),
    ]


def locate(package_dir: Path = PACKAGE_DIR) -> Content:
    """The installed content wins; a checkout (or editable install) is the fallback.

    `$PROVISION_CONTENT_DIR` (a directory holding playbooks/ and roles/) overrides both; its
    playbooks use short role names or find collections the usual ways.
    """
    override = os.environ.get("PROVISION_CONTENT_DIR")
    if override:
        root = Path(override).expanduser().resolve()
        if not (root / "playbooks").is_dir():
            raise SetupError(f"PROVISION_CONTENT_DIR={override}: no playbooks/ directory there")
        coll = root / "playbooks" / "collections"
        return Content(root=root, kind="override", collections_path=coll)
    tried = []
    for root, kind, collections_path in candidates(package_dir):
        linked = collections_path.joinpath("ansible_collections", *COLLECTION)
        if (root / "playbooks" / "site.yml").is_file() and (linked / "galaxy.yml").is_file():
            return Content(root=root, kind=kind, collections_path=collections_path)
        tried.append(f"{root / 'playbooks' / 'site.yml'} ({kind})")
    raise SetupError("Ansible content not found; looked for " + " and ".join(tried))
