"""Locate the Ansible content: installed wheel (`provisioner/_ansible/`) or source checkout."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from provisioner.exitcodes import SetupError

PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Content:
    root: Path
    kind: str  # "wheel" | "checkout"

    @property
    def playbooks(self) -> Path:
        return self.root / "playbooks"

    @property
    def roles(self) -> Path:
        return self.root / "roles"

    @property
    def library(self) -> Path:
        return self.playbooks / "library"

    def role_names(self) -> list[str]:
        if not self.roles.is_dir():
            return []
        return sorted(p.name for p in self.roles.iterdir() if (p / "tasks").is_dir())

    def playbook(self, name: str) -> Path:
        path = self.playbooks / name
        if not path.is_file():
            raise SetupError(f"playbook {name} not found in {self.playbooks} ({self.kind} content)")
        return path


def candidates(package_dir: Path = PACKAGE_DIR) -> list[tuple[Path, str]]:
    return [(package_dir / "_ansible", "wheel"), (package_dir.parent, "checkout")]


def locate(package_dir: Path = PACKAGE_DIR) -> Content:
    """The installed content wins; a checkout (or editable install) is the fallback.

    `$PROVISION_CONTENT_DIR` (a directory holding playbooks/ and roles/) overrides both.
    """
    override = os.environ.get("PROVISION_CONTENT_DIR")
    if override:
        root = Path(override).expanduser().resolve()
        if not (root / "playbooks").is_dir():
            raise SetupError(f"PROVISION_CONTENT_DIR={override}: no playbooks/ directory there")
        return Content(root=root, kind="override")
    tried = []
    for root, kind in candidates(package_dir):
        if (root / "playbooks" / "site.yml").is_file() and (root / "roles").is_dir():
            return Content(root=root, kind=kind)
        tried.append(f"{root / 'playbooks' / 'site.yml'} ({kind})")
    raise SetupError("Ansible content not found; looked for " + " and ".join(tried))
