"""Shared fixtures for the CLI unit tests (no root, no network beyond loopback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CONTENT = FIXTURES / "content"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "state"
    monkeypatch.setenv("PROVISION_STATE_DIR", str(d))
    return d


@pytest.fixture
def demo_content(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISION_CONTENT_DIR", str(CONTENT))
    return CONTENT


def recorded(name: str) -> dict[str, Any]:
    """A recorded ansible-runner run (see fixtures/record_events.py)."""
    return dict(json.loads((FIXTURES / "events" / f"{name}.json").read_text(encoding="utf-8")))
