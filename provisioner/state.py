"""The state directory: runner artifacts (rotated) and the history of reports.

`$PROVISION_STATE_DIR` if set; else `/var/lib/provision` when running as root; else
`$XDG_STATE_HOME/provision` (default `~/.local/state/provision`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner.exitcodes import UsageProblem
from provisioner.history import expected_gpu_counts
from provisioner.report_model import Report

KEEP_HISTORY = 400
# history reports read for the expected GPU counts where the state has no gpu-counts.json yet (a
# state directory written before it): the newest thirty, as before the index
GPU_COUNTS_SCAN = 30


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

    def save_report(self, report: Report) -> Path:
        self.ensure()
        path = self.history / f"{report.run_id}.json"
        atomic_write_text(path, json.dumps(report.to_dict(), indent=2) + "\n", 0o600)
        new = expected_gpu_counts([report])
        if new or not self.gpu_counts_path.exists():
            # the index so far (a state without one: its history, this report included), then
            # this report's passing hosts; a report with none leaves an existing index unread.
            # Read, merge and replace under a lock: two runs saving at once (two inventories
            # checked by two timers) would otherwise each write the index it read, and the
            # first one's hosts would be lost until their next passing run.
            with self._locked(self.gpu_counts_path.with_name("gpu-counts.lock")):
                counts = {**self.gpu_counts(), **new}
                atomic_write_text(
                    self.gpu_counts_path, json.dumps(counts, sort_keys=True) + "\n", 0o600
                )
        self.rotate_history()
        return path

    @staticmethod
    @contextlib.contextmanager
    def _locked(path: Path) -> Iterator[None]:
        """An exclusive flock on `path` (created 0600, kept: removing it would race the next
        taker), held for the block; released when the file is closed, also by a killed run."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @property
    def gpu_counts_path(self) -> Path:
        return self.root / "gpu-counts.json"

    def gpu_counts(self, hosts: Collection[str] | None = None) -> dict[str, int]:
        """Host -> the GPU count of its newest passing report (health.gpu_count's expected count
        where the inventory sets none), from gpu-counts.json, which every saved report updates:
        one small file read before a run (was: up to thirty whole history reports while hosts
        were not passing). A state without it, or with an unreadable one, is read from the
        newest GPU_COUNTS_SCAN history reports instead (the next saved report writes it)."""
        try:
            raw = json.loads(self.gpu_counts_path.read_text(encoding="utf-8"))
            index = {str(h): n for h, n in raw.items() if isinstance(n, int) and n > 0}
        except (OSError, ValueError, AttributeError):
            newest = list(reversed(self.list_history()))[:GPU_COUNTS_SCAN]
            return expected_gpu_counts(self.iter_reports(newest), hosts)
        return index if hosts is None else {h: index[h] for h in hosts if h in index}

    def rotate_history(self, keep: int = KEEP_HISTORY) -> None:
        files = self.list_history()
        for old in files[:-keep] if len(files) > keep else []:
            old.unlink(missing_ok=True)

    def list_history(self) -> list[Path]:
        if not self.history.is_dir():
            return []
        return sorted(p for p in self.history.glob("*.json") if not p.name.startswith("."))

    def find_report(self, run: str) -> Path:
        """A run by id, id prefix, path, or `latest` / `previous` (`-1`, `-2`, ... counts back)."""
        candidate = Path(run)
        if candidate.suffix == ".json" and candidate.is_file():
            return candidate
        files = self.list_history()
        aliases = {"latest": -1, "previous": -2}
        if run in aliases or re.fullmatch(r"-[1-9]\d*", run):  # -0 is no run (was: the oldest)
            idx = aliases.get(run, int(run) if run.startswith("-") else 0)
            if not files or -idx > len(files):
                raise LookupError(f"no run {run!r} in {self.history} ({len(files)} runs)")
            return files[idx]
        matches = [p for p in files if p.stem == run]
        matches = matches or [p for p in files if p.stem.startswith(run)]
        if len(matches) != 1:
            what = "no run" if not matches else f"{len(matches)} runs match"
            raise LookupError(f"{what} {run!r} in {self.history}")
        return matches[0]

    def load_raw(self, run: str) -> dict[str, Any]:
        """The stored JSON of a run, checked to be a report. UsageProblem (exit 2) naming the
        file when there is no such run or the file is not a report."""
        try:
            path = self.find_report(run)
        except LookupError as exc:
            raise UsageProblem(str(exc)) from exc
        try:
            raw = loads(path.read_text(encoding="utf-8"))
            Report.from_dict(raw)
        except (OSError, ValueError) as exc:
            raise UsageProblem(f"{path}: {corrupt_reason(exc)}") from exc
        return dict(raw)

    def load_report(self, run: str) -> Report:
        return Report.from_dict(self.load_raw(run))

    def iter_reports(
        self, paths: Iterable[Path], warn: Callable[[str], None] | None = None
    ) -> Iterator[Report]:
        """Reports of history files; a corrupt file is skipped with a warning naming it."""
        for path in paths:
            try:
                yield read_report(path)
            except (OSError, ValueError) as exc:
                if warn is not None:
                    warn(f"skipped {path}: {corrupt_reason(exc)}")

    def previous_report(
        self, command: str, before: str, hosts: set[str],
        warn: Callable[[str], None] | None = None,
    ) -> Report | None:
        """The newest earlier report of the same command that covered one of `hosts`."""
        earlier = [p for p in reversed(self.list_history()) if p.stem < before]
        for rep in self.iter_reports(earlier, warn):
            if rep.command == command and hosts & set(rep.hosts):
                return rep
        return None


def corrupt_reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not a provision report (invalid or truncated JSON: {exc})"
    if isinstance(exc, UnicodeDecodeError):
        return f"not a provision report (not UTF-8 text: {exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError):
        return f"cannot be read ({exc.strerror or exc})"
    return f"not a provision report ({exc})"


MAX_DEPTH = 64  # a report nests a few levels; deeper is not one (and would recurse in json)


def loads(text: str) -> Any:  # noqa: ANN401 - JSON
    """json.loads, with nesting deeper than MAX_DEPTH a ValueError (was: RecursionError)."""
    try:
        data = json.loads(text)
    except RecursionError as exc:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from exc
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(
            node, list) else ()
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return data


def read_report(path: Path) -> Report:
    return Report.from_dict(loads(path.read_text(encoding="utf-8")))


def default_state() -> StateDir:
    return StateDir(state_dir())
