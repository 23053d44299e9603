"""Issue 20 item 11: the CUDA-path mistakes users really make after installing 12.1 (the popular
multi-GPU guides' `export PATH=/usr/local/cuda-11.3/bin...` lines), judged by the probe:
users' shell files named by file and line (never edited), what the dynamic linker really resolves
and other toolkits' directories in /etc/ld.so.conf.d, and a hand-replaced /usr/local/cuda link."""

from __future__ import annotations

from ansible_collections.provision.gpu.plugins.module_utils import parsers as p
from ansible_collections.provision.gpu.plugins.module_utils.evaluate import profile_script
from probe_fakes import FakeHost, judge, stack

GUIDE = (
    "export PATH=/usr/local/cuda-11.3/bin${PATH:+:${PATH}}\n"
    "export LD_LIBRARY_PATH=/usr/local/cuda-11.3/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}\n"
)
LDCONF_OURS = "# Managed by provision (cuda_env role): CUDA 12.1\n/usr/local/cuda-12.1/lib64\n"
# `ldconfig -p` as glibc prints it (header line, tab-indented entries, the cache's search order)
LDCONFIG_FOREIGN_FIRST = (
    "5 libs found in cache `/etc/ld.so.cache'\n"
    "\tlibnccl.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnccl.so.2\n"
    "\tlibcudnn.so.8 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcudnn.so.8\n"
    "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda-11.3/lib64/libcudart.so.12\n"
    "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda-12.1/lib64/libcudart.so.12\n"
    "\tlibcudart.so (libc6,x86-64) => /usr/local/cuda-12.1/lib64/libcudart.so\n"
)


def env_host() -> FakeHost:
    h = FakeHost()
    h.files["/etc/profile.d/cuda.sh"] = profile_script("12.1")
    h.files["/etc/ld.so.conf.d/cuda-12-1.conf"] = LDCONF_OURS
    h.dirs.update({"/usr/local/cuda-12.1", "/etc/ld.so.conf.d", "/home/admin", "/root"})
    h.homes["admin"] = "/home/admin"
    h.commands["env -i"] = (
        0,
        "PATH=/usr/local/cuda-12.1/bin:/usr/bin:/bin\nLD=/usr/local/cuda-12.1/lib64\n"
        "NVCC=/usr/local/cuda-12.1/bin/nvcc\nCuda compilation tools, release 12.1, V12.1.105\n",
        "",
    )
    h.commands["ldconfig -p"] = (0, LDCONFIG_FOREIGN_FIRST.replace(
        "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda-11.3/lib64/libcudart.so.12\n", ""), "")
    return h


def users(*names: str) -> dict:
    return stack(**{"env.users": list(names)})


def test_clean_host_passes_the_new_environment_checks() -> None:
    r = judge(env_host(), ["env"], users("admin", "root"))
    assert r["by_id"]["env.user_shell_files"]["status"] == "pass"
    assert r["by_id"]["env.ldconfig"]["status"] == "pass", r["by_id"]["env.ldconfig"]
    assert r["plan"]["env"]["neutralize_ldconf"] == []


def test_guide_lines_in_the_ssh_users_bashrc_are_named_by_file_and_line_and_never_edited() -> None:
    h = env_host()
    h.files["/home/admin/.bashrc"] = "alias ll='ls -l'\n" + GUIDE
    for check_mode in (True, False):
        r = judge(h, ["env"], users("admin", "root"), check_mode=check_mode)
        check = r["by_id"]["env.user_shell_files"]
        # drift in the run as in the check: the run cannot repair it and must not stop on it
        assert check["status"] == "drift", check
        assert "/home/admin/.bashrc:2 (user admin) sets /usr/local/cuda-11.3" in check["actual"]
        assert "/home/admin/.bashrc:3 (user admin)" in check["actual"]
        assert check["remediation"].startswith(
            "edit /home/admin/.bashrc line 2: delete `export PATH=/usr/local/cuda-11.3/bin"
        )
    plan = r["plan"]["env"]
    assert plan["neutralize"] == [] and plan["blocked"] == []  # never edited, never blocking
    # a user the site does not name is not read
    assert judge(h, ["env"], users("root"))["by_id"]["env.user_shell_files"]["status"] == "pass"


