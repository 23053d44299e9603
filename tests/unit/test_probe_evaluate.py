"""The probe's evaluator (plugins/module_utils/evaluate.py): checks and change plans per OS.

Each test names the real-repository fact it rests on. Hosts come from probe_fakes.FakeHost, built
from captured outputs where captures exist.
"""

from __future__ import annotations

import re
from typing import Any

import probe_fakes as pf
from ansible_collections.provision.gpu.plugins.module_utils import collect as c
from ansible_collections.provision.gpu.plugins.module_utils import parsers as p
from ansible_collections.provision.gpu.plugins.module_utils.evaluate import profile_script
from probe_fakes import FakeHost, judge, stack

ALL = ["preflight", "repo", "driver", "cuda", "cudnn", "nccl", "env", "pytorch"]
V_OLD, V_NEW = "535.129.03", "535.154.05"
UBUNTU_535 = {  # what cuda-drivers-535 brings on ubuntu2204 (canonical control.in, 535 branch)
    "cuda-drivers-535": f"{V_OLD}-1",
    "nvidia-driver-535": f"{V_OLD}-0ubuntu1",
    "nvidia-utils-535": f"{V_OLD}-0ubuntu1",
    "nvidia-compute-utils-535": f"{V_OLD}-0ubuntu1",
    "libnvidia-compute-535": f"{V_OLD}-0ubuntu1",
    "nvidia-dkms-535": f"{V_OLD}-0ubuntu1",
    "nvidia-kernel-common-535": f"{V_OLD}-0ubuntu1",
    f"nvidia-firmware-535-{V_OLD}": f"{V_OLD}-0ubuntu1",
}


def ubuntu_with_driver(held: bool = True, **units: str) -> FakeHost:
    h = FakeHost().gpus(V_OLD, nvswitch=False)
    h.dpkg(UBUNTU_535, held=tuple(UBUNTU_535) if held else ())
    h.units(
        {
            "LoadState": "loaded",
            "ActiveState": units.get("active", "active"),
            "UnitFileState": "static",
            "ExecStart": "{ path=/usr/bin/nvidia-persistenced ; "
            "argv[]=/usr/bin/nvidia-persistenced "
            "--user nvidia-persistenced --persistence-mode --verbose ; }",
            "FragmentPath": "/lib/systemd/system/nvidia-persistenced.service",
        },
        fragment=pf.conftest.capture("unit-file__nvidia-persistenced_ubuntu_535_server_jammy.txt"),
    )
    return h


# ------------------------------------------------------------------- 1. Ubuntu persistenced


def test_ubuntu_never_installs_nvidia_persistenced() -> None:
    """nvidia-compute-utils-535 Provides+Conflicts nvidia-persistenced; NVIDIA's ubuntu2204 repo
    also has a real 580 nvidia-persistenced whose install removes the 535 driver."""
    r = judge(FakeHost().gpus(), ["driver"])
    plan = r["plan"]["driver"]
    assert all("nvidia-persistenced" not in t for t in plan["transactions"])
    assert plan["persistenced"]["install"] == []
    # persistence mode on through a drop-in, since the packaged unit runs --no-persistence-mode
    exec_lines = [
        ln
        for ln in plan["persistenced"]["dropin_content"].splitlines()
        if ln.startswith("ExecStart=")
    ]
    assert exec_lines[0] == "ExecStart="  # resets the packaged command
    assert "--persistence-mode" in exec_lines[1].split()
    assert "--no-persistence-mode" not in exec_lines[1]
    assert "StopWhenUnneeded=false" in plan["persistenced"]["dropin_content"]
    assert plan["persistenced"]["enable"] is False  # static unit: udev starts it


def test_persistence_check_passes_on_ubuntu_only_with_the_dropin_and_enabled_gpus() -> None:
    h = ubuntu_with_driver()
    plan = judge(h, ["driver"])["plan"]["driver"]
    h.files["/etc/systemd/system/nvidia-persistenced.service.d/provision.conf"] = plan[
        "persistenced"
    ]["dropin_content"]
    assert judge(h, ["driver"])["by_id"]["driver.persistence"]["status"] == "pass"
    # the packaged behaviour: running, but persistence mode Disabled on the GPUs
    h.gpus(V_OLD, persistence="Disabled", nvswitch=False)
    assert judge(h, ["driver"])["by_id"]["driver.persistence"]["status"] == "fail"


def test_el_and_debian_install_the_real_persistenced() -> None:
    el = judge(FakeHost(pf.ROCKY_9).gpus(), ["driver"])["plan"]["driver"]
    assert any("nvidia-persistenced" in t for t in el["transactions"])
    deb = judge(FakeHost(pf.DEBIAN_11).gpus(), ["driver"])["plan"]["driver"]
    assert any("nvidia-persistenced" in t for t in deb["transactions"])


# ---------------------------------------------------------------- 2. pinned driver.version


def test_pinned_version_pins_every_component_by_apt_preferences() -> None:
    """nvidia-driver-535 depends with (=) on ~a dozen components, and nvidia-dkms-535 on a
    per-version nvidia-firmware-535-<V>: apt picks candidates, so an older version needs them all
    pinned (NVIDIA/open-gpu-kernel-modules#537)."""
    r = judge(FakeHost().gpus(), ["driver"], stack(**{"driver.version": V_OLD}))
    pin = r["plan"]["driver"]["pin_content"]
    assert f"Pin: version {V_OLD}-*" in pin
    assert "Pin-Priority: 1001" in pin  # > 1000: allows the downgrade to an older version
    regex = re.search(r"^Package: /(.*)/$", pin, re.M).group(1)
    for name in (
        "nvidia-driver-535",
        "libnvidia-gl-535",
        "libnvidia-compute-535",
        "nvidia-compute-utils-535",
        "xserver-xorg-video-nvidia-535",
        "nvidia-dkms-535",
        "nvidia-kernel-common-535",
        f"nvidia-firmware-535-{V_OLD}",
        "cuda-drivers-535",
        "nvidia-fabricmanager-535",
        "libnvidia-nscq-535",
        "nvidia-modprobe",
    ):
        assert re.match(regex, name), name
    assert not re.match(regex, "nvidia-driver-550")


