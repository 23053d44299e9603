"""Shared fixtures for the CLI unit tests (no root, no network beyond loopback)."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CONTENT = FIXTURES / "content"
CAPTURES = FIXTURES / "captures"  # real command outputs, each with its public source (SOURCES.md)
REPO = Path(__file__).resolve().parents[2]
# The collection's Python (plugins/module_utils) imports itself as
# ansible_collections.provision.gpu: the playbook-adjacent link makes that importable from a
# checkout.
COLLECTIONS = REPO / "playbooks" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


def capture(name: str) -> str:
    """A captured real output (tests/unit/fixtures/captures), comment lines of the capture kept."""
    return (CAPTURES / name).read_text(encoding="utf-8")


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


def cli_env(tmp_path: Path) -> dict[str, str]:
    """A minimal environment for running the `provision` executable against the demo content."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PROVISION_STATE_DIR": str(tmp_path / "state"),
        "PROVISION_CONTENT_DIR": str(CONTENT),
    }


@pytest.fixture
def silent_port() -> Iterator[tuple[int, list[socket.socket]]]:
    """A loopback port that accepts TCP and never says a word (a hung sshd): (port, connections)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        yield srv.getsockname()[1], held
    finally:
        stop.set()
        th.join(timeout=5)
        for conn in held:
            conn.close()
        srv.close()
