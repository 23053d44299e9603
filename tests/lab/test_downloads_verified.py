"""Lab: every download is verified (issue 14).

A mirror whose cuda-keyring is not the expected key (the lab's NVIDIA repositories rebuilt
and signed with another key, with their own consistent cuda-keyring, as a hostile or misconfigured
mirror would serve them) passes apt's own signature check, and is stopped by repo.key before any
package comes from it. A torch wheel whose sha256 is not the one the stack lists
(mirrors.pytorch_hashes, required with a find-links mirror) is refused by pip --require-hashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from test_roles_helpers import run_playbook, stack_vars


def test_a_mirror_with_another_key_is_stopped_before_any_package(
    lab: Any, fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    host = fleet.hosts[0].name
    foreign = lab.build_foreign_repo("foreign-mirror")
    assert set(foreign.key_fingerprints).isdisjoint(fleet.repo_key_fingerprints)
    ev = stack_vars(fleet.stack_path, gpu_stack_mirrors_nvidia_repo=foreign.repos_url)
    res = run_playbook(
        fleet, "site.yml", ev, tmp=tmp_path, tags="preflight,nvidia_repo,nvidia_driver"
    )
    assert res.rc != 0, res.output[-4000:]
    check = res.checks(host)["repo.key"]
    assert check["status"] == "fail", check
    assert foreign.key_fingerprints[0] in check["actual"], check
    assert "gpu_stack_repo_key_fingerprints" in check["remediation"]
    # apt itself trusted the mirror (its keyring signs its index) ...
    lists = fleet.run(host, "ls /var/lib/apt/lists/ | grep -c foreign-mirror || true")
    assert int(lists.stdout.strip() or 0) > 0, lists.stdout
    # ... and nothing but the keyring came from it
    pkgs = fleet.run(
        host,
        "dpkg-query -W -f='${Package}\\n' | grep -E '^(nvidia|cuda-drivers|libnvidia)' || true",
    )
    assert pkgs.stdout.strip() == "", pkgs.stdout
    # a later read-only check against the lab's own mirror still flags the foreign keyring
    good = run_playbook(
        fleet, "check.yml", stack_vars(fleet.stack_path), check=True, tmp=tmp_path / "check"
    )
    assert good.checks(host)["repo.key"]["status"] == "fail"  # still the foreign keyring


def test_a_wheel_whose_sha256_differs_from_the_stacks_is_refused(
    fleet_factory: Any, tmp_path: Path
) -> None:
    fleet = fleet_factory(1, profiles=("h100-sxm-8",))
    host = fleet.hosts[0].name
    # the lab's base image carries torch already (baked to save time): take it away, so the
    # role has to install it from the mirror
    fleet.run(host, "rm -rf /opt/pytorch")
    lab_stack = yaml.safe_load(fleet.stack_path.read_text(encoding="utf-8"))
    pins = list(lab_stack["mirrors"]["pytorch_hashes"])
    assert any(p.startswith("torch==") for p in pins), pins
    # the lab's stack lists the wheelhouse's real hashes; swap torch's for another
    wrong = "--hash=sha256:" + "0" * 64
    tampered = [p.split(" ", 1)[0] + " " + wrong if p.startswith("torch==") else p for p in pins]
    ev = stack_vars(fleet.stack_path, gpu_stack_mirrors_pytorch_hashes=tampered)
    res = run_playbook(fleet, "site.yml", ev, tmp=tmp_path, tags="pytorch")
    assert res.rc != 0, res.output[-4000:]
    failed = {i: c for i, c in res.checks(host).items() if c["status"] == "fail"}
    assert "pytorch.task" in failed, failed
    assert "DO NOT MATCH THE HASHES" in failed["pytorch.task"]["message"], failed["pytorch.task"]
    probe = fleet.run(host, "/opt/pytorch/bin/python -c 'import torch' 2>&1; echo rc=$?")
    assert "rc=0" not in probe.stdout, probe.stdout  # no torch installed
    # the pinned file pip read is on the host, with the stack's lines
    listed = fleet.run(host, "cat /opt/pytorch/provision-requirements.txt").stdout
    assert wrong in listed
    # the real hashes install it
    good = run_playbook(
        fleet, "site.yml", stack_vars(fleet.stack_path), tmp=tmp_path / "good", tags="pytorch"
    )
    assert good.rc == 0, good.output[-4000:]
    assert good.checks(host)["pytorch.hashes"]["status"] == "pass"
    assert good.checks(host)["pytorch.version"]["status"] == "pass"