def test_the_pin_takes_the_driver_from_nvidia_never_from_the_distribution() -> None:
    """Issue 20 item 1: Canonical's newer 535 build in jammy-updates matches `Pin: version 535.*`
    too, and apt took the driver from it and the fabric manager from NVIDIA at another version.
    apt gives a version the priority of the first specific record that matches it
    (Debian/apt:apt-pkg/policy.cc), so Canonical's builds come first, at -1, for the same names;
    NVIDIA's versions then take the 1001 record."""
    pin = judge(FakeHost().gpus(), ["driver"])["plan"]["driver"]["pin_content"]
    records = [r for r in pin.split("\n\n") if r.strip()]
    assert len(records) == 2, pin
    first, second = (dict(ln.split(": ", 1) for ln in r.splitlines() if ": " in ln
                          and not ln.startswith("#")) for r in records)
    assert first == {"Package": second["Package"], "Pin": "release o=Ubuntu",
                     "Pin-Priority": "-1"}, pin
    assert second["Pin"] == "version 535.*" and second["Pin-Priority"] == "1001", pin
    # not on Debian: NVIDIA's packages need Debian's nvidia-kernel-common (20151021) of these names
    deb = judge(FakeHost(pf.DEBIAN_11).gpus(), ["driver"])["plan"]["driver"]["pin_content"]
    assert "o=Debian" not in deb and "Pin-Priority: -1" not in deb, deb


def test_from_580_the_unversioned_fabric_manager_is_pinned_and_held() -> None:
    """Issue 20 item 2: from 580 NVIDIA ships `nvidia-fabricmanager` and `libnvidia-nscq` without
    the branch in the name; the pin and the holds cover them (else apt installs 590's beside a
    580 driver), and below 580 the pin is as before."""
    v580 = "580.65.06"
    pkgs = {
        "cuda-drivers-580": f"{v580}-1",
        "nvidia-driver-580": f"{v580}-0ubuntu1",
        "libnvidia-compute-580": f"{v580}-0ubuntu1",
        "nvidia-fabricmanager": f"{v580}-1",
        "libnvidia-nscq": f"{v580}-1",
    }
    h = FakeHost().gpus(v580).dpkg(pkgs)
    r = judge(h, ["driver"], stack(**{"driver.branch": "580"}))
    plan = r["plan"]["driver"]
    regex = re.search(r"^Package: /(.*)/$", plan["pin_content"], re.M).group(1)
    for name in ("nvidia-fabricmanager", "nvidia-fabricmanager-dev", "libnvidia-nscq",
                 "nvidia-driver-580", "libnvidia-compute-580"):
        assert re.match(regex, name), name
    assert "Pin: version 580.*" in plan["pin_content"]
    assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= set(plan["hold"]), plan["hold"]
    assert plan["transactions"][-1][-2:] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    old = judge(FakeHost().gpus(), ["driver"])["plan"]["driver"]["pin_content"]
    assert "nvidia-fabricmanager(-dev)?|" not in old and "libnvidia-nscq)" not in old


def test_from_580_nvidias_own_names_are_pinned_held_and_moved_with_the_branch() -> None:
    """NVIDIA's 580 builds: nvidia-compute-utils-580 brings the unversioned nvidia-persistenced
    (pinned, or apt takes 590's), and nvidia-firmware-580 / libnvidia-gpucomp-580 are driver
    packages (held with it); a 590 daemon that got in is another branch's package."""
    v580 = "580.95.05"
    pkgs = {
        "cuda-drivers-580": f"{v580}-0ubuntu1",
        "nvidia-driver-580": f"{v580}-0ubuntu1",
        "nvidia-compute-utils-580": f"{v580}-0ubuntu1",
        "nvidia-firmware-580": f"{v580}-0ubuntu1",
        "libnvidia-gpucomp-580": f"{v580}-0ubuntu1",
        "nvidia-persistenced": f"{v580}-0ubuntu1",
        "nvidia-fabricmanager": f"{v580}-1",
        "libnvidia-nscq": f"{v580}-1",
    }
    st = stack(**{"driver.branch": "580", "driver.version": v580})
    plan = judge(FakeHost().gpus(v580).dpkg(pkgs), ["driver"], st)["plan"]["driver"]
    regex = re.search(r"^Package: /(.*)/$", plan["pin_content"], re.M).group(1)
    assert re.match(regex, "nvidia-persistenced")
    assert "Pin: version 580.95.05-*" in plan["pin_content"]
    for name in ("nvidia-persistenced", "nvidia-firmware-580", "libnvidia-gpucomp-580"):
        assert name in plan["hold"], (name, plan["hold"])
    assert not plan["remove"], plan["remove"]
    stray = dict(pkgs, **{"nvidia-persistenced": "590.48.01-1ubuntu1"})
    plan = judge(FakeHost().gpus(v580).dpkg(stray), ["driver"], st)["plan"]["driver"]
    assert "nvidia-persistenced" in plan["remove"] and "nvidia-persistenced" not in plan["hold"]
    # 535: the name stays unpinned (nvidia-compute-utils-535 provides it)
    old = judge(FakeHost().gpus(), ["driver"])["plan"]["driver"]["pin_content"]
    assert "nvidia-persistenced" not in old


def test_version_change_unholds_and_flags_drift() -> None:
    h = ubuntu_with_driver()
    r = judge(h, ["driver"], stack(**{"driver.version": V_NEW}), check_mode=True)
    assert r["by_id"]["driver.version"]["status"] == "drift"
    plan = judge(h, ["driver"], stack(**{"driver.version": V_NEW}))["plan"]["driver"]
    assert plan["change"] and "nvidia-driver-535" in plan["unhold"]


# ---------------------------------------------------------- 3. services before the reboot


def test_mismatch_after_install_means_reboot_and_no_services() -> None:
    h = ubuntu_with_driver()
    h.commands["nvidia-smi"] = (18, pf.SMI_MISMATCH, "")
    r = judge(h, ["driver"])
    plan = r["plan"]["driver"]
    assert plan["reboot_needed"] is True
    assert plan["module_loaded"] is False  # services.yml starts nothing until the module is loaded
    assert r["by_id"]["driver.reboot"]["status"] == "fail"
    assert r["by_id"]["driver.module_loaded"]["remediation"] == "reboot"


