"""What the bench reads on the lab hosts themselves (never through the tool under test).

* CPU inside a host: usage_usec of the host's own cgroup2 cgroup (lab/cgroups.py puts every host's
  supervisor, nspawn and all of the guest's processes there), read before and after a run.
* Apt index refreshes: an APT::Update::Pre-Invoke hook (/etc/apt/apt.conf.d/00provision-bench)
  appends a timestamp to /var/lib/provision-bench/apt-update.log at every refresh (on disk: a reboot
  during the run keeps the count); apt-get update and python-apt's Cache.update() both run the hook.
  The mtimes of /var/lib/apt/lists are not used: apt gives list files the server's Last-Modified
  time and leaves them alone when the server answers 304, so they undercount.
* Time to the first SSH connection: sshd's "Accepted ..." journal entry (microsecond timestamps).
* Package transactions: /var/log/apt/history.log.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import parse

APT_HOOK_FILE = "/etc/apt/apt.conf.d/00provision-bench"
COUNTER_DIR = "/var/lib/provision-bench"
APT_COUNTER = f"{COUNTER_DIR}/apt-update.log"
APT_HOOK = (
    'APT::Update::Pre-Invoke {"mkdir -p /var/lib/provision-bench && date +%s.%N >> '
    + APT_COUNTER
    + ' || true";};\n'
)


class HostSide:
    """Readings on the hosts of one lab fleet (lab.Fleet)."""

    def __init__(self, fleet: Any) -> None:  # noqa: ANN401 - lab.Fleet (lab is not typed here)
        self.fleet = fleet

    def _sh(self, host: str, command: str, timeout: float = 120.0) -> str:
        res = self.fleet.run(host, command, timeout=timeout)
        if res.rc != 0:
            raise RuntimeError(f"{host}: `{command[:80]}` exited {res.rc}: {res.stderr[-400:]}")
        return str(res.stdout)

    # ----------------------------------------------------------------- CPU inside the hosts
    def cgroup_files(self, host: str) -> list[Path]:
        from lab import cgroups  # noqa: PLC0415

        machine = self.fleet.host(host).machine
        stats = [cg / "cpu.stat" for cg in cgroups.host_cgroups(machine)]
        return [f for f in stats if f.exists()]

    def cpu_s(self, hosts: Iterable[str]) -> dict[str, float | None]:
        """host -> cumulative CPU seconds of everything in the host (None: no cgroup2 cpu.stat)."""
        out: dict[str, float | None] = {}
        for h in hosts:
            value = None
            for f in self.cgroup_files(h):
                value = parse.cgroup_usage_s(f.read_text(encoding="utf-8"))
                if value is not None:
                    break
            out[h] = value
        return out

    # ----------------------------------------------------------------- apt refreshes
    def install_apt_counter(self, host: str) -> None:
        self._sh(
            host,
            f"mkdir -p {COUNTER_DIR} && printf %s {shlex.quote(APT_HOOK)} > {APT_HOOK_FILE}"
            f" && : > {APT_COUNTER}",
        )

    def apt_updates(self, host: str, since: float, until: float | None = None) -> int:
        text = self._sh(host, f"cat {APT_COUNTER} 2>/dev/null || true")
        return parse.apt_updates(text, since, until)

    def apt_history(self, host: str) -> list[parse.AptTransaction]:
        return parse.apt_history(self._sh(host, "cat /var/log/apt/history.log 2>/dev/null || true"))

    # ----------------------------------------------------------------- SSH
    def first_ssh(self, host: str, since: float) -> float | None:
        """Epoch seconds of the first accepted SSH login at or after `since`."""
        text = self._sh(
            host,
            f"journalctl -o json --no-pager --since @{int(since) - 1} SYSLOG_IDENTIFIER=sshd"
            " 2>/dev/null || true",
        )
        return parse.first_ssh_accept(text, since)
