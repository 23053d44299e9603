"""Run one command and measure it: wall time and the CPU time of its whole process tree.

Controller CPU = user + sys of every process the command started, read as the growth of this
process's RUSAGE_CHILDREN across the run. RUSAGE_CHILDREN only holds descendants that were waited
for, and ssh's ControlPersist master leaves its parent (it is reparented, so nobody waits for it and
its CPU would be lost). So while a measured command runs this process is a child subreaper
(prctl PR_SET_CHILD_SUBREAPER): orphans of the command are reparented to it, and after the command
ends they (the ssh masters) are stopped and reaped, which adds their CPU to RUSAGE_CHILDREN. This
also makes every run start cold: no run reuses a connection a previous run left open.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
TAIL = 6000  # characters of output kept with a sample


@dataclass(frozen=True)
class Sample:
    """One measured run."""

    label: str
    wall_s: float
    cpu_user_s: float
    cpu_sys_s: float
    rc: int
    started: float  # epoch seconds, just before the process was started
    orphans: int  # processes the command left behind (stopped and reaped, CPU included)
    output: str  # the tail of stdout + stderr
    output_path: str = ""  # the full output, while the bench's work directory exists

    @property
    def cpu_s(self) -> float:
        return self.cpu_user_s + self.cpu_sys_s

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("output")
        data.pop("output_path")
        data["cpu_s"] = round(self.cpu_s, 3)
        for k in ("wall_s", "cpu_user_s", "cpu_sys_s", "started"):
            data[k] = round(float(data[k]), 3)
        return data


def _prctl_subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def children(pid: int | None = None) -> set[int]:
    """Direct children of a process (all its threads)."""
    found: set[int] = set()
    base = Path(f"/proc/{pid or os.getpid()}/task")
    with contextlib.suppress(OSError):
        for task in base.iterdir():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(c) for c in (task / "children").read_text().split())
    return found


def _reap(pids: set[int], timeout: float = 5.0) -> None:
    """SIGTERM the given children of this process, then wait for them (SIGKILL after timeout)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    pending = set(pids)
    while pending:
        for pid in list(pending):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pending.discard(pid)
                continue
            if done:
                pending.discard(pid)
        if not pending:
            break
        if time.monotonic() > deadline:
            for pid in pending:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.02)


def run(
    label: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path | None = None,
    timeout: float = 1800.0,
    log_dir: Path | None = None,
) -> Sample:
    """Run argv, wait, stop and reap what it left behind; return the sample."""
    before = children()
    subreaper = _prctl_subreaper(True)
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out_dir = log_dir or Path(tempfile.gettempdir())
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, out_name = tempfile.mkstemp(prefix=f"{label}-", suffix=".log", dir=out_dir)
    try:
        with os.fdopen(fd, "w+b") as out:
            started = time.time()
            t0 = time.monotonic()
            proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=str(cwd) if cwd else None,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                rc = 124 if rc in (-9, 137) else rc
            wall = time.monotonic() - t0
            left = children() - before - {proc.pid}
            _reap(left)
            out.seek(0)
            data = out.read()
    finally:
        if subreaper:
            _prctl_subreaper(False)
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = data.decode("utf-8", "replace")
    if log_dir is None:
        Path(out_name).unlink(missing_ok=True)
        out_name = ""
    return Sample(
        label=label,
        wall_s=wall,
        cpu_user_s=usage1.ru_utime - usage0.ru_utime,
        cpu_sys_s=usage1.ru_stime - usage0.ru_stime,
        rc=rc,
        started=started,
        orphans=len(left),
        output=text[-TAIL:],
        output_path=out_name,
    )