# ------------------------------------------------------------- 4. Debian names and release


def test_debian11_uses_debian_names_a_branch_pin_and_contrib() -> None:
    """NVIDIA's Debian repositories: nvidia-driver-cuda, nvidia-kernel-dkms (open:
    nvidia-kernel-open-dkms), versions <V>-1, contrib needed (GoogleCloudDataproc/
    initialization-actions#1400; NVIDIA/apt-packaging-fabric-manager#2)."""
    h = FakeHost(pf.DEBIAN_11, kernel="5.10.0-26-cloud-amd64").gpus()
    h.files["/etc/apt/sources.list"] = "deb http://deb.debian.org/debian bullseye main\n"
    r = judge(h, ["repo", "driver"])
    plan = r["plan"]["driver"]
    names = [n for t in plan["transactions"] for n in t]
    assert "nvidia-driver-cuda" in names and "nvidia-kernel-dkms" in names
    assert not any(n.startswith(("nvidia-driver-5", "cuda-drivers-5")) for n in names)
    assert "Pin: version 535.*" in plan["pin_content"]
    assert "linux-headers-cloud-amd64" in names  # the flavour's meta package
    rewrite = {x["path"]: x["content"] for x in r["plan"]["repo"]["rewrite"]}
    assert (
        rewrite["/etc/apt/sources.list"]
        == "deb http://deb.debian.org/debian bullseye main contrib\n"
    )
    assert r["by_id"]["repo.contrib"]["status"] == "fail"
    open_plan = judge(h, ["driver"], stack(**{"driver.flavor": "open"}))["plan"]["driver"]
    assert "nvidia-kernel-open-dkms" in [n for t in open_plan["transactions"] for n in t]


def test_default_stack_on_debian12_stops_in_preflight_with_the_reason() -> None:
    r = judge(FakeHost(pf.DEBIAN_12).gpus(), ["preflight"])
    check = r["by_id"]["preflight.cuda_repo"]
    assert check["status"] == "fail"
    assert "debian12/x86_64" in check["message"] and "12.1" in check["message"]
    # unless the mirror declares it carries CUDA 12.1 for debian12
    carried = stack(**{"mirrors.carries": ["debian12/x86_64"]})
    assert (
        judge(FakeHost(pf.DEBIAN_12).gpus(), ["preflight"], carried)["by_id"][
            "preflight.cuda_repo"
        ]["status"]
        == "pass"
    )


# --------------------------------------------------------------------------------- 5. EL8


def test_el8_is_refused_in_preflight_with_the_reason() -> None:
    check = judge(FakeHost(pf.ROCKY_8).gpus(), ["preflight"])["by_id"]["preflight.os"]
    assert check["status"] == "fail"
    assert "EL8" in check["message"] and "platform-python" in check["message"]


# -------------------------------------------------------------------------- 6. first boot


def test_wait_for_a_dpkg_lock_then_proceed() -> None:
    h = FakeHost()
    h.files["/var/lib/dpkg/lock-frontend"] = ""
    ino = h.inode("/var/lib/dpkg/lock-frontend")
    assert ino is not None
    line = f"1: POSIX  ADVISORY  WRITE 2448 {ino[0]:02x}:{ino[1]:02x}:{ino[2]} 0 EOF\n"
    h.files["/proc/2448/comm"] = "unattended-upgr\n"

    def read(path: str, _orig=h.read) -> str | None:
        if path == "/proc/locks":
            return line if h.clock < 20 else ""
        return _orig(path)

    h.read = read  # type: ignore[method-assign]
    done = c.wait_for_host(h, "ubuntu", timeout_s=60)
    assert done["ok"] and 20 <= done["waited_s"] < 30
    h.clock = 0
    stuck = c.wait_for_host(h, "ubuntu", timeout_s=10)
    assert not stuck["ok"]
    assert "process 2448 (unattended-upgr)" in stuck["message"]
    assert "/var/lib/dpkg/lock-frontend" in stuck["message"]


def test_wait_gives_up_on_cloud_init_with_a_message() -> None:
    h = FakeHost()
    h.binaries.add("cloud-init")
    h.commands["cloud-init status --wait"] = (-9, "", "timed out")
    res = c.wait_for_host(h, "ubuntu", timeout_s=5)
    assert not res["ok"] and "cloud-init still running" in res["message"]


# ----------------------------------------------------------------------- 7. kernel headers


def test_kernel_headers_include_the_flavour_meta_package() -> None:
    for kernel, meta in (
        ("5.15.0-91-generic", "linux-headers-generic"),
        ("6.8.0-1015-aws", "linux-headers-aws"),
        ("6.5.0-1020-azure", "linux-headers-azure"),
        ("6.1.0-13-amd64", "linux-headers-amd64"),
        # issue 20 item 9: a 22.04 HWE kernel follows the HWE meta package, not the GA one
        ("6.8.0-60-generic", "linux-headers-generic-hwe-22.04"),
        ("6.5.0-14-lowlatency", "linux-headers-lowlatency-hwe-22.04"),
    ):
        plan = judge(FakeHost(kernel=kernel).gpus(), ["driver"])["plan"]["driver"]
        assert f"linux-headers-{kernel}" in plan["kernel_packages"], kernel
        assert meta in plan["kernel_packages"], kernel
    hwe = judge(FakeHost(kernel="6.8.0-60-generic").gpus(), ["driver"])["plan"]["driver"]
    assert "linux-headers-generic" not in hwe["kernel_packages"]
    el = judge(FakeHost(pf.ROCKY_9, kernel="5.14.0-427.el9.x86_64").gpus(), ["driver"])
    assert "kernel-devel-matched" in el["plan"]["driver"]["kernel_packages"]


# -------------------------------------------------------------- 8. preinstalled Canonical


def canonical(branch: str, version: str) -> dict[str, str]:
    rev = f"{version}-0ubuntu0.22.04.1"
    return {
        f"nvidia-driver-{branch}-server": rev,
        f"nvidia-utils-{branch}-server": rev,
        f"nvidia-compute-utils-{branch}-server": rev,
        f"libnvidia-compute-{branch}-server": rev,
        f"linux-modules-nvidia-{branch}-server-5.15.0-91-generic": "5.15.0-91.101+1",
        "linux-signatures-nvidia-5.15.0-91-generic": "5.15.0-91.101+1",
    }


