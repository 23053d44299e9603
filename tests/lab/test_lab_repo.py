"""The fake NVIDIA repo through real apt on lab hosts: signatures, pins, holds, traps."""

from __future__ import annotations

import re

import pytest

APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0"
D535_OLD, D535_NEW = "535.129.03", "535.154.05"


def sh(fleet, host, command, timeout=300):
    res = fleet.run(host, command, timeout=timeout)
    return res.rc, res.stdout + res.stderr


def ok(fleet, host, command, timeout=300):
    rc, out = sh(fleet, host, command, timeout)
    assert rc == 0, f"{command}\n{out[-3000:]}"
    return out


def enable_repo(fleet, host, repo):
    ok(
        fleet,
        host,
        'cd /tmp && python3 -c "import urllib.request as u; '
        f"u.urlretrieve('{repo.keyring_url}', 'cuda-keyring_1.1-1_all.deb')\" && "
        f"{APT} install ./cuda-keyring_1.1-1_all.deb && {APT} update",
    )


def driver_pins(version, branch="535"):
    pkg = f"{version}-0ubuntu1"
    return (
        f"cuda-drivers-{branch}={version}-1 nvidia-driver-{branch}={pkg} "
        f"nvidia-utils-{branch}={pkg} "
        f"libnvidia-compute-{branch}={pkg} nvidia-dkms-{branch}={pkg}"
    )


def smi(fleet, host, args=""):
    return sh(fleet, host, f"nvidia-smi {args}")


def test_repo_installs_through_apt_with_signature_checking(lab, fleet_factory):
    fleet = fleet_factory(1)
    repo = lab.repo
    enable_repo(fleet, "gpu01", repo)
    listing = ok(
        fleet,
        "gpu01",
        "cat /etc/apt/sources.list.d/cuda-debian12-x86_64.list; "
        "ls -l /usr/share/keyrings/cuda-archive-keyring.gpg; dpkg-query -W cuda-keyring",
    )
    assert (
        f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repo.repos_url}"
        "/debian12/x86_64/ /"
    ) in listing
    assert "cuda-keyring\t1.1-1" in listing
    # the unpinned candidate is the +cuda12.4 build: a missing pin is visible
    policy = ok(fleet, "gpu01", "apt-cache policy libnccl2")
    assert "Candidate: 2.18.3-1+cuda12.4" in policy
    out = ok(
        fleet,
        "gpu01",
        f"{APT} install libnccl2=2.18.3-1+cuda12.1 libnccl-dev=2.18.3-1+cuda12.1 && "
        "dpkg-query -W -f='${Version}' libnccl2; echo; ldconfig -p; grep NCCL_ /usr/include/nccl.h",
    )
    assert "\n2.18.3-1+cuda12.1\n" in out
    assert re.search(r"libnccl\.so\.2 \(libc6,x86-64\) => \S+/libnccl\.so\.2", out)
    assert "#define NCCL_PATCH 3" in out
    # the library is a real ELF object with the right soname
    elf = ok(
        fleet,
        "gpu01",
        "python3 -c \"import ctypes; l=ctypes.CDLL('libnccl.so.2'); "
        'f=l.ncclGetVersion_fake; f.restype=ctypes.c_char_p; print(f().decode())"',
    )
    assert elf.strip() == "2.18.3-1+cuda12.1"
    # no other apt source exists on the host (hermetic)
    assert ok(fleet, "gpu01", "cat /etc/apt/sources.list; ls /etc/apt/sources.list.d/").split() == [
        "cuda-debian12-x86_64.list"
    ]


def test_repo_signed_with_another_key_is_refused(lab, fleet_factory):
    fleet = fleet_factory(1)
    enable_repo(fleet, "gpu01", lab.repo)
    foreign = lab.build_foreign_repo("foreign-key")
    ok(
        fleet,
        "gpu01",
        "rm /etc/apt/sources.list.d/cuda-debian12-x86_64.list && echo "
        "'deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        f"{foreign.repos_url}/debian12/x86_64/ /'"
        " > /etc/apt/sources.list.d/foreign.list && rm -rf /var/lib/apt/lists/*127.0.0.1*",
    )
    rc, out = sh(fleet, "gpu01", f"{APT} update")
    assert rc != 0
    assert "NO_PUBKEY" in out and "is not signed" in out
    rc, out = sh(fleet, "gpu01", f"{APT} install libnccl2")
    assert rc == 100 and "Unable to locate package libnccl2" in out


