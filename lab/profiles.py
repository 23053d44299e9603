"""GPU descriptions shipped with the lab (profiles/*.json) and the per-host description file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
HOST_DESCRIPTION = "/etc/fake-nvidia/gpus.json"


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name: str) -> dict[str, Any]:
    path = PROFILE_DIR / f"{name}.json"
    if not path.exists():
        raise KeyError(f"unknown GPU profile {name!r}; known: {', '.join(profile_names())}")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def host_description(profile: str, host: str, driver: str = "auto") -> dict[str, Any]:
    """The description written to a host's /etc/fake-nvidia/gpus.json."""
    desc = load_profile(profile)
    desc["host"] = host
    desc["driver"] = driver
    return desc


def gpu_count(profile: str) -> int:
    desc = load_profile(profile)
    return len(desc["bus_ids"]) if desc.get("gpu") else 0