def test_canonical_server_driver_that_satisfies_the_stack_is_adopted() -> None:
    h = FakeHost().gpus(V_OLD, nvswitch=False).dpkg(canonical("535", V_OLD))
    r = judge(h, ["preflight", "driver"])
    assert r["plan"]["driver"]["adopted"] is True
    assert r["plan"]["driver"]["transactions"] == [
        ["linux-headers-5.15.0-91-generic", "linux-headers-generic", "dkms"]
    ]
    assert r["plan"]["driver"]["remove"] == []
    line = r["report"]["plan"][0]
    assert (
        line.startswith("driver: adopt nvidia-driver-535-server") and "nvidia-uninstall" not in line
    )
    assert r["by_id"]["driver.branch"]["status"] == "pass"
    # Secure Boot on is fine with Canonical's signed prebuilt modules
    h.binaries.add("mokutil")
    h.commands["mokutil --sb-state"] = (0, pf.conftest.capture("mokutil-sb-state__enabled.txt"), "")
    assert judge(h, ["driver"])["by_id"]["driver.secure_boot"]["status"] == "pass"


def test_fabric_manager_beside_an_adopted_canonical_driver_is_pinned_to_its_version() -> None:
    """nv-fabricmanager refuses a driver of another version (NVIDIA's fabric manager guide); the
    branch's newest in NVIDIA's repository is not the adopted -server driver's version (found by
    tests/lab/test_real_repo_cases.py: 535.154.05 installed beside 535.129.03 failed to start)."""
    h = FakeHost().gpus(V_OLD).dpkg(canonical("535", V_OLD))
    r = judge(h, ["driver"])
    plan = r["plan"]["driver"]
    assert plan["adopted"] is True
    assert plan["transactions"][-1][-2:] == ["nvidia-fabricmanager-535", "libnvidia-nscq-535"]
    assert plan["pin_file"] == "/etc/apt/preferences.d/provision-nvidia-driver"
    lines = plan["pin_content"].splitlines()
    assert lines[1:] == [
        "Package: nvidia-fabricmanager-535 libnvidia-nscq-535",
        f"Pin: version {V_OLD}-*",
        "Pin-Priority: 1001",
    ]
    assert r["by_id"]["driver.pin"]["status"] == "fail"  # not written yet
    # a fabric manager already at another version is moved to the adopted driver's
    fm = {"nvidia-fabricmanager-535": f"{V_NEW}-1", "libnvidia-nscq-535": f"{V_NEW}-1"}
    h.dpkg({**canonical("535", V_OLD), **fm})
    h.files["/etc/apt/preferences.d/provision-nvidia-driver"] = plan["pin_content"]
    r = judge(h, ["driver"])
    assert r["plan"]["driver"]["resync"] == ["libnvidia-nscq-535", "nvidia-fabricmanager-535"]
    assert r["by_id"]["driver.pin"]["status"] == "pass"
    assert r["by_id"]["driver.fabricmanager"]["status"] == "fail"
    # no NVSwitch: no fabric manager, no pin
    plain = judge(FakeHost().gpus(V_OLD, nvswitch=False).dpkg(canonical("535", V_OLD)), ["driver"])
    assert plain["plan"]["driver"]["pin_file"] == ""
    assert "driver.pin" not in plain["by_id"]


def test_canonical_server_driver_of_another_branch_is_replaced_with_a_plan_line() -> None:
    h = FakeHost().gpus("550.127.08", nvswitch=False).dpkg(canonical("550", "550.127.08"))
    r = judge(h, ["preflight", "driver"])
    plan = r["plan"]["driver"]
    assert "nvidia-driver-550-server" in plan["remove"]
    assert [n for n in plan["transactions"][0] if n.startswith("cuda")] == ["cuda-drivers-535"]
    line = r["report"]["plan"][0]
    assert line.startswith("driver: replace Canonical's nvidia-driver-550-server")
    assert "nvidia-uninstall" not in line


# ---------------------------------------------------------------------------- 9. open flavour


def test_open_flavour_follows_nvidias_documented_order_on_ubuntu() -> None:
    plan = judge(FakeHost().gpus(), ["driver"], stack(**{"driver.flavor": "open"}))["plan"][
        "driver"
    ]
    assert plan["transactions"][0][-1] == "nvidia-kernel-open-535"
    assert plan["transactions"][1][0] == "cuda-drivers-535"
    el = judge(FakeHost(pf.ROCKY_9).gpus(), ["driver"], stack(**{"driver.flavor": "open"}))
    assert "@nvidia-driver:535-open" in el["plan"]["driver"]["transactions"][0]


def test_open_flavour_refused_on_pre_turing() -> None:
    h = FakeHost().gpus()
    # every GPU Volta (7.0)
    h.commands["nvidia-smi --query-gpu=index,compute_cap"] = (
        0,
        "".join(f"{i}, 7.0\n" for i in range(8)),
        "",
    )
    r = judge(h, ["driver"], stack(**{"driver.flavor": "open"}))
    assert r["by_id"]["driver.flavor"]["status"] == "fail"


def test_el_pinned_version_names_the_versioned_packages_beside_the_stream() -> None:
    """On EL the nvidia-driver stream locks the branch, not the version: an exact version names
    the packages that carry it (nvidia-driver-<V>, the kmod, persistenced, the fabric manager),
    so dnf installs exactly it or refuses (an older kmod is hidden by modular filtering)."""
    r = judge(FakeHost(pf.ROCKY_9).gpus(), ["driver"], stack(**{"driver.version": V_OLD}))
    plan = r["plan"]["driver"]
    assert plan["pin_content"] == ""  # versionlock after the install, no apt preferences
    (t,) = plan["transactions"]
    assert "@nvidia-driver:535-dkms" in t
    for name in (
        "nvidia-driver",
        "nvidia-driver-cuda",
        "kmod-nvidia-latest-dkms",
        "nvidia-persistenced",
        "nvidia-fabric-manager",
    ):
        assert f"{name}-{V_OLD}" in t, (name, t)
    assert "nvidia-persistenced" not in t  # only the versioned name
    opened = judge(
        FakeHost(pf.ROCKY_9).gpus(),
        ["driver"],
        stack(**{"driver.version": V_OLD, "driver.flavor": "open"}),
    )["plan"]["driver"]["transactions"][0]
    assert "@nvidia-driver:535-open" in opened
    assert f"kmod-nvidia-open-dkms-{V_OLD}" in opened
    # no version: the stream's default profile (the branch's newest version)
    unpinned = judge(FakeHost(pf.ROCKY_9).gpus(), ["driver"])["plan"]["driver"]["transactions"]
    assert not any(n.endswith(V_OLD) for n in unpinned[0])


