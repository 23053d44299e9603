"""Host tools some unit tests run (installed by `make host-packages-test`, lab/host-packages.txt).

Missing: the test skips with the reason, except under PROVISION_REQUIRE_LAB=1 (CI), where it
fails: CI installs them, so a missing one there is a broken set-up, not a reason to skip.
"""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is not None:
        return path
    reason = f"{name} is not installed (Debian package {package}; `make host-packages-test`)"
    if os.environ.get("PROVISION_REQUIRE_LAB") == "1":
        pytest.fail(f"{reason}, and PROVISION_REQUIRE_LAB=1 forbids the skip")
    pytest.skip(reason)