def test_driver_pin_upgrade_mismatch_reboot_and_services(lab, fleet_factory):
    fleet = fleet_factory(2, ["h100-sxm-8", "rtx4090-4"])
    for host in ("gpu01", "gpu02"):
        enable_repo(fleet, host, lab.repo)
        assert smi(fleet, host)[0] == 127  # nothing installed yet
        # an exact pin of the meta package alone is refused (the driver set must be pinned)
        rc, out = sh(fleet, host, f"{APT} install cuda-drivers-535={D535_OLD}-1")
        assert rc == 100 and f"nvidia-driver-535 (= {D535_OLD}-0ubuntu1)" in out
        ok(
            fleet,
            host,
            f"{APT} install {driver_pins(D535_OLD)} nvidia-persistenced={D535_OLD}-1 "
            f"nvidia-fabricmanager-535={D535_OLD}-1",
        )
        rc, out = smi(fleet, host)
        assert rc == 0 and f"Driver Version: {D535_OLD}" in out
        assert ok(fleet, host, "cat /run/fake-nvidia/loaded").split() == [D535_OLD, "proprietary"]
        assert "simulated nvidia.ko" in ok(
            fleet, host, "cat /lib/modules/$(uname -r)/updates/dkms/nvidia.ko"
        )
        ok(fleet, host, "systemctl enable --now nvidia-persistenced")
        rc, out = smi(fleet, host, "--query-gpu=persistence_mode --format=csv,noheader")
        assert set(out.split()) == {"Enabled"}

    # Fabric Manager: runs on the NVSwitch box, refuses on the PCIe box (like the real one)
    ok(fleet, "gpu01", "systemctl enable --now nvidia-fabricmanager")
    assert "State                             : Completed" in smi(fleet, "gpu01", "-q")[1]
    rc, out = sh(fleet, "gpu02", "systemctl enable --now nvidia-fabricmanager")
    assert rc != 0
    assert "NV_WARN_NOTHING_TO_DO" in ok(
        fleet, "gpu02", "journalctl -u nvidia-fabricmanager --no-pager"
    )

    # userspace upgraded under the loaded module: NVML mismatch until the reboot
    ok(
        fleet,
        "gpu01",
        f"{APT} install {driver_pins(D535_NEW)} nvidia-fabricmanager-535={D535_NEW}-1",
    )
    rc, out = smi(fleet, "gpu01")
    assert rc == 18 and "Driver/library version mismatch" in out
    fleet.reboot("gpu01")
    rc, out = smi(fleet, "gpu01")
    assert rc == 0 and f"Driver Version: {D535_NEW}" in out
    assert ok(
        fleet, "gpu01", "systemctl is-active nvidia-persistenced nvidia-fabricmanager"
    ).split() == ["active", "active"]


def test_holds_block_branch_switch_and_switch_replaces(lab, fleet_factory):
    fleet = fleet_factory(1, ["t4-1"])
    enable_repo(fleet, "gpu01", lab.repo)
    ok(fleet, "gpu01", f"{APT} install {driver_pins(D535_OLD)}")
    held = (
        "cuda-drivers-535 nvidia-driver-535 nvidia-utils-535 libnvidia-compute-535 nvidia-dkms-535"
    )
    ok(fleet, "gpu01", f"apt-mark hold {held}")
    # switching branches means removing the old set (apt cannot resolve the conflicts alone) ...
    switch = f"{APT} install cuda-drivers-550 " + " ".join(p + "-" for p in held.split())
    rc, out = sh(fleet, "gpu01", switch)
    # ... and holds block it
    assert rc == 100 and "Held packages were changed" in out
    assert f"Driver Version: {D535_OLD}" in smi(fleet, "gpu01")[1]
    ok(fleet, "gpu01", f"apt-mark unhold {held} && {switch}")
    installed = ok(
        fleet, "gpu01", "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' 'nvidia-*'"
    )
    assert "nvidia-driver-550 ii" in installed
    assert not re.search(r"nvidia-\S+-535 ii", installed)
    assert smi(fleet, "gpu01")[0] == 18  # 535 still loaded until the reboot
    fleet.reboot("gpu01")
    rc, out = smi(fleet, "gpu01")
    assert rc == 0 and re.search(r"Driver Version: 550\.54\.15 +CUDA Version: 12\.4 ", out)
    # the open flavor replaces the DKMS module package of the same branch
    ok(fleet, "gpu01", f"{APT} install nvidia-kernel-open-550")
    out = ok(fleet, "gpu01", "dpkg-query -W -f='${db:Status-Abbrev}' nvidia-dkms-550 || true")
    assert not out.startswith("ii")


