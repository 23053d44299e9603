# ruff: noqa: E501  (captured outputs are kept verbatim)
"""The probe's parsers on real captured outputs (tests/unit/fixtures/captures; every file's public
source is in SOURCES.md there)."""

from __future__ import annotations

import pytest
from ansible_collections.provision.gpu.plugins.module_utils import collect as c
from ansible_collections.provision.gpu.plugins.module_utils import gpu
from ansible_collections.provision.gpu.plugins.module_utils import parsers as p
from ansible_collections.provision.gpu.plugins.module_utils.platforms import Platform
from conftest import capture


@pytest.mark.parametrize(
    ("name", "driver", "cuda"),
    [
        ("nvidia-smi__r535_8x_h100_sxm.txt", "535.183.01", "12.2"),
        ("nvidia-smi__r550_2x_h100_nvl_pcie.txt", None, None),
        ("nvidia-smi__r555_4x_a100_sxm4.txt", None, None),
        ("nvidia-smi__r565_8x_h100_sxm.txt", "565.57.01", "12.7"),
        ("nvidia-smi__r570_8x_h100_sxm_rhel9_p5.txt", "570.133.20", None),
        ("nvidia-smi__r590_1x_h100_sxm_vm.txt", "590.48.01", None),
        # R610: "KMD Version: ... CUDA UMD Version: ..." instead of "Driver Version / CUDA Version"
        ("nvidia-smi__r610_kmd_umd_geforce.txt", "610.57.04", "13.3"),
    ],
)
def test_table_header_gives_driver_and_cuda_versions(name: str, driver: str | None,
                                                      cuda: str | None) -> None:
    got_driver, got_cuda = gpu.parse_header(capture(name))
    assert got_driver is not None and got_cuda is not None, name
    if driver:
        assert got_driver == driver
    if cuda:
        assert got_cuda == cuda
    assert got_driver.count(".") == 2


def test_r610_gather_reports_the_kmd_version() -> None:
    table = capture("nvidia-smi__r610_kmd_umd_geforce.txt")

    def run(argv: list[str]) -> tuple[int, str, str]:
        if argv == ["nvidia-smi"]:
            return 0, table, ""
        return 1, "", ""

    facts = gpu.gather(run)
    assert facts["driver_version"] == "610.57.04"
    assert facts["cuda_driver_version"] == "13.3"


@pytest.mark.parametrize(
    ("name", "lib"),
    [
        ("nvidia-smi__nvml_mismatch_550.txt", "550.144"),
        ("nvidia-smi__nvml_mismatch_570.txt", "570.124"),
        ("nvidia-smi__nvml_mismatch_no_libversion.txt", None),
    ],
)
def test_driver_library_mismatch_is_a_reboot_state(name: str, lib: str | None) -> None:
    text = capture(name)

    def run(argv: list[str]) -> tuple[int, str, str]:
        if argv[0] == "nvidia-smi":
            return 18, text, ""
        return 127, "", ""

    facts = gpu.gather(run)
    assert facts["state"] == "version_mismatch"
    assert facts["nvml_library_version"] == lib


def test_no_driver_is_driver_not_loaded() -> None:
    text = capture("nvidia-smi__no_driver_communicate.txt")
    facts = gpu.gather(lambda argv: (9, text, "") if argv[0] == "nvidia-smi" else (127, "", ""))
    assert facts["state"] == "driver_not_loaded"


@pytest.mark.parametrize(
    ("name", "link", "gpus"),
    [
        ("nvidia-smi-topo-m__8x_h100_sxm_nv18.txt", "nvlink", 8),
        ("nvidia-smi-topo-m__8x_rtx4090_pcie_nics_tabs.txt", "pcie", 8),
        ("nvidia-smi-topo-m__2x_rtx5090_pcie_phb_tabs.txt", "pcie", 2),
        ("nvidia-smi-topo-m__2x_h100_pcie_nvlink_bridge_nv12.txt", "nvlink", 2),
    ],
)
def test_topology(name: str, link: str, gpus: int) -> None:
    topo = gpu.parse_topology(capture(name))
    assert topo["interconnect"] == link
    assert topo["gpus"] == gpus


@pytest.mark.parametrize(
    ("name", "state"),
    [
        ("nvidia-smi-q__r565_8x_h100_sxm_fabric_completed.txt", "Completed"),
        ("nvidia-smi-q__r590_h100_sxm_fabric_completed.txt", "Completed"),
        ("nvidia-smi-q__fabric_in_progress_h100_rhel9_grep.txt", "In Progress"),
        # N/A: not an NVSwitch fabric member (H100 NVL PCIe, L40S, and a 4x A100 SXM4 box)
        ("nvidia-smi-q__r550_2x_h100_nvl_pcie_fabric_na.txt", None),
        ("nvidia-smi-q__r595_l40s_pcie_fabric_na.txt", None),
        ("nvidia-smi-q__r555_4x_a100_sxm4_fabric_na.txt", None),
    ],
)
def test_fabric_state(name: str, state: str | None) -> None:
    assert gpu.parse_fabric(capture(name)) == state