def test_el_branch_change_takes_the_fabric_manager_along() -> None:
    """EL has one fabric manager name for every branch (nvidia-fabric-manager): a branch change
    removes the old branch's one with the other driver packages, then installs it again."""
    h = FakeHost(pf.ROCKY_9).gpus("535.154.05")
    rpm = [
        "nvidia-driver|3:535.154.05-1.el9|x86_64",
        "nvidia-driver-cuda|3:535.154.05-1.el9|x86_64",
        "kmod-nvidia-latest-dkms|3:535.154.05-1.el9|x86_64",
        "nvidia-persistenced|3:535.154.05-1.el9|x86_64",
        "nvidia-fabric-manager|0:535.154.05-1|x86_64",
    ]
    h.commands["rpm -qa"] = (0, "\n".join(rpm) + "\n", "")
    h.files["/etc/dnf/plugins/versionlock.list"] = "".join(
        f"{ln.split('|')[0]}-{ln.split('|')[1]}.*\n" for ln in rpm
    )
    plan = judge(h, ["driver"], stack(**{"driver.branch": "550"}))["plan"]["driver"]
    assert "nvidia-fabric-manager" in plan["remove"]
    assert "nvidia-fabric-manager" in plan["unhold"]
    assert plan["transactions"][-1][-1] == "nvidia-fabric-manager"
    # the same branch: the fabric manager stays
    same = judge(h, ["driver"], stack(**{"driver.branch": "535"}))["plan"]["driver"]
    assert same["remove"] == []


def test_el_branch_change_from_580_removes_the_fabric_manager_only_before_the_install() -> None:
    """From 580 EL's fabric manager is nvidia-fabricmanager; going down to 550 it is removed with
    the 580 packages BEFORE the install, and not again after it: nvidia-fabric-manager (550)
    provides nvidia-fabricmanager, so `dnf remove nvidia-fabricmanager` after the install removed
    the fabric manager just installed (the lab's el9 converge scenario on 580 found it)."""
    h = FakeHost(pf.ROCKY_9).gpus("580.95.05")
    rpm = [
        "nvidia-driver|3:580.95.05-1.el9|x86_64",
        "nvidia-driver-cuda|3:580.95.05-1.el9|x86_64",
        "kmod-nvidia-latest-dkms|3:580.95.05-1.el9|x86_64",
        "nvidia-persistenced|3:580.95.05-1.el9|x86_64",
        "cuda-drivers-580|0:580.95.05-1|x86_64",
        "nvidia-fabricmanager|0:580.95.05-1|x86_64",
    ]
    h.commands["rpm -qa"] = (0, "\n".join(rpm) + "\n", "")
    plan = judge(h, ["driver"], stack(**{"driver.branch": "550"}))["plan"]["driver"]
    assert {"nvidia-fabricmanager", "cuda-drivers-580"} <= set(plan["remove"]), plan["remove"]
    assert plan["fabricmanager_remove"] == [], plan["fabricmanager_remove"]
    assert plan["transactions"][-1][-1] == "nvidia-fabric-manager"
    up = judge(h, ["driver"], stack(**{"driver.branch": "580", "driver.version": "580.95.05"}))
    plan = up["plan"]["driver"]
    assert plan["remove"] == [] and plan["transactions"][-1][-1] == "nvidia-fabricmanager-580.95.05"


# ------------------------------------------------------------------- 10. EL holds and suffixes


def test_el_library_holds_pass_with_dashed_names_and_rpm_suffixes() -> None:
    h = FakeHost(pf.ROCKY_9)
    rpm = "\n".join(
        [
            "libcudnn8|0:8.9.2.26-1.cuda12.1|x86_64",
            "libcudnn8-devel|0:8.9.2.26-1.cuda12.1|x86_64",
            "libnccl|0:2.18.3-1+cuda12.1|x86_64",
            "libnccl-devel|0:2.18.3-1+cuda12.1|x86_64",
        ]
    )
    h.commands["rpm -qa"] = (0, rpm + "\n", "")
    h.files["/etc/dnf/plugins/versionlock.list"] = (
        "libcudnn8-0:8.9.2.26-1.cuda12.1.*\nlibcudnn8-devel-0:8.9.2.26-1.cuda12.1.*\n"
        "libnccl-0:2.18.3-1+cuda12.1.*\nlibnccl-devel-0:2.18.3-1+cuda12.1.*\n"
    )
    r = judge(h, ["cudnn", "nccl"])
    for cid in ("cudnn.version", "cudnn.hold", "nccl.version", "nccl.hold"):
        assert r["by_id"][cid]["status"] == "pass", r["by_id"][cid]
    assert r["plan"]["cudnn"]["install"] == [
        "libcudnn8-8.9.2.26-1.cuda12.1",
        "libcudnn8-devel-8.9.2.26-1.cuda12.1",
    ]


def test_el_preflight_plan_uses_the_rpm_suffix() -> None:
    r = judge(FakeHost(pf.ROCKY_9).gpus(), ["preflight"])
    assert "cudnn: install libcudnn8 8.9.2.26-1.cuda12.1" in r["report"]["plan"]
    assert "nccl: install libnccl 2.18.3-1+cuda12.1" in r["report"]["plan"]


# ------------------------------------------------------------------- 12. what PyTorch uses


