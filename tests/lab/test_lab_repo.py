"""The repository models through real apt on ubuntu2204 lab hosts: the shapes the roles must cope
with.

Each test names the model facts it rests on (lab/repos/*.yml); lab/README.md lists the unconfirmed
ones.
"""

from __future__ import annotations

import re
import urllib.request

from lab_shell import APT, enable_repo, ok, sh

D535_OLD, D535_NEW = "535.129.03", "535.154.05"
U = "0ubuntu1"


def headers(fleet, host):
    ok(fleet, host, f"{APT} install linux-headers-$(uname -r)")


def exact_deps(fleet, host, package, version):
    """Every (= version) dependency of package=version, read from the repository's own metadata."""
    out = ok(fleet, host, f"apt-cache show {package}={version} | grep '^Depends:'")
    return sorted(set(re.findall(r"([a-z0-9][a-z0-9.+-]+) \(= ([^)]+)\)", out)))


def wait_active(fleet, host, unit, timeout=20):
    """`systemctl is-active` once the unit's start job is done (udev-started units start async)."""
    return ok(
        fleet,
        host,
        f"for i in $(seq {timeout * 5}); do s=$(systemctl is-active {unit}); "
        f'[ "$s" = activating ] || break; sleep 0.2; done; echo $s',
    ).strip()


def smi(fleet, host, args=""):
    return sh(fleet, host, f"nvidia-smi {args}")


def test_repositories_served_at_their_real_paths_and_signed(lab, fleet_factory):
    fleet = fleet_factory(1)
    repo = lab.repo
    for distro in ("ubuntu2204", "debian11", "debian12"):
        with urllib.request.urlopen(f"{repo.repos_url}/{distro}/x86_64/InRelease") as resp:
            text = resp.read().decode()
        assert "Origin: NVIDIA" in text and "Label: NVIDIA CUDA" in text
    for suite in ("ubuntu/dists/jammy", "debian/dists/bullseye", "debian/dists/bookworm"):
        with urllib.request.urlopen(f"{repo.base_url}/{suite}/InRelease") as resp:
            assert "BEGIN PGP SIGNED MESSAGE" in resp.read().decode()
    # a fresh host: only the distribution archive, as on a cloud image
    assert ok(fleet, "gpu01", "cat /etc/apt/sources.list").strip() == (
        f"deb {repo.base_url}/ubuntu jammy main restricted universe multiverse"
    )
    enable_repo(fleet, "gpu01")
    listing = ok(
        fleet,
        "gpu01",
        "cat /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list; dpkg-query -W cuda-keyring",
    )
    assert (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        f"{repo.repos_url}/ubuntu2204/x86_64/ /"
    ) in listing
    assert "cuda-keyring\t1.1-1" in listing
    policy = ok(fleet, "gpu01", "apt-cache policy")
    assert "release o=NVIDIA,l=NVIDIA CUDA,c=" in policy
    assert "release v=22.04,o=Ubuntu,a=jammy,n=jammy,l=Ubuntu,c=restricted" in policy

    # the same repository signed with another key is refused
    foreign = lab.build_foreign_repo("foreign-key")
    ok(
        fleet,
        "gpu01",
        "rm /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list && echo "
        "'deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        f"{foreign.repos_url}/ubuntu2204/x86_64/ /'"
        " > /etc/apt/sources.list.d/foreign.list && rm -rf /var/lib/apt/lists/*foreign*",
    )
    rc, out = sh(fleet, "gpu01", f"{APT} update")
    assert rc != 0
    assert "NO_PUBKEY" in out and "is not signed" in out