def test_list_with_mig_children_counts_gpus_only() -> None:
    gpus = gpu.parse_list(capture("nvidia-smi-L__r590_h100_mig.txt"))
    assert [g["index"] for g in gpus] == [0]
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("name", "os_id", "version", "family", "supported"),
    [
        ("os-release__ubuntu_22.04.txt", "ubuntu", "22.04", "ubuntu", True),
        ("os-release__debian_11.txt", "debian", "11", "debian", True),
        ("os-release__debian_12.txt", "debian", "12", "debian", True),
        ("os-release__rocky_9.4.txt", "rocky", "9.4", "redhat", True),
        ("os-release__rocky_8.10.txt", "rocky", "8.10", "redhat", False),
        ("os-release__rhel_8.10.txt", "rhel", "8.10", "redhat", False),
    ],
)
def test_os_release(name: str, os_id: str, version: str, family: str, supported: bool) -> None:
    rel = p.parse_os_release(capture(name))
    assert rel["ID"] == os_id
    assert rel["VERSION_ID"] == version
    plat = Platform(rel, "x86_64", "5.15.0-91-generic")
    assert plat.family == family
    assert plat.support()[0] is supported
    if not supported:
        assert "ansible-core 2.17" in plat.support()[1]


def test_repo_directories_from_os_release() -> None:
    assert Platform(p.parse_os_release(capture("os-release__ubuntu_22.04.txt")), "x86_64", "k").repo_dir == "ubuntu2204"
    assert Platform(p.parse_os_release(capture("os-release__debian_11.txt")), "x86_64", "k").repo_dir == "debian11"
    # Rocky 9.4 uses NVIDIA's rhel9 directory (major only)
    rocky = Platform(p.parse_os_release(capture("os-release__rocky_9.4.txt")), "aarch64", "k")
    assert (rocky.repo_dir, rocky.arch_dir) == ("rhel9", "sbsa")


def test_dpkg_listing_of_canonical_server_driver() -> None:
    pk = p.parse_dpkg_l(capture("dpkg-l__ubuntu2404_nvidia_550_server_partial.txt"))
    assert pk["nvidia-compute-utils-550-server"]["version"] == "550.127.08-0ubuntu0.24.04.1"
    assert pk["linux-modules-nvidia-550-server-6.8.0-51-generic"]["installed"]
    plat = Platform({"ID": "ubuntu", "VERSION_ID": "24.04"}, "x86_64", "6.8.0-51-generic")
    for name in pk:
        assert plat.is_driver_package(name), name
        assert plat.canonical_flavour(name), name
    assert plat.package_branch("nvidia-firmware-550-server-550.127.08", "550.127.08-0ubuntu0.24.04.1") == "550"


def test_versionlock_names_keep_their_dashes() -> None:
    # the dnf versionlock line format name-epoch:version-release.* (NVIDIA/yum-packaging-* specs,
    # Epoch 3 for driver rpms); names such as libcudnn8-devel contain '-'
    text = (
        "# Added lock on Mon Jan  8 10:00:00 2024\n"
        "libcudnn8-0:8.9.2.26-1.cuda12.1.*\n"
        "libcudnn8-devel-0:8.9.2.26-1.cuda12.1.*\n"
        "libnccl-devel-0:2.18.3-1+cuda12.1.*\n"
        "nvidia-driver-3:535.154.05-1.el9.*\n"
        "kmod-nvidia-latest-dkms-3:535.154.05-1.el9.*\n"
        "!nvidia-driver-3:550.54.15-1.el9.*\n"
    )
    locks = p.parse_versionlock(text)
    assert locks == {
        "libcudnn8": "8.9.2.26-1.cuda12.1",
        "libcudnn8-devel": "8.9.2.26-1.cuda12.1",
        "libnccl-devel": "2.18.3-1+cuda12.1",
        "nvidia-driver": "535.154.05-1.el9",
        "kmod-nvidia-latest-dkms": "535.154.05-1.el9",
    }


@pytest.mark.parametrize(
    ("name", "state"),
    [
        ("mokutil-sb-state__enabled.txt", "enabled"),
        ("mokutil-sb-state__enabled_rhel8_nvidia_doc.txt", "enabled"),
        ("mokutil-sb-state__disabled.txt", "disabled"),
        ("mokutil-sb-state__efi_not_supported.txt", None),
    ],
)
def test_mokutil(name: str, state: str | None) -> None:
    assert p.parse_mokutil_sb_state(0 if state else 1, capture(name)) == state


