"""Helpers for the roles' lab tests: run a playbook against a lab fleet with ansible-playbook."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
BIN = Path(sys.executable).parent


def stack_vars(stack_path: Path, **overrides: Any) -> dict[str, Any]:
    """Map the lab's stack YAML onto the role variables (docs/architecture.md)."""
    st = yaml.safe_load(stack_path.read_text(encoding="utf-8"))
    cuda = str(st["cuda"]["version"])
    out: dict[str, Any] = {
        "nvidia_repo_base_url": st["mirrors"]["nvidia_repo"],
        "nvidia_driver_branch": str(st["driver"]["branch"]),
        "nvidia_driver_version": st["driver"].get("version") or "",
        "nvidia_driver_flavor": st["driver"].get("flavor", "proprietary"),
        "nvidia_driver_fabricmanager": st["driver"].get("fabricmanager", "auto"),
        "nvidia_driver_manage_kernel_modules": False,
        "cuda_toolkit_version": cuda,
        "cuda_env_cuda_version": cuda,
        "cudnn_cuda_version": cuda,
        "nccl_cuda_version": cuda,
        "cudnn_version": str(st["cudnn"]["version"]),
        "nccl_version": str(st["nccl"]["version"]),
        "pytorch_version": str(st["pytorch"]["version"]),
        "pytorch_build": st["pytorch"]["build"],
        "pytorch_venv": st["pytorch"]["venv"],
        "pytorch_index_url": st["mirrors"].get("pytorch_index") or "",
        "pytorch_find_links": st["mirrors"].get("pytorch_find_links") or "",
        "preflight_min_free_gib": 1,
        "validation_enabled": False,
    }
    out.update(overrides)
    return out


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


def run_playbook(fleet: Any, playbook: str, extravars: dict[str, Any], *, check: bool = False,
                 tmp: Path, limit: str | None = None) -> PlayResult:
    """Run playbooks/<playbook> via ansible-runner; collect stats and *_checks facts."""
    import ansible_runner  # noqa: PLC0415 - heavy import, only for lab tests

    os.environ["PATH"] = f"{BIN}:{os.environ.get('PATH', '')}"
    cmdline = "--check" if check else ""
    if limit:
        cmdline += f" --limit {limit}"
    (tmp / "runner").mkdir(parents=True, exist_ok=True)
    r = ansible_runner.run(
        private_data_dir=str(tmp / "runner"),
        playbook=str(PLAYBOOKS / playbook),
        inventory=str(fleet.inventory_path),
        extravars=extravars,
        cmdline=cmdline.strip() or None,
        envvars={
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_LIBRARY": str(PLAYBOOKS / "library"),
            "ANSIBLE_FORKS": "8",
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_NOCOLOR": "1",
        },
        quiet=True,
        suppress_env_files=True,
    )
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