def test_ubuntu_exact_version_dependencies_and_the_meta_that_does_not_pin(lab, fleet_factory):
    """ubuntu2204: nvidia-driver-535 (= ...) on a dozen components (canonical control, C);
    cuda-drivers-535 only (>= ...) (dstackai/dstack#2355, P)."""
    fleet = fleet_factory(1, ["t4-1"])
    enable_repo(fleet, "gpu01")
    # the older driver alone: the real "Depends: ... (= old) but new is to be installed" failure
    rc, out = sh(fleet, "gpu01", f"{APT} install nvidia-driver-535={D535_OLD}-{U}")
    assert rc == 100, out
    assert (
        f"Depends: libnvidia-gl-535 (= {D535_OLD}-{U}) but {D535_NEW}-{U} is to be installed" in out
    )
    assert "you have held broken packages" in out
    # pinning the meta package does NOT pin the driver: it brings the newest 535
    out = ok(fleet, "gpu01", f"{APT} install -s cuda-drivers-535={D535_OLD}-1")
    assert f"Inst cuda-drivers-535 ({D535_OLD}-1 " in out
    assert f"Inst nvidia-driver-535 ({D535_NEW}-{U} " in out
    # the exact dependencies, read from the repository's metadata: about a dozen
    deps = exact_deps(fleet, "gpu01", "nvidia-driver-535", f"{D535_OLD}-{U}")
    names = [d for d, _ in deps]
    assert len(names) >= 11 and "nvidia-compute-utils-535" in names, names
    assert {v for _, v in deps} == {f"{D535_OLD}-{U}"}
    # the range-shaped ones (dkms, kernel-common) and the firmware named by version follow
    pins = " ".join(f"{d}={v}" for d, v in deps)
    extra = (
        f"nvidia-dkms-535={D535_OLD}-{U} nvidia-kernel-common-535={D535_OLD}-{U} "
        f"nvidia-driver-535={D535_OLD}-{U} cuda-drivers-535={D535_OLD}-1"
    )
    headers(fleet, "gpu01")
    ok(fleet, "gpu01", f"{APT} install {pins} {extra}")
    out = ok(fleet, "gpu01", "dpkg-query -W -f='${Package} ${Version}\\n' '*nvidia*535*'")
    assert f"nvidia-driver-535 {D535_OLD}-{U}" in out
    assert f"nvidia-firmware-535-{D535_OLD} {D535_OLD}-{U}" in out  # a package name per version
    assert f"Driver Version: {D535_OLD}" in smi(fleet, "gpu01")[1]


def test_apt_preferences_pin_on_the_version_installs_an_older_driver(lab, fleet_factory):
    fleet = fleet_factory(1, ["t4-1"])
    enable_repo(fleet, "gpu01")
    ok(
        fleet,
        "gpu01",
        "printf 'Package: *nvidia*535* cuda-drivers-535\\nPin: version "
        f"{D535_OLD}-*\\nPin-Priority: 1000\\n' > /etc/apt/preferences.d/nvidia-535",
    )
    out = ok(fleet, "gpu01", f"{APT} install -s cuda-drivers-535")
    assert f"Inst nvidia-driver-535 ({D535_OLD}-{U} " in out
    assert D535_NEW not in out


