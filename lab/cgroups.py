"""Per-host cgroups: each host's supervisor gets its own cgroup in every systemd-relevant hierarchy.

Without this all the guests' systemds share one `payload` cgroup and units sporadically fail with
"Failed at step CGROUP" (test-lab pitfall 1). Teardown kills whatever is left and removes the tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PARENT = "provision-lab"


def hierarchies() -> list[Path]:
    """Mount points of the cgroup2 tree and of the v1 name=systemd tree."""
    found: list[Path] = []
    with Path("/proc/self/mountinfo").open(encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fstype, _src, opts = [*right.split(), "", "", ""][:3]
            mnt = Path(left.split()[4])
            if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in opts.split(",")):
                found.append(mnt)
    return found


def host_cgroups(machine: str) -> list[Path]:
    return [h / PARENT / machine for h in hierarchies()]


def _procs(cg: Path) -> list[int]:
    pids: list[int] = []
    for dirpath, _dirs, files in os.walk(cg):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                text = (Path(dirpath) / "cgroup.procs").read_text(encoding="utf-8")
                pids += [int(p) for p in text.split()]
    return pids


def pids_in(machine: str) -> list[int]:
    found: set[int] = set()
    for cg in host_cgroups(machine):
        if cg.exists():
            found.update(_procs(cg))
    return sorted(found)


def kill_and_remove(machine: str, timeout: float = 10.0) -> None:
    """SIGKILL every process left in the host's cgroups, then rmdir them (deepest first)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = pids_in(machine)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes survive in cgroups of {machine}: {pids}")
        time.sleep(0.1)
    for cg in host_cgroups(machine):
        if not cg.exists():
            continue
        for dirpath, _dirs, _files in os.walk(cg, topdown=False):
            for _ in range(50):
                try:
                    Path(dirpath).rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the kernel finishes reaping
                    time.sleep(0.05)
    for h in hierarchies():
        with contextlib.suppress(OSError):
            (h / PARENT).rmdir()  # only succeeds when no other fleet uses it


def leftovers() -> list[Path]:
    """Host cgroups that still exist (for teardown tests)."""
    out: list[Path] = []
    for h in hierarchies():
        parent = h / PARENT
        if parent.exists():
            out += [p for p in parent.iterdir() if p.is_dir()]
    return out
