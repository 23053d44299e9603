"""Lab: `provision --host NEW --wait DURATION` against a real sshd and a simulated cloud-init.

* sshd stopped: the bound passes (exit 3, `ssh.connect` naming the host and what it waited for);
  stopped, and started again while provision waits: it goes on and provisions (exit 0).
* cloud-init running (a `cloud-init` on the host that prints `status: running` and ends only when a
  file appears): the bound passes (exit 1, `ssh.cloud_init`); then it finishes while provision
  waits, and provisioning starts only after that.

The runs are the full-run command limited to the preflight role (`--tags preflight`): the wait,
the SSH preflight and the playbook all run, in seconds.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_roles_helpers import PROVISION

FAKE_CLOUD_INIT = r"""#!/bin/sh
# lab stand-in for cloud-init: `status --wait` says running until the flag file appears
[ "$1" = status ] || exit 64
echo 'status: running'
while [ ! -e /run/lab-cloud-init-done ]; do sleep 0.2; done
echo
echo 'status: done'
"""


def _args(fleet: Any, out: Path, wait: str) -> list[str]:
    h = fleet.hosts[0]
    return [
        str(PROVISION), "--host", f"{h.user}@{h.address}", "--key", str(h.key),
        "--known-hosts", str(fleet.known_hosts), "--stack", str(fleet.stack_path),
        "-e", f"@{fleet.extra_vars_path}", "--tags", "preflight", "--wait", wait,
        "--report-dir", str(out),
    ]


class Provision:
    """`provision` in the background; its stderr lines as they come."""

    def __init__(self, argv: list[str], tmp: Path) -> None:
        env = dict(os.environ, PROVISION_STATE_DIR=str(tmp / "state"))
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._out: list[str] = []
        threading.Thread(target=self._pump_err, daemon=True).start()
        threading.Thread(target=self._pump_out, daemon=True).start()

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            self._q.put(line)
        self._q.put(None)

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        self._out.extend(self.proc.stdout)

    def until(self, pred: Callable[[str], bool], timeout: float = 300) -> str:
        """The first stderr line that satisfies pred (AssertionError if the process ends first)."""
        while True:
            line = self._q.get(timeout=timeout)
            assert line is not None, "provision ended first:\n" + "\n".join(self.lines[-40:])
            if pred(line):
                return line

    def finish(self, timeout: float = 900) -> int:
        return self.proc.wait(timeout=timeout)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n--- stdout\n" + "".join(self._out)


def _report(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "report.json").read_text(encoding="utf-8")))


def _run(argv: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PROVISION_STATE_DIR=str(tmp / "state"))
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, env=env)


def test_wait_for_sshd_stopped_then_started_again(fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory(1)
    h = fleet.hosts[0]
    assert fleet.run(h.name, "systemctl stop ssh.service").ok
    assert not fleet.run(h.name, "true", via="ssh", timeout=30).ok  # really down

    # the bound passes: exit 3, ssh.connect naming the host and what it waited for
    proc = _run(_args(fleet, tmp_path / "down", "4s"), tmp_path)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = _report(tmp_path / "down")["hosts"].values()
    assert entry["status"] == "unreachable"
    (check,) = entry["checks"]
    assert check["id"] == "ssh.connect" and check["status"] == "fail", check
    assert check["message"].startswith(
        f"{h.address}: gave up after 4s (--wait) waiting for SSH to answer on {h.address}:22"
    ), check["message"]

    # sshd comes back while provision waits: it goes on through the preflight and the playbook
    run = Provision(_args(fleet, tmp_path / "up", "5m"), tmp_path)
    refused = run.until(lambda x: "no SSH yet" in x)
    assert "refused" in refused.lower(), refused
    assert run.proc.poll() is None
    assert fleet.run(h.name, "systemctl start ssh.service").ok
    rc = run.finish()
    assert rc == 0, run.text()[-6000:]
    lines = run.lines
    answered = next(i for i, x in enumerate(lines) if "SSH answers" in x)
    first_task = next(i for i, x in enumerate(lines) if " | " in x)
    assert answered < first_task, run.text()[-4000:]
    (entry,) = _report(tmp_path / "up")["hosts"].values()
    assert entry["status"] in ("ok", "changed"), entry
    assert entry["preflight"]["status"] == "ok"
    checks = {c["id"]: c["status"] for c in entry["checks"]}
    assert checks and all(v in ("pass", "skip") for v in checks.values()), checks


def test_wait_for_cloud_init_to_finish(fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory(1)
    h = fleet.hosts[0]
    res = fleet.runtime(h.name).run_nsenter(
        "cat > /usr/local/bin/cloud-init && chmod 0755 /usr/local/bin/cloud-init "
        "&& rm -f /run/lab-cloud-init-done",
        timeout=30,
        input_text=FAKE_CLOUD_INIT,
    )
    assert res.ok, res.stderr
    assert fleet.run(h.name, "command -v cloud-init", via="ssh").stdout.strip()

    # still running when the bound passes: exit 1, ssh.cloud_init
    proc = _run(_args(fleet, tmp_path / "slow", "6s"), tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = _report(tmp_path / "slow")["hosts"].values()
    assert entry["status"] == "failed"
    (check,) = entry["checks"]
    assert (check["id"], check["status"]) == ("ssh.cloud_init", "fail"), check
    assert check["message"].startswith(
        f"{h.address}: gave up after 6s (--wait) waiting for cloud-init to finish"
    ), check["message"]
    assert "last status: running" in check["message"]

    # it finishes while provision waits; provisioning starts after that
    run = Provision(_args(fleet, tmp_path / "done", "5m"), tmp_path)
    run.until(lambda x: "cloud-init is running" in x)
    assert run.proc.poll() is None
    assert not any(" | " in x for x in run.lines), run.text()  # no task has run yet
    assert fleet.run(h.name, "touch /run/lab-cloud-init-done").ok
    rc = run.finish()
    assert rc == 0, run.text()[-6000:]
    done = next(i for i, x in enumerate(run.lines) if "cloud-init done; ready" in x)
    first_task = next(i for i, x in enumerate(run.lines) if " | " in x)
    assert done < first_task
    (entry,) = _report(tmp_path / "done")["hosts"].values()
    assert entry["status"] in ("ok", "changed"), entry
    assert entry["preflight"]["status"] == "ok"
