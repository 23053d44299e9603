"""Pure parsers for what the bench reads: Ansible's PLAY RECAP, apt's history.log, sshd's journal,
the apt-update counter, /proc/cpuinfo and /proc/meminfo. Unit-tested (tests/unit/test_bench.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

RECAP_LINE = re.compile(r"^(?P<host>\S+)\s*:\s*(?P<counts>(?:\w+=\d+\s*)+)$")
RECAP_KEYS = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")


def play_recap(text: str) -> dict[str, dict[str, int]]:
    """host -> counts from the last PLAY RECAP block of ansible-playbook's output."""
    start = text.rfind("PLAY RECAP")
    if start < 0:
        return {}
    out: dict[str, dict[str, int]] = {}
    for line in text[start:].splitlines()[1:]:
        m = RECAP_LINE.match(line.strip())
        if not m:
            if out:
                break
            continue
        counts = dict.fromkeys(RECAP_KEYS, 0)
        for item in m.group("counts").split():
            key, _, value = item.partition("=")
            counts[key] = int(value)
        out[m.group("host")] = counts
    return out


def tasks_of(counts: dict[str, int]) -> int:
    """Task results of one host in a recap.

    The issue counts ok+changed+skipped+failed; in Ansible's stats `ok` already includes every
    changed result (a changed task is ok=1 changed=1), so a changed task is counted once here:
    ok + failed + skipped + rescued + unreachable (= the host's runner_on_start events). For a
    read-only check changed is 0 and both formulas agree."""
    return sum(counts.get(k, 0) for k in ("ok", "failed", "skipped", "rescued", "unreachable"))


@dataclass
class AptTransaction:
    """One entry of /var/log/apt/history.log."""

    start: str = ""
    end: str = ""
    commandline: str = ""
    requested: list[str] = field(default_factory=list)  # pkg=version, not automatic
    automatic: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    actions: dict[str, int] = field(default_factory=dict)  # Install/Upgrade/... -> packages

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "commandline": self.commandline,
            "requested": self.requested,
            "automatic": len(self.automatic),
            "removed": self.removed,
            "actions": self.actions,
        }


# "pkg:amd64 (1.2-3)" or "pkg:amd64 (1.2-3, automatic)" or an upgrade "pkg:amd64 (1.0, 1.1)"
_PKG = re.compile(r"([^\s,()]+)\s+\(([^)]*)\)")


def apt_history(text: str) -> list[AptTransaction]:
    """Transactions of apt's history.log (apt-get and python-apt both log there)."""
    out: list[AptTransaction] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        tx = AptTransaction()
        seen = False
        for line in block.splitlines():
            key, _, value = line.partition(": ")
            value = value.strip()
            if key == "Start-Date":
                tx.start, seen = value, True
            elif key == "End-Date":
                tx.end = value
            elif key == "Commandline":
                tx.commandline = value
            elif key in ("Install", "Upgrade", "Downgrade", "Reinstall", "Remove", "Purge"):
                pkgs = _PKG.findall(value)
                tx.actions[key] = len(pkgs)
                for name, detail in pkgs:
                    parts = [p.strip() for p in detail.split(",")]
                    bare = name.split(":", 1)[0]
                    if key in ("Remove", "Purge"):
                        tx.removed.append(bare)
                    elif "automatic" in parts:
                        tx.automatic.append(f"{bare}={parts[0]}")
                    else:
                        tx.requested.append(f"{bare}={parts[-1]}")
        if seen:
            out.append(tx)
    return out


def first_ssh_accept(journal_json: str, since: float) -> float | None:
    """Epoch seconds of sshd's first accepted login at or after `since` (journalctl -o json)."""
    best: float | None = None
    for raw in journal_json.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if not isinstance(message, str) or not message.startswith("Accepted "):
            continue
        ts = int(entry.get("__REALTIME_TIMESTAMP", 0)) / 1e6
        if ts >= since and (best is None or ts < best):
            best = ts
    return best


def apt_updates(log_text: str, since: float, until: float | None = None) -> int:
    """Index refreshes in the window, from the counter the bench's APT::Update::Pre-Invoke hook
    appends to (one epoch timestamp per refresh, apt-get update and python-apt alike)."""
    n = 0
    for line in log_text.split():
        try:
            ts = float(line)
        except ValueError:
            continue
        if ts >= since and (until is None or ts <= until):
            n += 1
    return n


def cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model"):
            return value.strip()
    return "unknown"


def mem_total_gib(meminfo: str) -> float | None:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return None


def cgroup_usage_s(cpu_stat: str) -> float | None:
    """usage_usec of a cgroup2 cpu.stat, in seconds."""
    for line in cpu_stat.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    return None
