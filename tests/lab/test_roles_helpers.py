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
    """The CLI's own mapping of the lab's stack onto the role variables, plus the lab's settings."""
    from provisioner import stack  # noqa: PLC0415 - keep collection light

    # the validation role's own defaults stay in charge here (its lab tests set what they need)
    out = {
        k: v
        for k, v in stack.load(stack_path).to_extravars().items()
        if not k.startswith("validation_")
    }
    out.update(
        {
            "nvidia_driver_manage_kernel_modules": False,  # the lab cannot load kernel modules
            "preflight_min_free_gib": 1,
            "validation_enabled": False,
        }
    )
    out.update(overrides)
    return out


# What a read-only run must never change: packages, holds, files under /etc, /usr/local and /opt
# (path, type, size, mode, mtime, link target; content hashes under /etc, /usr/local); units.
FINGERPRINT = r"""
set -e
echo '## dpkg'; dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' | sort
echo '## holds'; apt-mark showhold | sort
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
    rc: int
    stats: dict[str, dict[str, int]]
    facts: dict[str, dict[str, Any]]
    output: str

    def changed(self, host: str) -> int:
        return self.stats.get(host, {}).get("changed", 0)

    def checks(self, host: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for key, value in self.facts.get(host, {}).items():
            if key.endswith("_checks") and isinstance(value, list):
                out.update({c["id"]: c for c in value})
        return out


def run_playbook(
    fleet: Any,
    playbook: str,
    extravars: dict[str, Any],
    *,
    check: bool = False,
    tmp: Path,
    limit: str | None = None,
    tags: str | None = None,
) -> PlayResult:
    """Run playbooks/<playbook> via ansible-runner; collect stats and *_checks facts."""
    import ansible_runner  # noqa: PLC0415 - heavy import, only for lab tests

    os.environ["PATH"] = f"{BIN}:{os.environ.get('PATH', '')}"
    cmdline = "--check" if check else ""
    if limit:
        cmdline += f" --limit {limit}"
    if tags:
        cmdline += f" --tags {tags}"
    (tmp / "runner").mkdir(parents=True, exist_ok=True)
    import signal  # noqa: PLC0415

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    r = ansible_runner.run(
        private_data_dir=str(tmp / "runner"),
        playbook=str(PLAYBOOKS / playbook),
        inventory=str(fleet.inventory_path),
        extravars=extravars,
        cmdline=cmdline.strip() or None,
        envvars={
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_COLLECTIONS_PATH": str(PLAYBOOKS / "collections"),
            "ANSIBLE_FORKS": "8",
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_NOCOLOR": "1",
        },
        quiet=True,
        suppress_env_files=True,
    )
    for sig, handler in saved.items():  # ansible-runner leaves its own handlers installed
        if handler is not None:
            signal.signal(sig, handler)
    facts: dict[str, dict[str, Any]] = {}
    lines: list[str] = []
    for ev in r.events:
        data = ev.get("event_data", {})
        if ev.get("stdout"):
            lines.append(ev["stdout"])
        if ev.get("event") == "runner_on_ok":
            af = data.get("res", {}).get("ansible_facts") or {}
            if af:
                facts.setdefault(data["host"], {}).update(af)
    stats: dict[str, dict[str, int]] = {}
    for key, per_host in (r.stats or {}).items():
        if isinstance(per_host, dict):
            for host, n in per_host.items():
                stats.setdefault(host, {})[key] = n
    return PlayResult(r.rc, stats, facts, "\n".join(lines))


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
