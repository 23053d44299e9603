"""LICENSE is the Apache License 2.0 that pyproject.toml and galaxy.yml declare."""

from __future__ import annotations

import hashlib
import tomllib

import yaml
from conftest import REPO

# sha256 of the canonical text (https://www.apache.org/licenses/LICENSE-2.0.txt, identical to
# Debian's /usr/share/common-licenses/Apache-2.0)
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_file_is_the_apache_2_0_text() -> None:
    data = (REPO / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in data
    assert hashlib.sha256(data).hexdigest() == APACHE_2_0_SHA256


def test_the_declared_licenses_match_the_file() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == "Apache-2.0"
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text(encoding="utf-8"))
    assert galaxy["license"] == ["Apache-2.0"]
