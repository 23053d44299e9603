"""Lab: security properties of a real run (issue 14 "Security"), on one simulated 8x H100 Ubuntu
22.04 host.

One full `provision` run (validation off) with a known secret planted through every input path:
`-e KEY=VALUE`, `-e @file`, an inventory variable and the become password (`-K`, answered at the
CLI's prompt). Then:

* every file and directory the roles create on the host is owned by root and none is
  world-writable (the configuration files 0644, the lock directory 0700, the whole torch venv);
* no secret is in anything the run wrote: the state directory (the run's artifacts, the
  history), the report directory, the CLI's output, and on the host /var/lib/provision, the logs,
  the temp directories and the admin's and root's homes.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_roles_helpers import PROVISION

SECRETS = {where: f"provision-secret-{where.strip('-@ ').replace(' ', '-')}-{uuid.uuid4().hex}"
           for where in ("-e", "-e @file", "inventory", "-K")}

# What the roles write on a host, with the mode each must have (None: a directory tree, checked
# for owner and world-writable entries only). Every pattern must match at least one path.
ROLE_FILES = {
    "/etc/apt/preferences.d/provision-*": "644",
    "/etc/apt/sources.list.d/cuda-*": "644",
    "/etc/profile.d/cuda.sh": "644",
    "/etc/ld.so.conf.d/cuda-*": "644",
    "/etc/modprobe.d/blacklist-nouveau.conf": "644",
    "/etc/systemd/system/nvidia-persistenced.service.d": "755",
    "/etc/systemd/system/nvidia-persistenced.service.d/*": "644",
    "/usr/share/keyrings/cuda-archive-keyring.gpg": "644",  # the key apt trusts for NVIDIA
    "/var/lib/provision": "700",
    "/opt/pytorch": None,
}
# Where on the host a secret could land: provision's own directory, the logs (sudo, sshd, the
# journal), temp directories (Ansible's module files), the homes of the admin and of root.
HOST_PLACES = ("/var/lib/provision", "/var/log", "/tmp", "/var/tmp", "/home", "/root", "/etc")


@dataclass
class Run:
    fleet: Any
    work: Path
    proc: subprocess.CompletedProcess[str]
    report: dict[str, Any]

    @property
    def host(self) -> str:
        return str(self.fleet.hosts[0].name)

    def sh(self, script: str) -> str:
        res = self.fleet.run(self.host, script, timeout=300)
        assert res.rc == 0, (script[:200], res.stdout[-2000:], res.stderr[-2000:])
        return str(res.stdout)


@pytest.fixture(scope="module")
def run(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A full run with a secret through each input path (the inventory is the lab's, plus one
    variable)."""
    fleet = lab.create_fleet(1, ["h100-sxm-8"])
    work = tmp_path_factory.mktemp("security")
    try:
        inventory = yaml.safe_load(Path(fleet.inventory_path).read_text(encoding="utf-8"))
        inventory["all"]["vars"]["registry_api_token"] = SECRETS["inventory"]
        (work / "inventory.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
        (work / "vault.yml").write_text(f"db_password: {SECRETS['-e @file']}\n", encoding="utf-8")
        proc = subprocess.run(
            [str(PROVISION), "-i", str(work / "inventory.yml"), "--stack", str(fleet.stack_path),
             "--known-hosts", str(fleet.known_hosts), "-K", "-v",
             "-e", f"api_token={SECRETS['-e']}", "-e", f"@{work / 'vault.yml'}",
             "-e", "gpu_stack_validation_enabled=false", "--report-dir", str(work / "report")],
            input=SECRETS["-K"] + "\n", capture_output=True, text=True, timeout=1800,
            check=False, env=dict(os.environ, PROVISION_STATE_DIR=str(work / "state")),
        )
        report = json.loads((work / "report" / "report.json").read_text(encoding="utf-8"))
        yield Run(fleet, work, proc, report)
    finally:
        fleet.destroy()


def test_the_run_with_secrets_converges(run: Run) -> None:
    out = run.proc.stdout + run.proc.stderr
    assert run.proc.returncode == 0, out[-6000:]
    host = run.report["hosts"][run.host]
    assert host["status"] == "changed", host["status"]
    assert not [c for c in host["checks"] if c["status"] in ("fail", "drift")]


def test_files_the_roles_create_are_root_owned_and_not_world_writable(run: Run) -> None:
    listing = run.sh(
        "for p in " + " ".join(ROLE_FILES) + "; do [ -e \"$p\" ] || [ -L \"$p\" ] || continue; "
        "find \"$p\" -xdev -printf '%p\\t%U\\t%G\\t%m\\t%y\\n'; done"
    )
    entries = [ln.split("\t") for ln in listing.splitlines() if ln]
    assert entries, listing
    bad = [e for e in entries if e[1] != "0" or e[2] != "0"
           or (e[4] != "l" and int(e[3], 8) & 0o002)]
    assert not bad, bad[:20]  # owner and group root; nothing world-writable (links aside)
    import fnmatch  # noqa: PLC0415

    for pattern, mode in ROLE_FILES.items():
        tops = [e for e in entries if fnmatch.fnmatchcase(e[0], pattern)]
        assert tops, f"nothing the roles create matches {pattern}"
        if mode is not None:
            assert {e[3] for e in tops} == {mode}, (pattern, tops)
    venv = [e for e in entries if e[0].startswith("/opt/pytorch/")]
    assert any(e[0].endswith("/bin/python") for e in venv), "no venv walked"


def _written(root: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_no_planted_secret_in_anything_the_run_wrote(run: Run) -> None:
    written = {**_written(run.work / "state"), **_written(run.work / "report")}
    assert any(p.name == "report.json" for p in written)
    assert any(p.name == "command" and "/runs/" in str(p) for p in written)  # the artifacts
    assert any("job_events" in str(p) for p in written)
    out = run.proc.stdout + run.proc.stderr
    # the planted values really reached the run (the inventory variable and the -e values are
    # passed to Ansible; the become password answered the prompt)
    assert "BECOME password" in run.proc.stderr
    for where, secret in SECRETS.items():
        assert secret not in out, where
        leaks = [str(p) for p, text in written.items() if secret in text]
        assert not leaks, (where, leaks)
    pattern = " ".join(f"-e {s}" for s in SECRETS.values())
    found = run.fleet.run(run.host, f"grep -rlsaF {pattern} {' '.join(HOST_PLACES)}",
                          timeout=300)
    assert found.rc != 0 and found.stdout.strip() == "", found.stdout[-3000:]  # no file listed
