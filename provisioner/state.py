"""The state directory: runner artifacts (rotated) and the history of reports.

`$PROVISION_STATE_DIR` if set; else `/var/lib/provision` when running as root; else
`$XDG_STATE_HOME/provision` (default `~/.local/state/provision`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

KEEP_RUNS = 20
KEEP_HISTORY = 400


def state_dir() -> Path:
    override = os.environ.get("PROVISION_STATE_DIR")
    if override:
        return Path(override).expanduser().resolve()
    if os.geteuid() == 0:
        return Path("/var/lib/provision")
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "provision"


def new_run_id(command: str, now: datetime | None = None) -> str:
    """Sortable by time, to the millisecond: `20261202T183000.042Z-check-1a2b3c`."""
    t = now or datetime.now(UTC)
    stamp = f"{t:%Y%m%dT%H%M%S}.{t.microsecond // 1000:03d}Z"
    return f"{stamp}-{command}-{secrets.token_hex(3)}"


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a temp file in the same directory, then rename: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class StateDir:
    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def history(self) -> Path:
        return self.root / "history"

    def ensure(self) -> None:
        for d in (self.root, self.runs, self.history):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)

    def save_report(self, report: dict[str, Any]) -> Path:
        self.ensure()
        path = self.history / f"{report['run_id']}.json"
        atomic_write_text(path, json.dumps(report, indent=2, sort_keys=False) + "\n", 0o600)
        self.rotate_history()
        return path

    def rotate_history(self, keep: int = KEEP_HISTORY) -> None:
        files = self.list_history()
        for old in files[:-keep] if len(files) > keep else []:
            old.unlink(missing_ok=True)

    def list_history(self) -> list[Path]:
        if not self.history.is_dir():
            return []
        return sorted(p for p in self.history.glob("*.json") if not p.name.startswith("."))

    def load_report(self, run: str) -> dict[str, Any]:
        """A run by id, id prefix, path, or `latest` / `previous` (`-1`, `-2`, ... counts back)."""
        candidate = Path(run)
        if candidate.suffix == ".json" and candidate.is_file():
            return dict(json.loads(candidate.read_text(encoding="utf-8")))
        files = self.list_history()
        aliases = {"latest": -1, "previous": -2}
        if run in aliases or re.fullmatch(r"-\d+", run):
            idx = aliases.get(run, int(run) if run.startswith("-") else 0)
            if not files or -idx > len(files):
                raise LookupError(f"no run {run!r} in {self.history} ({len(files)} runs)")
            return dict(json.loads(files[idx].read_text(encoding="utf-8")))
        matches = [p for p in files if p.stem == run]
        matches = matches or [p for p in files if p.stem.startswith(run)]
        if len(matches) != 1:
            what = "no run" if not matches else f"{len(matches)} runs match"
            raise LookupError(f"{what} {run!r} in {self.history}")
        return dict(json.loads(matches[0].read_text(encoding="utf-8")))

    def previous_report(self, command: str, before: str, hosts: set[str]) -> dict[str, Any] | None:
        """The newest earlier report of the same command that covered one of `hosts`."""
        for path in reversed(self.list_history()):
            if path.stem >= before:
                continue
            try:
                rep = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if rep.get("command") == command and hosts & set(rep.get("hosts", {})):
                return dict(rep)
        return None


def default_state() -> StateDir:
    return StateDir(state_dir())
