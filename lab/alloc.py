"""Loopback addresses and fleet ids for hosts, allocated under a file lock so that several fleets
(parallel test processes, other people's `lab up`) never collide."""

from __future__ import annotations

import contextlib
import errno
import json
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

from lab.util import LabError, file_lock

FIRST_HOST_OCTET = 11


def _candidates() -> Iterator[str]:
    for third in range(256):
        for fourth in range(FIRST_HOST_OCTET, 255):
            yield f"127.0.{third}.{fourth}"


def port_free(address: str, port: int = 22) -> bool:
    """True when nothing listens on address:port (we can bind it ourselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def _load(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def allocate(lab: Path, fleet_dir: Path, count: int) -> tuple[str, list[str]]:
    """Reserve `count` free addresses for a new fleet; returns (fleet id, addresses)."""
    table_path = lab / "addresses.json"
    with file_lock(lab / "addresses.lock"):
        table = {a: e for a, e in _load(table_path).items() if Path(e["fleet_dir"]).exists()}
        used_ids = {e["fleet_id"] for e in table.values()}
        fleet_id = secrets.token_hex(3)
        while fleet_id in used_ids:
            fleet_id = secrets.token_hex(3)
        picked: list[str] = []
        for addr in _candidates():
            if addr in table or not port_free(addr):
                continue
            picked.append(addr)
            if len(picked) == count:
                break
        if len(picked) < count:
            raise LabError("no free loopback addresses left for lab hosts")
        for addr in picked:
            table[addr] = {"fleet_id": fleet_id, "fleet_dir": str(fleet_dir)}
        fleet_dir.mkdir(parents=True, exist_ok=True)  # so the reservation is not stale
        table_path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return fleet_id, picked


def release(lab: Path, fleet_id: str) -> None:
    table_path = lab / "addresses.json"
    with file_lock(lab / "addresses.lock"), contextlib.suppress(OSError):
        table = {
            a: e
            for a, e in _load(table_path).items()
            if e["fleet_id"] != fleet_id and Path(e["fleet_dir"]).exists()
        }
        table_path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