def test_alternatives_el_display_format() -> None:
    alt = p.parse_alternatives_display(capture("alternatives-display__el_format_java_fixture.txt"))
    assert alt["mode"] == "auto"
    assert alt["current"] == "/usr/lib/jvm/jre-1.6.0-ibm.x86_64/bin/java"
    assert alt["choices"]["/usr/lib/jvm/jre-1.4.2-gcj/bin/java"] == 1420


def test_no_alternatives_is_empty() -> None:
    alt = p.parse_alternatives_display(capture("update-alternatives__no_alternatives_for_cuda.txt"))
    assert alt == {"mode": None, "current": None, "choices": {}}


def test_apt_policy_candidates_and_sources() -> None:
    pol = p.parse_apt_policy(capture("apt-cache-policy__candidate_none_multi_kali.txt"))
    assert pol["nvidia-331"]["candidate"] is None
    assert pol["nvidia-cg-toolkit"]["candidate"] == "3.1.0013-2"
    assert pol["nvidia-cg-toolkit"]["versions"][0]["sources"] == ["http://http.kali.org/kali/"]
    fm = p.parse_apt_policy(capture("apt-cache-policy__cuda-drivers-fabricmanager_nvidia_repo_partial.txt"))
    versions = [v["version"] for v in fm["cuda-drivers-fabricmanager"]["versions"]]
    assert versions[0] == "550.54.14-1" and "535.154.05-1" in versions
    assert any("ubuntu2204/x86_64" in s for s in fm["cuda-drivers-fabricmanager"]["versions"][0]["sources"])


def test_persistenced_unit_files() -> None:
    ubuntu = p.parse_unit_file(capture("unit-file__nvidia-persistenced_ubuntu_535_server_jammy.txt"))
    argv = p.exec_start_argv(ubuntu["Service"]["ExecStart"][-1])
    assert "--no-persistence-mode" in argv
    assert "Install" not in ubuntu  # static: started by udev, cannot be enabled
    assert ubuntu["Unit"]["StopWhenUnneeded"] == ["true"]
    el = p.parse_unit_file(capture("unit-file__nvidia-persistenced_el_nvidia_repo.txt"))
    assert "--no-persistence-mode" not in p.exec_start_argv(el["Service"]["ExecStart"][-1])
    assert el["Install"]["WantedBy"] == ["multi-user.target"]


def test_dropin_resets_exec_start() -> None:
    unit = p.parse_unit_file("[Service]\nExecStart=/a --x\n\n[Service]\nExecStart=\nExecStart=/b --y\n")
    assert unit["Service"]["ExecStart"] == ["/b --y"]


def test_systemctl_show_not_found() -> None:
    out = p.parse_systemctl_show(capture("systemctl-show__nvidia-persistenced_loadstate_not_found.txt"))
    assert out[""]["LoadState"] == "not-found"


@pytest.mark.parametrize(
    ("name", "rc", "status"),
    [
        ("cloud-init-status-wait__done_sameline_24.4plus_fixture.txt", 0, "done"),
        ("cloud-init-status-wait__done_newline_pre24.4_fixture.txt", 0, "done"),
        ("cloud-init-status-wait__error_sameline_24.4plus_fixture.txt", 1, "error"),
        ("cloud-init-status-long__running_stuck.txt", 0, "running"),
        ("cloud-init-status-long__done_docs.txt", 0, "done"),
    ],
)
def test_cloud_init_status(name: str, rc: int, status: str) -> None:
    assert p.parse_cloud_init_status(rc, capture(name)) == status


@pytest.mark.parametrize(
    ("name", "holder"),
    [
        ("apt-get__dpkg_lock_frontend_unattended-upgr.txt", (2448, "unattended-upgr")),
        ("apt-get__dpkg_lock_old_format_no_holder.txt", None),
    ],
)
def test_dpkg_lock_holder(name: str, holder: tuple[int, str] | None) -> None:
    assert p.parse_dpkg_lock_holder(capture(name)) == holder


def test_nvcc_versions() -> None:
    assert p.parse_nvcc_version(capture("nvcc-version__12.4.99_h20.txt"))[0] == "12.4"
    assert p.parse_nvcc_version(capture("nvcc-version__10.1_no_build_line.txt"))[0] == "10.1"


def test_proc_locks_name_the_holder() -> None:
    # /proc/locks format (proc(5)): "id: POSIX ADVISORY WRITE pid major:minor:inode start end"
    locks = c.parse_proc_locks("1: POSIX  ADVISORY  WRITE 2448 08:01:1234 0 EOF\n"
                               "2: FLOCK  ADVISORY  WRITE 77 00:19:55 0 EOF\n")
    assert locks[0]["pid"] == 2448 and locks[0]["inode"] == 1234 and locks[0]["dev"] == (8, 1)
    assert locks[1]["kind"] == "FLOCK"