def test_ubuntu_persistenced_is_a_virtual_name_a_static_unit_and_runs_without_persistence(
    lab, fleet_factory
):
    """nvidia-compute-utils-535 Provides+Conflicts nvidia-persistenced and ships the static unit
    (canonical control, C); the real 580 nvidia-persistenced package (P)."""
    fleet = fleet_factory(1, ["h100-sxm-8"])
    enable_repo(fleet, "gpu01")
    headers(fleet, "gpu01")
    ok(fleet, "gpu01", f"{APT} install cuda-drivers-535")
    unit = ok(fleet, "gpu01", "systemctl cat nvidia-persistenced")
    assert "StopWhenUnneeded=true" in unit and "[Install]" not in unit
    assert (
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced "
        "--no-persistence-mode --verbose"
    ) in unit
    assert ok(fleet, "gpu01", "systemctl is-enabled nvidia-persistenced || true").strip() == (
        "static"
    )
    # udev started it when the driver bound (71-nvidia.rules); persistence mode stays off
    assert wait_active(fleet, "gpu01", "nvidia-persistenced") == "active"
    out = smi(fleet, "gpu01", "--query-gpu=persistence_mode --format=csv,noheader")[1]
    assert set(out.split()) == {"Disabled"}
    # `apt install nvidia-persistenced` would remove the driver for NVIDIA's unversioned package
    # (its newest build: 590.48.01 beside the 580 ones)
    out = ok(fleet, "gpu01", f"{APT} install -s nvidia-persistenced")
    for gone in ("cuda-drivers-535", "nvidia-driver-535", "nvidia-compute-utils-535"):
        assert re.search(rf"^Remv {gone} ", out, re.M), out
    assert re.search(r"^Inst nvidia-persistenced \(590\.48\.01-1ubuntu1 ", out, re.M), out
    # what NVIDIA's own role does: a drop-in without --no-persistence-mode
    ok(
        fleet,
        "gpu01",
        "mkdir -p /etc/systemd/system/nvidia-persistenced.service.d && printf '[Service]\\n"
        "ExecStart=\\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced "
        "--verbose\\n' > /etc/systemd/system/nvidia-persistenced.service.d/override.conf && "
        "systemctl daemon-reload && systemctl restart nvidia-persistenced",
    )
    out = smi(fleet, "gpu01", "--query-gpu=persistence_mode --format=csv,noheader")[1]
    assert set(out.split()) == {"Enabled"}
    # after a reboot the module loads and udev starts it again, with the drop-in
    fleet.reboot("gpu01")
    assert wait_active(fleet, "gpu01", "nvidia-persistenced") == "active"
    out = smi(fleet, "gpu01", "--query-gpu=persistence_mode --format=csv,noheader")[1]
    assert set(out.split()) == {"Enabled"}


def test_dkms_builds_only_for_kernels_with_headers(lab, fleet_factory):
    """dkms's common.postinst skips kernels without headers; headers' postinst runs the hook
    (dell/dkms, P); linux-headers-generic keeps the next kernel's headers (P)."""
    fleet = fleet_factory(1, ["t4-1"])
    enable_repo(fleet, "gpu01")
    out = ok(fleet, "gpu01", f"{APT} install nvidia-headless-535 nvidia-utils-535")
    assert re.search(
        r"Module build for kernel \S+ was skipped since the kernel headers for this kernel does "
        "not seem to be installed",
        out,
    )
    fleet.reboot("gpu01")
    rc, out = smi(fleet, "gpu01")
    assert rc == 9 and "couldn't communicate with the NVIDIA driver" in out
    # the running kernel's headers: the hook builds the registered module
    headers(fleet, "gpu01")
    assert "installed" in ok(fleet, "gpu01", "dkms status")
    fleet.reboot("gpu01")
    assert smi(fleet, "gpu01")[0] == 0
    # the flavour's meta package brings the next kernel's headers, and DKMS builds for it too
    ok(fleet, "gpu01", f"{APT} install linux-headers-generic")
    status = ok(fleet, "gpu01", "dkms status")
    assert f"nvidia, {D535_NEW}, 5.15.0-25-generic, x86_64: installed" in status


def test_branch_packages_conflict_through_virtual_names_and_holds_block_a_switch(
    lab, fleet_factory
):
    fleet = fleet_factory(1, ["t4-1"])
    enable_repo(fleet, "gpu01")
    headers(fleet, "gpu01")
    ok(fleet, "gpu01", f"{APT} install cuda-drivers-535")
    plan = ok(fleet, "gpu01", f"{APT} install -s cuda-drivers-550")
    assert re.search(r"^Remv nvidia-utils-535 ", plan, re.M)  # Provides/Conflicts nvidia-utils
    assert re.search(r"^Inst nvidia-driver-550 ", plan, re.M)
    ok(fleet, "gpu01", "apt-mark hold nvidia-utils-535 nvidia-driver-535")
    rc, out = sh(fleet, "gpu01", f"{APT} install cuda-drivers-550")
    assert rc == 100 and "held" in out.lower()
    assert f"Driver Version: {D535_NEW}" in smi(fleet, "gpu01")[1]
    ok(
        fleet,
        "gpu01",
        f"apt-mark unhold nvidia-utils-535 nvidia-driver-535 && {APT} install cuda-drivers-550",
    )
    assert smi(fleet, "gpu01")[0] == 18  # 535 still loaded: NVML mismatch until the reboot
    fleet.reboot("gpu01")
    rc, out = smi(fleet, "gpu01")
    assert rc == 0 and re.search(r"Driver Version: 550\.54\.15 +CUDA Version: 12\.4 ", out)


