"""Issue 20 item 11: the CUDA-path mistakes users really make after a provisioned 12.1 (the popular
multi-GPU setup guides' `export PATH=/usr/local/cuda-11.3/bin...` and `LD_LIBRARY_PATH=...` lines),
made by hand on a converged Ubuntu 22.04 lab host:

* the two guide lines appended to the SSH user's ~/.bashrc (gpuadmin, the fleet's ansible_user):
  before, `provision check` passed naming nothing; now env.user_shell_files names the file and
  line in the check and after the repair, which never edits the file;
* an /etc/ld.so.conf.d entry for /usr/local/cuda-11.3/lib64 ordered before the 12.1 entry, with a
  library of the same SONAME (libcudart.so.12) in it: before, env.ldconfig passed although the
  dynamic linker resolved the runtime from there; now it is drift and the repair comments the entry
  out and reruns ldconfig;
* /usr/local/cuda replaced by hand (`ln -sfn /usr/local/cuda-11.3 /usr/local/cuda`): before, the
  repair changed nothing and failed at "Verify the toolkit" on every run; now it sets the link
  again through alternatives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab_shell import ok
from test_roles_helpers import fleet_args, provision_cli

GUIDE = (
    "export PATH=/usr/local/cuda-11.3/bin${PATH:+:${PATH}}\n"
    "export LD_LIBRARY_PATH=/usr/local/cuda-11.3/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}\n"
)
SKIP = ("--skip-tags", "pytorch,validation")  # OS-independent and not what this is about
CUDART = "/usr/local/cuda-12.1/targets/x86_64-linux/lib/libcudart.so.12"
MISTAKES = f"""
set -e
bashrc=$(getent passwd gpuadmin | cut -d: -f6)/.bashrc
lines=$(wc -l < "$bashrc")
cat >> "$bashrc" <<'GUIDE_END'
{GUIDE}GUIDE_END
echo "BASHRC=$bashrc:$((lines + 1))"
mkdir -p /usr/local/cuda-11.3/lib64 /usr/local/cuda-11.3/bin
cp "$(readlink -f {CUDART})" /usr/local/cuda-11.3/lib64/libcudart.so.12
echo /usr/local/cuda-11.3/lib64 > /etc/ld.so.conf.d/00-cuda-11.3.conf
ldconfig
ln -sfn /usr/local/cuda-11.3 /usr/local/cuda
"""


def checks_of(data: dict[str, Any], host: str) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in data["hosts"][host]["checks"]}


def resolved_cudart(fleet: Any, host: str) -> str:
    out = ok(fleet, host, "ldconfig -p | grep -F 'libcudart.so.12 ' | head -1")
    return out.split("=>")[-1].strip()


def test_cuda_path_mistakes_are_named_and_repaired(fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory(1, ["t4-1"])
    host = fleet.hosts[0].name
    proc, _ = provision_cli(tmp_path, *fleet_args(fleet), *SKIP, report="converge")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]

    out = ok(fleet, host, MISTAKES)
    bashrc, first = out.split("BASHRC=", 1)[1].split()[0].rsplit(":", 1)
    assert resolved_cudart(fleet, host).startswith("/usr/local/cuda-11.3/"), "mistake not made"
    bashrc_sum = ok(fleet, host, f"sha256sum {bashrc}")

    proc, data = provision_cli(tmp_path, "check", *fleet_args(fleet), report="check")
    assert proc.returncode == 5, (proc.stdout + proc.stderr)[-6000:]
    checks = checks_of(data, host)
    user = checks["env.user_shell_files"]
    assert user["status"] == "drift", user
    assert f"{bashrc}:{first} (user gpuadmin) sets /usr/local/cuda-11.3" in user["actual"], user
    assert f"{bashrc}:{int(first) + 1} (user gpuadmin)" in user["actual"], user
    assert user["remediation"].startswith(f"edit {bashrc} line {first}: delete `export PATH="), user
    ld = checks["env.ldconfig"]
    assert ld["status"] == "drift", ld
    assert "libcudart.so.12 => /usr/local/cuda-11.3/lib64/libcudart.so.12" in ld["actual"], ld
    assert "/etc/ld.so.conf.d/00-cuda-11.3.conf:1" in ld["actual"], ld
    assert checks["cuda.symlink"]["status"] == "drift", checks["cuda.symlink"]

    proc, data = provision_cli(tmp_path, *fleet_args(fleet), *SKIP, report="repair")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    checks = checks_of(data, host)
    for cid in ("env.ldconfig", "cuda.symlink", "cuda.nvcc", "env.path"):
        assert checks[cid]["status"] == "pass", checks[cid]
    assert checks["env.user_shell_files"]["status"] == "drift"  # named, never edited
    assert ok(fleet, host, "readlink /usr/local/cuda; readlink -f /usr/local/cuda").split() == [
        "/etc/alternatives/cuda",
        "/usr/local/cuda-12.1",
    ]
    assert resolved_cudart(fleet, host).startswith(("/usr/local/cuda-12.1/", "/usr/local/cuda/",
                                                    "/usr/local/cuda-12/"))
    assert ok(fleet, host, "cat /etc/ld.so.conf.d/00-cuda-11.3.conf").startswith(
        "# provision: other CUDA directory disabled (stack CUDA 12.1)"
    )
    assert ok(fleet, host, f"sha256sum {bashrc}") == bashrc_sum

    proc, data = provision_cli(tmp_path, "check", *fleet_args(fleet), report="check2")
    assert proc.returncode == 5, (proc.stdout + proc.stderr)[-6000:]
    bad = {k: v["status"] for k, v in checks_of(data, host).items()
           if v["status"] not in ("pass", "skip") and not k.startswith(("pytorch.", "validation."))}
    assert bad == {"env.user_shell_files": "drift"}, bad
