"""The loopback wheelhouse: torch (CPU) and its dependencies, downloaded once per lab directory."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

from lab.util import LabError, file_lock, run

TORCH_REQUIREMENT = "torch==2.13.0"


def ensure_wheelhouse(lab: Path, requirement: str = TORCH_REQUIREMENT) -> Path:
    """`pip download <requirement>` into <lab>/wheelhouse once; returns that directory.

    On the CI machine pip's own configuration (PIP_FIND_LINKS, pip.conf) supplies the torch wheel
    from local disk; its dependencies come from PyPI. A marker file records a complete download.
    """
    house = lab / "wheelhouse"
    marker = house / f".complete-{requirement.replace('=', '_')}"
    if marker.exists():
        return house
    with file_lock(lab / "wheelhouse.lock"):
        if marker.exists():
            return house
        tmp = lab / f"wheelhouse.tmp.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if house.exists():  # an older requirement: keep its wheels, add the new ones
            for whl in house.glob("*.whl"):
                shutil.copy2(whl, tmp / whl.name)
        try:
            run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--only-binary=:all:",
                    "-d",
                    tmp,
                    requirement,
                ],
                timeout=1200,
            )
        except LabError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if not any(tmp.glob("torch-*.whl")) and requirement.startswith("torch"):
            shutil.rmtree(tmp, ignore_errors=True)
            raise LabError(f"pip download {requirement} produced no torch wheel in {tmp}")
        (tmp / marker.name).write_text(requirement + "\n", encoding="utf-8")
        if house.exists():
            shutil.rmtree(house)
        tmp.rename(house)
    return house


def hashed_requirements(house: Path) -> list[str]:
    """Every wheel of the wheelhouse as a pinned requirement with its sha256, the format
    `pip-compile --generate-hashes` writes (the stack's mirrors.pytorch_hashes: a find-links
    mirror serves no hashes of its own)."""
    pins: dict[str, list[str]] = defaultdict(list)
    for whl in sorted(house.glob("*.whl")):
        m = re.match(r"^([A-Za-z0-9_.]+)-([^-]+)-", whl.name)
        if not m:
            raise LabError(f"not a wheel file name: {whl}")
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()
        pins[f"{name}=={m.group(2)}"].append(digest)
    return [
        pin + "".join(f" --hash=sha256:{h}" for h in sorted(set(digests)))
        for pin, digests in sorted(pins.items())
    ]
