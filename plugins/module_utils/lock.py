# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""One provisioning run per host at a time: a lock file on the host, with a sign of life.

Runs on the target (Python 3.8+): standard library only; the clock and the file system are passed
in, so the rules are unit-tested. The lock lives in /var/lib/provision (it must survive the
driver's reboot in the middle of a run). A run refreshes its `heartbeat` with every probe; another
run is refused while the lock is alive, naming the holder (controller, pid, start time); a lock
whose heartbeat is older than `stale_s` belongs to a dead run and is taken over.
"""

from __future__ import absolute_import, annotations, division, print_function

import contextlib
import json
import os
import time
from typing import Any, Callable

LOCK_PATH = "/var/lib/provision/run.lock"
DEFAULT_STALE_S = 1200  # longer than the longest single task of a run (reboot, torch install)


def read_lock(path: str = LOCK_PATH) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_lock(data: dict[str, Any], path: str = LOCK_PATH) -> None:
    """Atomically (rename), mode 0600, directory 0700."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, sort_keys=True)
    os.rename(tmp, path)


def remove_lock(path: str = LOCK_PATH) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def describe(holder: dict[str, Any], now: float) -> str:
    started = holder.get("started_iso") or "?"
    age = now - float(holder.get("heartbeat") or 0)
    return "run %s from %s (pid %s), started %s, last sign of life %d s ago" % (
        holder.get("run_id") or "?",
        holder.get("controller") or "?",
        holder.get("pid") or "?",
        started,
        max(age, 0),
    )


def decide(
    current: dict[str, Any] | None,
    me: dict[str, Any],
    now: float,
    stale_s: float,
    takeover: bool = False,
) -> tuple[str, str]:
    """What to do with the lock: ("acquire"|"refresh"|"takeover"|"refuse", reason)."""
    if current is None:
        return "acquire", "no other run holds the host"
    if current.get("run_id") == me.get("run_id"):
        return "refresh", "this run holds the lock"
    age = now - float(current.get("heartbeat") or 0)
    if takeover:
        return "takeover", "taken over on request from " + describe(current, now)
    if age > stale_s:
        return "takeover", "taken over from a dead run (no sign of life for more than %d s): %s" % (
            stale_s,
            describe(current, now),
        )
    return "refuse", "another provisioning run holds this host: %s" % describe(current, now)


def apply(
    me: dict[str, Any],
    stale_s: float = DEFAULT_STALE_S,
    takeover: bool = False,
    path: str = LOCK_PATH,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Take or refresh the lock for the run `me` ({run_id, controller, pid, started_iso}).
    Returns {action, reason, holder}; "refuse" leaves the file alone."""
    now = clock()
    current = read_lock(path)
    action, reason = decide(current, me, now, stale_s, takeover)
    if action != "refuse":
        data = dict(current or {}) if action == "refresh" else {}
        data.update(me)
        data.setdefault("started", now)
        data["heartbeat"] = now
        write_lock(data, path)
    return {"action": action, "reason": reason, "holder": current}


def refresh(run_id: str, path: str = LOCK_PATH, clock: Callable[[], float] = time.time) -> bool:
    """A sign of life of the run holding the lock (every probe of the run); False when the lock is
    not this run's (nothing written)."""
    current = read_lock(path)
    if current is None or current.get("run_id") != run_id:
        return False
    current["heartbeat"] = clock()
    write_lock(current, path)
    return True


def release(run_id: str, path: str = LOCK_PATH) -> bool:
    """Remove the lock if this run holds it (never another run's)."""
    current = read_lock(path)
    if current is not None and current.get("run_id") == run_id:
        remove_lock(path)
        return True
    return False
