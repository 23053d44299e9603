"""Per-OS resolution for every supported distro x architecture, resolved by Ansible itself.

Each file in fixtures/os_facts/ holds the `setup` facts the roles read for one distro and
architecture. fixtures/os_facts/resolve.playbook.yml installs them as a host's facts (connection
local, no root) and runs each role's own tasks/os_vars.yml (the first_found selection main.yml
imports), then writes the resolved repository URL, package names and module streams as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FACTS = REPO / "tests" / "unit" / "fixtures" / "os_facts"
PLAYBOOK = FACTS / "resolve.playbook.yml"
HOSTS = sorted(p.stem for p in FACTS.glob("*-*.yml") if not p.name.endswith(".playbook.yml"))
BIN = Path(sys.executable).parent

# distro directory in NVIDIA's repository, family
DISTROS = {
    "ubuntu2004": ("ubuntu2004", "debian"),
    "ubuntu2204": ("ubuntu2204", "debian"),
    "ubuntu2404": ("ubuntu2404", "debian"),
    "debian11": ("debian11", "debian"),
    "debian12": ("debian12", "debian"),
    "rhel8": ("rhel8", "redhat"),
    "rhel9": ("rhel9", "redhat"),
    "rocky8": ("rhel8", "redhat"),
    "rocky9": ("rhel9", "redhat"),
    "alma8": ("rhel8", "redhat"),
    "alma9": ("rhel9", "redhat"),
}
ARCH_DIR = {"x86_64": "x86_64", "aarch64": "sbsa"}
BASE = "https://developer.download.nvidia.com/compute/cuda/repos"


OTHER = {  # a second stack, as host variables of alias hosts (one ansible-playbook run for all)
    "nvidia_driver_branch": "550",
    "nvidia_driver_flavor": "open",
    "cuda_toolkit_version": "12.4",
    "cudnn_major": 9,
    "cudnn_version": "9.1.0.70",
    "cudnn_cuda_version": "12.4",
    "nccl_cuda_version": "12.4",
    "nvidia_repo_base_url": "http://mirror.example/cuda/repos/",
}
OTHER_HOSTS = ["ubuntu2204-aarch64", "debian12-x86_64", "rhel9-aarch64", "rocky8-x86_64"]


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("os-resolve")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts: dict[str, dict[str, Any]] = {h: {**local, "os_facts_file": h} for h in HOSTS}
    hosts.update({f"{h}-other": {**local, **OTHER, "os_facts_file": h} for h in OTHER_HOSTS})
    inv = tmp / "inventory.json"
    inv.write_text(json.dumps({"all": {"hosts": hosts}}))
    out = tmp / "out"
    out.mkdir()
    env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "playbooks" / "collections"),
        ANSIBLE_FORKS="8",
        ANSIBLE_LOCAL_TEMP=str(tmp / "local"),
        ANSIBLE_REMOTE_TEMP=str(tmp / "remote"),
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
    )
    ev = {"os_facts_dir": str(FACTS), "os_out_dir": str(out)}
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inv), str(PLAYBOOK), "-e", json.dumps(ev)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return {h: json.loads((out / f"{h}.json").read_text()) for h in hosts}


def test_every_supported_distro_and_arch_is_recorded() -> None:
    assert sorted(HOSTS) == sorted(f"{d}-{a}" for d in DISTROS for a in ARCH_DIR)


@pytest.mark.parametrize("host", HOSTS)
def test_default_stack_resolution(resolved: dict[str, dict[str, Any]], host: str) -> None:
    distro, arch = host.split("-")
    repo_dir, family = DISTROS[distro]
    r = resolved[host]
    assert r["supported"], r  # the recorded release is in preflight's supported list
    assert r["arch_dir"] == ARCH_DIR[arch]
    assert r["repo_url"] == f"{BASE}/{repo_dir}/{ARCH_DIR[arch]}"
    assert r["toolkit"] == "cuda-toolkit-12-1"
    if family == "debian":
        assert r["repo_file"] == f"/etc/apt/sources.list.d/cuda-{repo_dir}-{ARCH_DIR[arch]}.list"
        assert r["keyring"] == "cuda-keyring_1.1-1_all.deb"
        assert r["driver_install"] == ["cuda-drivers-535"]
        assert "nvidia-dkms-535" in r["driver_pinned"]
        assert (
            r["driver_kernel_pkgs"][0].startswith("linux-headers-")
            and "dkms" in r["driver_kernel_pkgs"]
        )
        assert r["headers"].startswith("linux-headers-")
        assert r["fabricmanager"] == "nvidia-fabricmanager-535"
        assert r["initramfs"] == ["update-initramfs", "-u"]
        assert r["cudnn"] == ["libcudnn8 8.9.2.26-1+cuda12.1", "libcudnn8-dev 8.9.2.26-1+cuda12.1"]
        assert r["nccl"] == ["libnccl2 2.18.3-1+cuda12.1", "libnccl-dev 2.18.3-1+cuda12.1"]
    else:
        assert r["repo_id"] == f"cuda-{repo_dir}-{ARCH_DIR[arch]}"
        assert r["gpgkey"] == "D42D0685.pub"
        major = distro[-1]
        assert r["epel_url"].endswith(f"/epel-release-latest-{major}.noarch.rpm"), r["epel_url"]
        if distro.startswith("rhel"):
            crb = f"codeready-builder-for-rhel-{major}-{arch}-rpms"
            assert r["crb_cmd"] == ["subscription-manager", "repos", "--enable", crb]
        else:
            crb = "powertools" if major == "8" else "crb"
            assert r["crb_cmd"] == ["dnf", "config-manager", "--set-enabled", crb]
        assert r["driver_install"] == ["@nvidia-driver:535-dkms"]
        assert r["driver_stream"] == "535-dkms"
        assert r["headers"].startswith("kernel-devel-")
        kernel_pkgs = ["kernel-devel-matched"] if distro.endswith("9") else [r["headers"]]
        assert r["driver_kernel_pkgs"] == [*kernel_pkgs, "kernel-headers", "dkms"]
        assert r["fabricmanager"] == "nvidia-fabric-manager"
        assert r["initramfs"] == ["dracut", "--force"]
        assert r["cudnn"] == [
            "libcudnn8 8.9.2.26-1.cuda12.1",
            "libcudnn8-devel 8.9.2.26-1.cuda12.1",
        ]
        assert r["nccl"] == ["libnccl 2.18.3-1+cuda12.1", "libnccl-devel 2.18.3-1+cuda12.1"]


@pytest.mark.parametrize("host", OTHER_HOSTS)
def test_stack_variables_compose_per_os(resolved: dict[str, dict[str, Any]], host: str) -> None:
    distro, arch = host.split("-")
    repo_dir, family = DISTROS[distro]
    r = resolved[f"{host}-other"]
    assert r["repo_url"] == f"http://mirror.example/cuda/repos/{repo_dir}/{ARCH_DIR[arch]}"
    assert r["toolkit"] == "cuda-toolkit-12-4"
    if family == "debian":
        assert r["driver_install"] == ["cuda-drivers-550", "nvidia-kernel-open-550"]
        assert (
            "nvidia-kernel-open-550" in r["driver_pinned"]
            and "nvidia-dkms-550" not in r["driver_pinned"]
        )
        assert r["cudnn"] == [
            f"{p} 9.1.0.70-1"
            for p in ("cudnn9-cuda-12", "libcudnn9-cuda-12", "libcudnn9-dev-cuda-12")
        ]
        assert r["nccl"][0] == "libnccl2 2.18.3-1+cuda12.4"
    else:
        assert r["driver_install"] == ["@nvidia-driver:550-open"]
        assert r["cudnn"][0] == "cudnn9-cuda-12 9.1.0.70-1"