def test_toolkits_side_by_side_libraries_and_traps(lab, fleet_factory):
    fleet = fleet_factory(1, ["nogpu"])
    enable_repo(fleet, "gpu01", lab.repo)
    ok(fleet, "gpu01", f"{APT} install cuda-toolkit-12-1")
    out = ok(
        fleet,
        "gpu01",
        "/usr/local/cuda/bin/nvcc --version; readlink -f /usr/local/cuda; "
        "cat /usr/local/cuda-12.1/version.json; ls /usr/local/cuda-12.1/lib64/",
    )
    assert "Cuda compilation tools, release 12.1, V12.1.105" in out
    assert "Build cuda_12.1.r12.1/compiler.32688072_0" in out
    assert "/usr/local/cuda-12.1\n" in out and '"version": "12.1.1"' in out
    assert "libcudart.so.12.1.105" in out
    assert smi(fleet, "gpu01")[0] == 127  # the toolkit does not pull the driver
    ok(fleet, "gpu01", f"{APT} install cuda-toolkit-12-4")
    assert "release 12.4, V12.4.131" in ok(fleet, "gpu01", "/usr/local/cuda/bin/nvcc --version")
    ok(fleet, "gpu01", "update-alternatives --set cuda /usr/local/cuda-12.1")
    assert "release 12.1" in ok(fleet, "gpu01", "/usr/local/cuda/bin/nvcc --version")
    assert "libcudart.so.12 (libc6,x86-64) => /usr/local/cuda/targets/x86_64-linux/lib/" in ok(
        fleet, "gpu01", "ldconfig -p"
    )
    # the traps: cuda-12-1 pulls the newest driver branch, cuda the newest toolkit
    plan = ok(fleet, "gpu01", f"{APT} install -s cuda-12-1")
    assert "Inst cuda-drivers-550 " in plan and "Inst nvidia-driver-550 " in plan
    plan = ok(fleet, "gpu01", f"{APT} install -s cuda")
    assert "Inst cuda-12-4 " in plan
    # cuDNN: the unpinned candidate is the +cuda12.4 build; pins and downgrades work
    assert "Candidate: 8.9.2.26-1+cuda12.4" in ok(fleet, "gpu01", "apt-cache policy libcudnn8")
    ok(
        fleet,
        "gpu01",
        f"{APT} install libcudnn8=8.9.2.26-1+cuda12.1 libcudnn8-dev=8.9.2.26-1+cuda12.1",
    )
    header = ok(
        fleet,
        "gpu01",
        "grep -E 'define CUDNN_(MAJOR|MINOR|PATCHLEVEL)' /usr/include/cudnn_version.h",
    )
    assert header.split()[2::3] == ["8", "9", "2"]
    ok(
        fleet,
        "gpu01",
        f"{APT} install --allow-downgrades libcudnn8=8.9.0.131-1+cuda12.1 "
        "libcudnn8-dev=8.9.0.131-1+cuda12.1",
    )
    assert "libcudnn.so.8 (libc6,x86-64)" in ok(fleet, "gpu01", "ldconfig -p")


@pytest.mark.parametrize("host_profile", ["t4-1"])
def test_real_pip_install_from_the_loopback_wheelhouse(lab, fleet_factory, host_profile):
    fleet = fleet_factory(1, [host_profile])
    res = fleet.run(
        "gpu01",
        "python3 -m venv /opt/fresh && /opt/fresh/bin/pip install -q --disable-pip-version-check "
        f"--no-index --find-links {lab.wheels_url} torch==2.13.0 && "
        "/opt/fresh/bin/python -c 'import torch, torch.distributed as d; "
        "print(torch.__version__, d.is_gloo_available())'",
        timeout=600,
    )
    assert res.rc == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["2.13.0+cpu", "True"]