def test_canonical_server_flavour_loads_prebuilt_and_nvidia_branch_replaces_it(lab, fleet_factory):
    """Canonical's -server packages share the virtual names (canonical control @ 535-server, P)."""
    fleet = fleet_factory(1, ["h100-sxm-8"])
    ok(
        fleet,
        "gpu01",
        f"{APT} update && {APT} install nvidia-headless-no-dkms-535-server "
        "nvidia-utils-535-server linux-modules-nvidia-535-server-$(uname -r)",
    )
    rc, out = smi(fleet, "gpu01")
    assert rc == 0 and "Driver Version: 535.129.03" in out  # prebuilt module, no headers, no DKMS
    assert "535.129.03-0ubuntu0.22.04.1" in ok(
        fleet, "gpu01", "dpkg-query -W nvidia-utils-535-server"
    )
    enable_repo(fleet, "gpu01")
    plan = ok(fleet, "gpu01", f"{APT} install -s cuda-drivers-535")
    for gone in ("nvidia-utils-535-server", "nvidia-compute-utils-535-server"):
        assert re.search(rf"^Remv {gone} ", plan, re.M), plan


def test_toolkits_libraries_and_traps(lab, fleet_factory):
    fleet = fleet_factory(1, ["nogpu"])
    enable_repo(fleet, "gpu01")
    out = ok(fleet, "gpu01", f"{APT} install cuda-toolkit-12-1")
    assert "nvidia-driver" not in out  # the toolkit does not pull the driver
    out = ok(
        fleet,
        "gpu01",
        "/usr/local/cuda/bin/nvcc --version; readlink -f /usr/local/cuda; "
        "cat /usr/local/cuda-12.1/version.json; ls /usr/local/cuda-12.1/lib64/",
    )
    assert "Cuda compilation tools, release 12.1, V12.1.105" in out
    assert "/usr/local/cuda-12.1\n" in out and '"version": "12.1.1"' in out
    assert "libcudart.so.12.1.105" in out
    ok(fleet, "gpu01", f"{APT} install cuda-toolkit-12-4")
    assert "release 12.4, V12.4.131" in ok(fleet, "gpu01", "/usr/local/cuda/bin/nvcc --version")
    # cuda-12-1 pulls the runtime, which pulls the newest branch through the unversioned meta
    plan = ok(fleet, "gpu01", f"{APT} install -s cuda-12-1")
    assert "Inst cuda-drivers-580 " in plan and "Inst nvidia-driver-580 " in plan
    # ... and with it the newest release of the unversioned names (590's daemon beside 580)
    assert re.search(r"^Inst nvidia-persistenced \(590\.48\.01-1ubuntu1 ", plan, re.M), plan
    # unpinned candidates are builds for another CUDA
    assert "Candidate: 8.9.7.29-1+cuda12.2" in ok(fleet, "gpu01", "apt-cache policy libcudnn8")
    assert "Candidate: 2.21.5-1+cuda12.4" in ok(fleet, "gpu01", "apt-cache policy libnccl2")
    ok(
        fleet,
        "gpu01",
        f"{APT} install libcudnn8=8.9.2.26-1+cuda12.1 libcudnn8-dev=8.9.2.26-1+cuda12.1 "
        "libnccl2=2.18.3-1+cuda12.1 libnccl-dev=2.18.3-1+cuda12.1",
    )
    out = ok(fleet, "gpu01", "ldconfig -p; grep -E 'define (CUDNN|NCCL)_' /usr/include/*.h")
    assert "libcudnn.so.8 (libc6,x86-64)" in out and "libnccl.so.2 (libc6,x86-64)" in out
    assert "#define CUDNN_PATCHLEVEL 2" in out and "#define NCCL_PATCH 3" in out
