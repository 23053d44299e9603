"""Helpers for the lab tests: run a playbook against a lab fleet through ansible-runner, or run the
`provision` CLI and read its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
BIN = Path(sys.executable).parent


def stack_vars(stack_path: Path, **overrides: Any) -> dict[str, Any]:
    """The CLI's own mapping of the lab's stack onto the role variables (gpu_stack_*), plus the
    lab's settings; validation off unless a test turns it on."""
    from provisioner import stack  # noqa: PLC0415 - keep collection light

    out = dict(stack.load(stack_path).to_extravars())
    out.update(
        {
            "gpu_stack_kernel_modules": False,  # the lab cannot load kernel modules
            "gpu_stack_kernel_headers": True,  # ... but its DKMS builds only where headers are
            "gpu_stack_preflight_min_free_gib": 1,
            "gpu_stack_validation_enabled": False,
        }
    )
    out.update(overrides)
    return out


# What a read-only run must never change: packages (dpkg, and rpm where present), holds, files under
# /etc, /usr/local and /opt (path, type, size, mode, mtime, link target; content hashes under /etc,
# /usr/local); units.
FINGERPRINT = r"""
set -e
echo '## dpkg'; dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' | sort
echo '## holds'; apt-mark showhold | sort
if command -v rpm >/dev/null; then
  echo '## rpm'; rpm -qa --qf '%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n' | sort
fi
echo '## files'
find /etc /usr/local /opt -xdev -printf '%p %y %s %m %T@ %l\n' | sort
echo '## content'
find /etc /usr/local -xdev -type f -print0 | sort -z | xargs -0 sha256sum
echo '## units'
systemctl list-unit-files --state=enabled --no-legend --no-pager | sort
"""


def fingerprint(fleet: Any, host: str) -> str:
    res = fleet.run(host, FINGERPRINT, timeout=300)
    assert res.rc == 0, res.stdout[-2000:]
    return str(res.stdout)


def fingerprint_diff(before: str, after: str) -> list[str]:
    import difflib  # noqa: PLC0415

    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]


@dataclass
class PlayResult:
    """What the CLI itself would make of a run: its runner, its event handling (RunState)."""

    rc: int
    status: str
    hosts: dict[str, Any]  # host -> provisioner.events.HostState
    output: str

    def changed(self, host: str) -> int:
        return int(self.hosts[host].changed) if host in self.hosts else 0

    def checks(self, host: str) -> dict[str, dict[str, Any]]:
        return {c["id"]: c for c in self.hosts[host].checks} if host in self.hosts else {}

    def report(self, host: str) -> dict[str, Any]:
        """The host's report facts (provision_report and the roles' *_report)."""
        return dict(self.hosts[host].facts) if host in self.hosts else {}

    def tasks(self, host: str) -> int:
        """Tasks the recap counts for the host (ok + changed + failed + skipped)."""
        h = self.hosts[host]
        return int(h.ok + h.changed + h.failed + h.skipped)


def run_playbook(
    fleet: Any,
    playbook: str,
    extravars: dict[str, Any],
    *,
    check: bool = False,
    tmp: Path,
    limit: str | None = None,
    tags: str | None = None,
    skip_tags: str | None = None,
) -> PlayResult:
    """Run playbooks/<playbook> through provisioner.runner (the CLI's one ansible-runner wrapper)
    and collect checks and facts with provisioner.events, as `provision` does."""
    from provisioner import content, events, runner  # noqa: PLC0415

    c = content.locate()
    state = events.RunState(check_mode=check)
    lines: list[str] = []

    def on_event(ev: dict[str, Any]) -> None:
        state.feed(ev)
        if ev.get("stdout"):
            lines.append(str(ev["stdout"]))

    tmp.mkdir(parents=True, exist_ok=True)
    req = runner.RunRequest(
        project_dir=c.playbooks,
        playbook=playbook,
        inventory=Path(fleet.inventory_path),
        artifact_dir=tmp / "runs",
        ident="run",
        extravars=extravars,
        collections_path=c.collections_path,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        check=check,
        forks=8,
        become=None,  # the lab inventory says become
    )
    result = runner.run_playbook(req, on_event)
    state.apply_stats({k: dict(v) for k, v in result.stats.items()})
    return PlayResult(result.rc, result.status, dict(state.hosts), "\n".join(lines))


PROVISION = BIN / "provision"


def provision_cli(
    tmp: Path, *args: str, report: str = "report", timeout: float = 1800
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run `provision ARGS --report-dir tmp/<report>` (state under tmp/state); return the process
    and the parsed report.json."""
    out = tmp / report
    env = dict(os.environ, PROVISION_STATE_DIR=str(tmp / "state"))
    proc = subprocess.run(
        [str(PROVISION), *args, "--report-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    path = out / "report.json"
    assert path.exists(), f"no report.json (exit {proc.returncode}): {proc.stderr[-3000:]}"
    return proc, json.loads(path.read_text(encoding="utf-8"))


def fleet_args(fleet: Any) -> list[str]:
    """The options that point `provision` at a lab fleet by its inventory."""
    return [
        "-i",
        str(fleet.inventory_path),
        "--stack",
        str(fleet.stack_path),
        "--known-hosts",
        str(fleet.known_hosts),
    ]
