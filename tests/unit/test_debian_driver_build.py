"""Issue 20 item 7: Debian 11's path needs NVIDIA's nvidia-driver-cuda at the stack's branch, which
no public listing confirms for 535; the repository is asked (apt-cache policy, after the repository
is set up) and the run stops with the reason when it carries no such build."""

from __future__ import annotations

import probe_fakes as pf
from probe_fakes import FakeHost, judge, stack

URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian11/x86_64"
SOURCES = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {URL}/ /\n"


def policy(*versions: str) -> str:
    """`apt-cache policy nvidia-driver-cuda` as apt prints it (newest first)."""
    lines = ["nvidia-driver-cuda:", "  Installed: (none)",
             f"  Candidate: {versions[0] if versions else '(none)'}", "  Version table:"]
    for v in versions:
        lines += [f"     {v} 500", f"        500 {URL}  Packages"]
    return "\n".join(lines) + "\n"


def host(*versions: str) -> FakeHost:
    h = FakeHost(pf.DEBIAN_11).gpus()
    h.files["/etc/apt/sources.list.d/cuda-debian11-x86_64.list"] = SOURCES
    h.commands["apt-cache policy"] = (0, policy(*versions), "")
    return h


def test_a_repository_carrying_the_branch_passes() -> None:
    check = judge(host("550.54.15-1", "535.104.05-1"), ["repo"])["by_id"]["repo.driver_build"]
    assert check["status"] == "pass", check
    assert check["actual"] == "535.104.05 550.54.15"


def test_a_repository_without_the_branch_stops_with_the_reason() -> None:
    check = judge(host("550.54.15-1", "525.147.05-1"), ["repo"])["by_id"]["repo.driver_build"]
    assert check["status"] == "fail", check
    assert check["message"].startswith(
        "NVIDIA's repository carries no branch 535 build of nvidia-driver-cuda "
        "(it has: 525.147.05 550.54.15)"
    )
    pinned = stack(**{"driver.version": "535.54.03"})
    check = judge(host("535.104.05-1"), ["repo"], pinned)["by_id"]["repo.driver_build"]
    assert check["status"] == "fail" and "no 535.54.03 build" in check["message"], check


def test_before_the_repository_is_set_up_nothing_is_judged() -> None:
    h = FakeHost(pf.DEBIAN_11).gpus()
    check = judge(h, ["repo"])["by_id"]["repo.driver_build"]
    assert check["status"] == "skip", check


def test_the_default_branch_on_a_debian11_repository_without_it_stops_with_the_reason() -> None:
    """Issue 20: the default branch is 580; no public listing shows a 580 nvidia-driver-cuda in
    NVIDIA's debian11 repository (the lab models 535 and 550 there), so on such a repository the
    default stack stops at repo.driver_build, naming what it has (README: Debian 11 runs with
    driver.branch "535")."""
    from provisioner import stack as stk  # noqa: PLC0415

    default = stk.resolve(None).to_extravars()["gpu_stack_driver_branch"]
    assert default == "580"
    desired = stack(**{"driver.branch": default})
    check = judge(host("550.54.14-1", "535.104.05-1"), ["repo"], desired)["by_id"][
        "repo.driver_build"]
    assert check["status"] == "fail", check
    assert check["message"].startswith(
        "NVIDIA's repository carries no branch 580 build of nvidia-driver-cuda "
        "(it has: 535.104.05 550.54.14)"
    )
    check = judge(host("580.95.05-1", "535.104.05-1"), ["repo"], desired)["by_id"][
        "repo.driver_build"]
    assert check["status"] == "pass", check
