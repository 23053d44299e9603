"""Programs the lab installs on its hosts (run there by Debian's python3, stdlib only)."""

from __future__ import annotations

from pathlib import Path

PAYLOAD_DIR = Path(__file__).resolve().parent


def read(name: str) -> str:
    """The text of one payload program."""
    return (PAYLOAD_DIR / name).read_text(encoding="utf-8")