def test_roots_profile_is_read_through_the_users_list() -> None:
    h = env_host()
    h.files["/root/.profile"] = GUIDE
    r = judge(h, ["env"], users("root"))
    assert "/root/.profile:1 (user root)" in r["by_id"]["env.user_shell_files"]["actual"]
    assert r["by_id"]["env.foreign_paths"]["status"] == "pass"  # system files only


def test_ldconfig_is_judged_on_what_the_linker_resolves() -> None:
    h = env_host()
    h.commands["ldconfig -p"] = (0, LDCONFIG_FOREIGN_FIRST, "")
    h.files["/etc/ld.so.conf.d/00-cuda-11.3.conf"] = "/usr/local/cuda-11.3/lib64\n"
    for check_mode, status in ((True, "drift"), (False, "fail")):
        check = judge(h, ["env"], check_mode=check_mode)["by_id"]["env.ldconfig"]
        assert check["status"] == status, check
        assert (
            "resolved from another CUDA: libcudart.so.12 => "
            "/usr/local/cuda-11.3/lib64/libcudart.so.12" in check["actual"]
        )
        assert "/etc/ld.so.conf.d/00-cuda-11.3.conf:1 lists /usr/local/cuda-11.3/lib64" in (
            check["actual"]
        )
    (fix,) = judge(h, ["env"])["plan"]["env"]["neutralize_ldconf"]
    assert fix == {
        "path": "/etc/ld.so.conf.d/00-cuda-11.3.conf",
        "content": "# provision: other CUDA directory disabled (stack CUDA 12.1): "
        "/usr/local/cuda-11.3/lib64\n",
    }
    # the switch off: named for the admin, not rewritten
    off = judge(h, ["env"], stack(**{"env.neutralize_foreign": False}))
    assert off["plan"]["env"]["neutralize_ldconf"] == []
    assert "00-cuda-11.3.conf line 1" in off["by_id"]["env.ldconfig"]["remediation"]


def test_ldconfig_parser_takes_the_first_64_bit_entry_per_soname() -> None:
    got = p.parse_ldconfig_p(
        "\tlibcudart.so.12 (libc6) => /usr/lib32/libcudart.so.12\n" + LDCONFIG_FOREIGN_FIRST
    )
    assert got["libcudart.so.12"] == "/usr/local/cuda-11.3/lib64/libcudart.so.12"
    assert got["libnccl.so.2"] == "/lib/x86_64-linux-gnu/libnccl.so.2"
    # the major-version alias and the toolkit's own entries are not foreign
    assert p.cuda_dirs_in_ld_conf("/usr/local/cuda-12/targets/x86_64-linux/lib\n# x\n") == [
        (1, "/usr/local/cuda-12/targets/x86_64-linux/lib", "12")
    ]


DISPLAY_12_1 = (
    "cuda - manual mode\n  link best version is /usr/local/cuda-12.1\n"
    "  link currently points to /usr/local/cuda-12.1\n  link cuda is /usr/local/cuda\n"
    "/usr/local/cuda-12.1 - priority 100\n"
)


def test_hand_replaced_usr_local_cuda_is_set_again_through_alternatives() -> None:
    """`ln -sfn /usr/local/cuda-11.3 /usr/local/cuda`: the alternatives database still says 12.1,
    so a plan from it alone changed nothing and the run failed at the toolkit check forever."""
    h = FakeHost()
    h.dirs.update({"/usr/local/cuda-12.1", "/usr/local/cuda-11.3"})
    h.commands["/usr/bin/update-alternatives --display cuda"] = (0, DISPLAY_12_1, "")
    major = DISPLAY_12_1.replace("link cuda is", "link cuda-12 is").replace("cuda\n", "cuda-12\n")
    h.commands["/usr/bin/update-alternatives --display cuda-12"] = (0, major, "")
    h.links["/usr/local/cuda"] = "/etc/alternatives/cuda"
    h.links["/etc/alternatives/cuda"] = "/usr/local/cuda-12.1"
    plan = judge(h, ["cuda"])["plan"]["cuda"]["alternatives"]
    assert [a["set"] for a in plan] == [False, False]
    h.links["/usr/local/cuda"] = "/usr/local/cuda-11.3"  # ln -sfn by hand
    r = judge(h, ["cuda"], check_mode=True)
    assert r["by_id"]["cuda.symlink"]["status"] == "drift"
    plan = judge(h, ["cuda"])["plan"]["cuda"]["alternatives"]
    assert plan[0]["name"] == "cuda" and plan[0]["set"] is True
    assert plan[0]["path"] == "/usr/local/cuda-12.1"