def test_report_names_torch_bundled_libraries_beside_the_system_packages() -> None:
    h = FakeHost().dpkg({"libcudnn8": "8.9.2.26-1+cuda12.1", "libnccl2": "2.18.3-1+cuda12.1"})
    h.files["/opt/pytorch/bin/python"] = ""
    h.files["/opt/pytorch/bin/pip"] = ""
    # torch 2.5.1+cu121 bundles nvidia-cudnn-cu12 9.1.0.70 and nvidia-nccl-cu12 2.21.5
    h.commands["/opt/pytorch/bin/python -c"] = (
        0,
        (
            '{"python": "3.11.2", "torch_version": "2.5.1+cu121", "torch_cuda": "12.1", '
            '"cuda_available": true, "nccl_version": "2.21.5", "cudnn_version": 90100, '
            '"torchvision": null, "torchaudio": null}\n'
        ),
        "",
    )
    rep = judge(h, ["cudnn", "nccl", "pytorch"])["report"]
    assert rep["torch_bundled_cudnn_version"] == "9.1.0"
    assert rep["torch_bundled_nccl_version"] == "2.21.5"
    assert rep["system_cudnn_version"] == "8.9.2.26"
    assert rep["system_nccl_version"] == "2.18.3"
    assert "cudnn_version" not in rep and "nccl_version" not in rep


# ------------------------------------------------------------------ 13. foreign CUDA paths

GUIDE = (  # the widely copied multi-GPU guide's profile lines, after installing 12.1
    "export PATH=/usr/local/cuda-11.3/bin${PATH:+:${PATH}}\n"
    "export LD_LIBRARY_PATH=/usr/local/cuda-11.3/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}\n"
)


def env_host(extra: dict[str, str]) -> FakeHost:
    h = FakeHost()
    h.files["/etc/profile.d/cuda.sh"] = profile_script("12.1")
    h.files.update(extra)
    h.dirs.add("/usr/local/cuda-12.1")
    h.commands["env -i"] = (
        0,
        (
            "PATH=/usr/local/cuda-11.3/bin:/usr/local/cuda-12.1/bin:/usr/bin:/bin\n"
            "LD=/usr/local/cuda-11.3/lib64:/usr/local/cuda-12.1/lib64\n"
            "NVCC=/usr/local/cuda-11.3/bin/nvcc\n"
            "Cuda compilation tools, release 11.3, V11.3.109\n"
        ),
        "",
    )
    return h


def test_foreign_cuda_paths_are_named_by_file_and_line_and_drift() -> None:
    h = env_host({"/etc/profile.d/zz-cuda-11.3.sh": GUIDE})
    r = judge(h, ["env"], check_mode=True)
    foreign = r["by_id"]["env.foreign_paths"]
    assert foreign["status"] == "drift"
    assert "/etc/profile.d/zz-cuda-11.3.sh:1" in foreign["actual"]
    assert "/etc/profile.d/zz-cuda-11.3.sh:2" in foreign["actual"]
    ld = r["by_id"]["env.ld_library_path"]
    assert ld["status"] == "drift" and "/usr/local/cuda-11.3/lib64" in ld["actual"]
    # the remediation is not the command that just failed
    assert "zz-cuda-11.3.sh" in r["by_id"]["env.path"]["remediation"]
    plan = judge(h, ["env"])["plan"]["env"]
    (rewrite,) = plan["neutralize"]
    assert rewrite["path"] == "/etc/profile.d/zz-cuda-11.3.sh"
    assert all(
        ln.startswith("# provision: foreign CUDA path disabled")
        for ln in rewrite["content"].splitlines()
    )
    assert plan["blocked"] == []


def test_foreign_paths_outside_profile_d_stop_the_run_naming_the_file() -> None:
    h = env_host({"/etc/bash.bashrc": "alias ll='ls -l'\n" + GUIDE})
    plan = judge(h, ["env"])["plan"]["env"]
    assert plan["neutralize"] == []
    assert plan["blocked"][0].startswith("/etc/bash.bashrc:2:")
    # the switch off: profile.d lines are named, not rewritten
    h2 = env_host({"/etc/profile.d/zz.sh": GUIDE})
    off = judge(h2, ["env"], stack(**{"env.neutralize_foreign": False}))["plan"]["env"]
    assert off["neutralize"] == [] and off["blocked"]


# --------------------------------------------------------------------------- check statuses


def test_fresh_host_check_mode_is_drift_not_fail() -> None:
    h = FakeHost().gpus()
    h.binaries.discard("nvidia-smi")
    h.commands.pop("nvidia-smi")
    r = judge(h, ALL, check_mode=True)
    assert r["by_id"]["cuda.toolkit"]["status"] == "drift"
    assert r["by_id"]["driver.branch"]["status"] == "drift"
    assert r["by_id"]["preflight.gpu"]["status"] == "pass"
    assert r["by_id"]["driver.module_loaded"]["status"] == "skip"
    ids = [x["id"] for x in r["checks"]]
    assert len(ids) == len(set(ids))
    for x in r["checks"]:
        # the six keys, and `warning` only on a passing check that needs attention
        # (driver.branch_support past NVIDIA's end of support)
        assert set(x) - {"warning"} == {
            "id", "status", "expected", "actual", "message", "remediation"
        }
        assert "warning" not in x or x["status"] == "pass", x
        assert x["status"] in ("pass", "drift", "fail", "skip")


def test_fabric_manager_only_on_nvswitch_and_at_the_driver_version() -> None:
    no_switch = judge(FakeHost().gpus(nvswitch=False), ["driver"])["plan"]["driver"]
    assert no_switch["fabricmanager_install"] == []
    h = (
        FakeHost()
        .gpus(V_OLD, nvswitch=True)
        .dpkg(
            {
                **UBUNTU_535,
                "nvidia-fabricmanager-535": f"{V_NEW}-1",
                "libnvidia-nscq-535": f"{V_NEW}-1",
            }
        )
    )
    check = judge(h, ["driver"])["by_id"]["driver.fabricmanager"]
    assert check["status"] == "fail"  # a version different from the driver's is broken, not drift


