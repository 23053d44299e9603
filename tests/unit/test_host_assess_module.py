"""The probe module itself, run by Ansible on this machine (local connection, check mode: it only
reads): what it publishes as `provision_checks`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STACK = {
    "driver": {"branch": "535", "version": "", "flavor": "proprietary", "fabricmanager": "auto"}
}


def probe(**args: Any) -> dict[str, Any]:
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "playbooks" / "collections"),
        ANSIBLE_LOCALHOST_WARNING="false",
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-c",
            "local",
            "--check",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "provision.gpu.host_assess",
            "-a",
            json.dumps({"stack": STACK, **args}),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ad-hoc output: "localhost | SUCCESS => {...}"
    _, _, body = proc.stdout.partition(" => ")
    return dict(json.loads(body)["ansible_facts"])


def test_publish_limits_the_published_checks_and_keeps_the_plan() -> None:
    every = probe(components=["driver"])
    ids = {c["id"] for c in every["provision_checks"]}
    assert {"driver.branch", "driver.reboot", "driver.hold"} <= ids
    only = probe(components=["driver"], publish=["driver.reboot"])
    assert [c["id"] for c in only["provision_checks"]] == ["driver.reboot"]
    assert only["provision_plan"].keys() == every["provision_plan"].keys()
    assert "gpu_count" in only["nvidia_gpu"]
