"""CodeReady Builder on EL 9 (issue 20 item 5): crb on rebuilds, subscription-manager on entitled
RHEL, and on RHEL pay-as-you-go cloud images (RHUI, no entitlement) the image's own CRB repository
id enabled with `dnf config-manager --set-enabled`, or a stop that says how to find and enable it.
Repository ids as the cloud images ship them (sources in plugins/module_utils/crb.py)."""

from __future__ import annotations

import probe_fakes as pf
from ansible_collections.provision.gpu.plugins.module_utils import crb
from probe_fakes import FakeHost, judge

# RHEL 9's os-release: the RHEL 8.10 capture with 9.4's version fields (same keys and ID)
RHEL_9 = (
    pf.conftest.capture("os-release__rhel_8.10.txt")
    .replace("8.10", "9.4")
    .replace("Ootpa", "Plow")
    .replace('VERSION_ID="8', 'VERSION_ID="9')
)


def repo(*sections: tuple[str, int]) -> str:
    return "".join(
        f"[{rid}]\nname={rid}\nmirrorlist=https://rhui.example/{rid}\nenabled={on}\n\n"
        for rid, on in sections
    )


AWS = {"/etc/yum.repos.d/redhat-rhui.repo": repo(
    ("rhel-9-baseos-rhui-rpms", 1),
    ("rhel-9-appstream-rhui-rpms", 1),
    ("codeready-builder-for-rhel-9-rhui-rpms", 0),
)}
AZURE = {"/etc/yum.repos.d/rh-cloud-rhel9.repo": repo(
    ("rhel-9-for-x86_64-baseos-rhui-rpms", 1),
    ("rhel-9-for-x86_64-appstream-rhui-rpms", 1),
    ("codeready-builder-for-rhel-9-x86_64-eus-rhui-rpms", 0),
    ("codeready-builder-for-rhel-9-x86_64-rhui-rpms", 0),
)}
AZURE_EUS = {"/etc/yum.repos.d/rh-cloud-rhel9-eus.repo": repo(
    ("rhel-9-for-x86_64-baseos-eus-rhui-rpms", 1),
    ("codeready-builder-for-rhel-9-x86_64-rhui-rpms", 0),
    ("codeready-builder-for-rhel-9-x86_64-eus-rhui-rpms", 0),
)}
GOOGLE = {"/etc/yum.repos.d/rh-cloud.repo": repo(
    ("rhui-rhel-9-for-x86_64-baseos-rhui-rpms", 1),
    ("rhui-codeready-builder-for-rhel-9-aarch64-rhui-rpms", 0),
    ("rhui-codeready-builder-for-rhel-9-x86_64-rhui-rpms", 0),
)}


def test_repo_sections_read_ids_and_enabled_with_dnfs_default() -> None:
    text = "[a]\nname=a\nenabled=0\n[b]\nname=b\n[c]\nenabled = True\n"
    assert crb.repo_sections(text) == {"a": False, "b": True, "c": True}


def test_rebuilds_use_crb_and_entitled_rhel_uses_subscription_manager() -> None:
    rocky = crb.choose("rocky", "9", "x86_64", {})
    assert rocky["cmd"] == ["dnf", "config-manager", "--set-enabled", "crb"], rocky
    rhel = crb.choose("rhel", "9", "aarch64", {"/etc/yum.repos.d/redhat.repo": ""})
    assert rhel["how"] == "subscription-manager"
    assert rhel["cmd"] == [
        "subscription-manager", "repos", "--enable", "codeready-builder-for-rhel-9-aarch64-rpms"
    ]


def test_rhui_images_enable_their_own_crb_id_with_dnf_config_manager() -> None:
    for files, arch, want in (
        (AWS, "x86_64", "codeready-builder-for-rhel-9-rhui-rpms"),
        (AZURE, "x86_64", "codeready-builder-for-rhel-9-x86_64-rhui-rpms"),
        (AZURE_EUS, "x86_64", "codeready-builder-for-rhel-9-x86_64-eus-rhui-rpms"),
        (GOOGLE, "x86_64", "rhui-codeready-builder-for-rhel-9-x86_64-rhui-rpms"),
        (GOOGLE, "aarch64", "rhui-codeready-builder-for-rhel-9-aarch64-rhui-rpms"),
    ):
        got = crb.choose("rhel", "9", arch, files)
        assert got["how"] == "rhui" and got["id"] == want, (files, got)
        assert got["cmd"] == ["dnf", "config-manager", "--set-enabled", want]
        assert got["enabled"] is False and got["stop"] == ""
    on = {"/etc/yum.repos.d/redhat-rhui.repo": repo(("codeready-builder-for-rhel-9-rhui-rpms", 1))}
    assert crb.choose("rhel", "9", "x86_64", on)["enabled"] is True


def test_a_rhui_image_without_a_known_crb_id_stops_with_the_commands() -> None:
    files = {"/etc/yum.repos.d/redhat-rhui.repo": repo(
        ("rhel-9-baseos-rhui-rpms", 1),
        ("codeready-builder-for-rhel-8-rhui-rpms", 0),  # another major: not this host's
    )}
    got = crb.choose("rhel", "9", "x86_64", files)
    assert got["how"] == "stop" and got["cmd"] == [] and got["id"] == ""
    assert "RHEL 9 on RHUI" in got["stop"] and "rhel-9-baseos-rhui-rpms" in got["stop"]
    assert "`dnf repolist all | grep -i codeready`" in got["stop"]
    assert "`dnf config-manager --set-enabled <that id>`" in got["stop"]


def test_the_repo_plan_carries_the_crb_choice_of_the_host() -> None:
    h = FakeHost(RHEL_9, kernel="5.14.0-427.el9.x86_64").gpus()
    h.files.update(AZURE)
    plan = judge(h, ["repo"])["plan"]["repo"]
    assert plan["crb"]["cmd"] == [
        "dnf", "config-manager", "--set-enabled", "codeready-builder-for-rhel-9-x86_64-rhui-rpms"
    ], plan["crb"]
    rocky = judge(FakeHost(pf.ROCKY_9, kernel="5.14.0-427.el9.x86_64").gpus(), ["repo"])
    assert rocky["plan"]["repo"]["crb"]["id"] == "crb"