def test_holding_what_the_plan_says_makes_driver_hold_pass() -> None:
    """The plan's holds and the driver.hold check are one rule (on Debian the contrib helpers such
    as nvidia-kernel-common 20151021 are not the driver's and are not held)."""
    debian = {
        "nvidia-driver-cuda": f"{V_OLD}-1",
        "nvidia-kernel-dkms": f"{V_OLD}-1",
        "libcuda1": f"{V_OLD}-1",
        "nvidia-persistenced": f"{V_OLD}-1",
        "nvidia-kernel-support": f"{V_OLD}-1",
        "nvidia-alternative": f"{V_OLD}-1",
        "nvidia-kernel-common": "20151021+13",
        "firmware-nvidia-gsp": f"{V_OLD}-1",
    }
    for os_release, packages in ((pf.UBUNTU_2204, UBUNTU_535), (pf.DEBIAN_11, debian)):
        h = FakeHost(os_release).gpus(V_OLD, nvswitch=False).dpkg(packages)
        first = judge(h, ["driver"])
        assert first["by_id"]["driver.hold"]["status"] == "fail"
        hold = first["plan"]["driver"]["hold"]
        assert "nvidia-kernel-common" not in hold
        h.dpkg(packages, held=tuple(hold))
        again = judge(h, ["driver"])
        assert again["by_id"]["driver.hold"]["status"] == "pass", again["by_id"]["driver.hold"]
        assert again["plan"]["driver"]["hold"] == []


def test_an_interrupted_dpkg_is_repaired_first() -> None:
    """A package left half-configured (an install cut by a lost connection) makes apt refuse to
    work: the repo and driver plans run `dpkg --configure -a` first."""
    h = FakeHost().gpus()
    h.commands["dpkg-query -W"] = (
        0,
        "cuda-keyring|1.1-1|ii \nnvidia-dkms-535|535.129.03-0ubuntu1|iF \n",
        "",
    )
    r = judge(h, ["repo", "driver"])
    assert r["plan"]["repo"]["dpkg_repair"] and r["plan"]["driver"]["dpkg_repair"]
    assert r["facts"]["packages"]["broken"] == ["nvidia-dkms-535"]
    clean = FakeHost().gpus().dpkg({"cuda-keyring": "1.1-1"})
    assert not judge(clean, ["repo"])["plan"]["repo"]["dpkg_repair"]
    h2 = FakeHost().gpus().dpkg({"cuda-keyring": "1.1-1"})
    h2.files["/var/lib/dpkg/updates/0001"] = "journal entry"
    assert judge(h2, ["repo"])["plan"]["repo"]["dpkg_repair"]


def test_a_half_installed_package_is_reinstalled_at_the_version_dpkg_was_unpacking() -> None:
    """A power cut during `dpkg --unpack` leaves the package half-installed with the reinst-required
    flag (`dpkg-query` abbreviation "iHR", or "iUR" when the flag is set on an unpacked one): dpkg
    and `apt-get --fix-broken install` refuse to configure it ("package is in a very bad
    inconsistent state; you should reinstall it"), so both plans reinstall it at that version."""
    status = (
        "cuda-keyring|1.1-1|ii \n"
        "nvidia-kernel-source-535|535.129.03-0ubuntu1|iHR\n"
        "libnvidia-gl-535|535.129.03-0ubuntu1|iUR\n"
        "libnvidia-common-535|535.129.03-0ubuntu1|iU \n"
    )
    parsed = p.parse_dpkg_query(status)
    assert parsed["nvidia-kernel-source-535"]["reinstall"]
    assert parsed["libnvidia-gl-535"]["reinstall"]
    assert not parsed["libnvidia-common-535"]["reinstall"]  # unpacked: dpkg configures it
    assert not parsed["cuda-keyring"]["reinstall"] and not parsed["cuda-keyring"]["broken"]
    h = FakeHost().gpus()
    h.commands["dpkg-query -W"] = (0, status, "")
    r = judge(h, ["repo", "driver"])
    want = ["libnvidia-gl-535=535.129.03-0ubuntu1", "nvidia-kernel-source-535=535.129.03-0ubuntu1"]
    assert r["plan"]["repo"]["dpkg_reinstall"] == want
    assert r["plan"]["driver"]["dpkg_reinstall"] == want
    assert r["plan"]["repo"]["dpkg_repair"]
    clean = FakeHost().gpus().dpkg({"cuda-keyring": "1.1-1"})
    assert judge(clean, ["repo"])["plan"]["repo"]["dpkg_reinstall"] == []


def test_kernel_headers_unknown_before_the_first_apt_update_do_not_stop_the_host() -> None:
    """A fresh image has no apt package index: "no candidate" is then not "not published"."""
    h = FakeHost().gpus()
    fresh = judge(h, ["preflight"])["by_id"]["preflight.kernel_headers"]
    assert fresh["status"] == "pass" and "not known yet" in fresh["actual"]
    h.files[
        "/var/lib/apt/lists/archive.ubuntu.com_ubuntu_dists_jammy_main_binary-amd64_Packages"
    ] = ""
    known = judge(h, ["preflight"])["by_id"]["preflight.kernel_headers"]
    assert known["status"] == "fail" and known["actual"] == "not available"


def test_packages_past_the_pin_are_moved_back_with_the_transaction_state_latest() -> None:
    """An upgrade past the pin (or an older pin) leaves packages that still satisfy every
    dependency: `present` keeps them, so the plan names them for `latest` (the pin's candidate)."""
    newer = {n: v.replace(V_OLD, V_NEW) for n, v in UBUNTU_535.items()}
    newer = {n.replace(V_OLD, V_NEW): v for n, v in newer.items()}
    h = FakeHost().gpus(V_OLD, nvswitch=False).dpkg(newer)
    plan = judge(h, ["driver"], stack(**{"driver.version": V_OLD}))["plan"]["driver"]
    assert "nvidia-driver-535" in plan["resync"] and "cuda-drivers-535" in plan["resync"]
    assert "nvidia-driver-535" in plan["unhold"] or not plan["unhold"]
    at_pin = judge(
        FakeHost().gpus(V_OLD, nvswitch=False).dpkg(UBUNTU_535),
        ["driver"],
        stack(**{"driver.version": V_OLD}),
    )["plan"]["driver"]
    assert at_pin["resync"] == []


def test_a_library_version_change_lifts_and_sets_the_holds_again() -> None:
    h = FakeHost().dpkg(
        {"libcudnn8": "8.9.0.131-1+cuda12.1", "libcudnn8-dev": "8.9.0.131-1+cuda12.1"},
        held=("libcudnn8", "libcudnn8-dev"),
    )
    plan = judge(h, ["cudnn"])["plan"]["cudnn"]
    assert plan["unhold"] == ["libcudnn8", "libcudnn8-dev"]
    assert plan["hold"] == ["libcudnn8", "libcudnn8-dev"]  # held again after the install
    assert plan["needs_install"]


def test_debian_branch_change_also_moves_the_recommended_nvidia_settings() -> None:
    """Debian's nvidia-driver Recommends an unversioned nvidia-settings (<V>-1; squarooticus/
    nvidia-graphics-drivers:debian/control): no dependency moves it with the driver, so a
    branch change must name it, or a 535 nvidia-settings outlives the move to 550."""
    h = FakeHost(pf.DEBIAN_11, kernel="5.10.0-26-cloud-amd64").gpus("535.104.05")
    h.dpkg(
        {
            "nvidia-driver": "535.104.05-1",
            "nvidia-driver-cuda": "535.104.05-1",
            "nvidia-settings": "535.104.05-1",
            "nvidia-kernel-common": "20151021+13",
        }
    )
    r = judge(h, ["driver"], stack(**{"driver.branch": "550", "driver.version": ""}))
    plan = r["plan"]["driver"]
    assert "nvidia-settings" in plan["remove"]
    assert "nvidia-kernel-common" not in plan["remove"]  # a contrib helper, not a driver version
    assert r["by_id"]["driver.branch"]["status"] != "pass"


def test_pytorch_wheels_are_verified_by_the_index_or_the_stacks_hashes() -> None:
    """Issue 14: every download verified. An index: pip checks its links' sha256. A find-links
    mirror: pip --require-hashes from mirrors.pytorch_hashes. Neither: nothing is installed."""
    h = FakeHost().gpus()
    by_index = judge(h, ["pytorch"])
    assert by_index["by_id"]["pytorch.hashes"]["status"] == "pass"
    plan = by_index["plan"]["pytorch"]
    assert "--require-hashes" not in plan["install_args"] and plan["requirements_file"] == ""
    assert plan["install_args"][-1].startswith("torch==")
    pins = [
        "torch==2.5.1+cu121 --hash=sha256:" + "b" * 64,
        "filelock==3.0 --hash=sha256:" + "c" * 64,
    ]
    hashed = judge(
        h,
        ["pytorch"],
        stack(
            **{"pytorch.index_url": "", "pytorch.find_links": "http://m/w/", "pytorch.hashes": pins}
        ),
    )
    assert hashed["by_id"]["pytorch.hashes"]["status"] == "pass"
    plan = hashed["plan"]["pytorch"]
    assert plan["install_args"] == [
        "--no-index",
        "--find-links",
        "http://m/w/",
        "--require-hashes",
        "-r",
        "/opt/pytorch/provision-requirements.txt",
    ]
    assert plan["requirements_content"] == "".join(p + "\n" for p in pins)
    assert plan["install"]  # torch is not there yet: it is installed
    bare = judge(
        h, ["pytorch"], stack(**{"pytorch.index_url": "", "pytorch.find_links": "http://m/w/"})
    )
    check = bare["by_id"]["pytorch.hashes"]
    assert check["status"] == "fail" and "unverified" in check["message"]
    assert "mirrors.pytorch_hashes" in check["remediation"]
    assert bare["plan"]["pytorch"]["install"] == []


def test_old_key_stays_while_a_machine_learning_entry_still_uses_it(monkeypatch: Any) -> None:
    """Issue 20 item 9: NVIDIA's rotated key 7fa2af80 is removed only when apt still trusts it and
    no other NVIDIA entry without signed-by (the machine-learning repository of the pre-2022
    guides) depends on it; while it is trusted and unused, repo.key says so."""
    h = FakeHost().gpus()
    h.binaries.update({"apt-key", "gpg"})
    assert judge(h, ["repo"])["plan"]["repo"]["remove_old_key"] is False  # not trusted: nothing
    h.bytes["/etc/apt/trusted.gpg"] = b"a keyring"
    h.files["/etc/apt/trusted.gpg"] = ""
    real = c.p.openpgp_fingerprints
    monkeypatch.setattr(c.p, "openpgp_fingerprints", lambda data: (
        ["AE09FE4BBD223A84B2CCFCE3F60F4B3D7FA2AF80"] if data == b"a keyring" else real(data)))
    r = judge(h, ["repo"], check_mode=True)
    assert r["plan"]["repo"]["remove_old_key"] is True
    assert r["by_id"]["repo.key"]["status"] == "drift", r["by_id"]["repo.key"]
    h.files["/etc/apt/sources.list.d/nvidia-ml.list"] = (
        "deb https://developer.download.nvidia.com/compute/machine-learning/repos/ubuntu2204/"
        "x86_64 /\n"
    )
    plan = judge(h, ["repo"])["plan"]["repo"]
    assert plan["remove_old_key"] is False
    assert plan["old_key_kept_for"] == ["/etc/apt/sources.list.d/nvidia-ml.list:1"]


def test_el9_repository_check_passes_on_a_rerun_against_a_one_build_mirror() -> None:
    """Issue 20 item 9: `dnf list --available` hides the installed build, so on a rerun against a
    mirror carrying only that build repo.source failed; the probe asks `dnf repoquery`, which lists
    the repository's packages whether installed or not."""
    h = FakeHost(pf.ROCKY_9).gpus()
    repo = "/etc/yum.repos.d/cuda-rhel9-x86_64.repo"
    h.files[repo] = (
        "[cuda-rhel9-x86_64]\nbaseurl=https://developer.download.nvidia.com/compute/cuda/repos/"
        "rhel9/x86_64/\n"
    )
    h.commands["dnf -q --repo cuda-rhel9-x86_64 repoquery cuda-toolkit-12-1"] = (
        0, "cuda-toolkit-12-1-0:12.1.1-1.x86_64\n", "")
    params = {"repo_id": "cuda-rhel9-x86_64"}  # as host_assess adds it on EL
    check = judge(h, ["repo"], params=params)["by_id"]["repo.source"]
    assert check["status"] == "pass", check
    asked = [a for a in h.ran if a[:1] == ["dnf"]]
    assert asked and "repoquery" in asked[0] and "--available" not in asked[0], asked
