# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Collect, in one pass on the host, everything the checks judge (the probe's I/O half).

Runs on the target (Python 3.8+): standard library only. All I/O goes through a `HostIO` object, so
tests feed recorded command outputs and a fake file system; the module supplies the real one.
Sections are independent; `collect(sections, params, io)` returns a plain dict of raw facts.
"""

from __future__ import absolute_import, annotations, division, print_function

import json
import os
import pwd
import re
import time
from typing import Any, Callable

from ansible_collections.provision.gpu.plugins.module_utils import dcgm as dcgm_parse
from ansible_collections.provision.gpu.plugins.module_utils import gpu as gpu_facts
from ansible_collections.provision.gpu.plugins.module_utils import health_parsers as hp
from ansible_collections.provision.gpu.plugins.module_utils import parsers as p
from ansible_collections.provision.gpu.plugins.module_utils.platforms import Platform

# Installed packages worth reporting: the rest of the package database is not sent back.
PACKAGE_RE = re.compile(
    r"^(nvidia|libnvidia|cuda|libcuda|libcudnn|cudnn|libnccl|linux-headers|linux-modules-nvidia|"
    r"linux-objects-nvidia|linux-signatures-nvidia|kernel-devel|kernel-headers|dkms|"
    r"xserver-xorg-video-nvidia|firmware-nvidia|kmod-nvidia|libxnvctrl|libgl1-nvidia|libglx-nvidia|"
    r"libegl-nvidia|python3[0-9.]*-venv|pciutils|epel-release|dnf-plugins-core|"
    r"python3-dnf-plugin-versionlock|datacenter-gpu-manager)"
)
CUDA_LIB_RE = re.compile(r"(libcudart|libcudnn|libnccl|libcublas)[^ ]*")
TORCH_PROBE = r"""
import json, sys
out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as exc:
    out["error"] = "import torch failed: %s" % exc
    print(json.dumps(out)); sys.exit(0)
out["torch_version"] = torch.__version__
out["torch_cuda"] = torch.version.cuda
try:
    out["cuda_available"] = bool(torch.cuda.is_available())
except Exception:
    out["cuda_available"] = False
try:
    nccl = torch.cuda.nccl.version() if out["cuda_available"] else None
    out["nccl_version"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else nccl
except Exception:
    out["nccl_version"] = None
try:
    out["cudnn_version"] = torch.backends.cudnn.version()
except Exception:
    out["cudnn_version"] = None
for extra in ("torchvision", "torchaudio"):
    try:
        out[extra] = __import__(extra).__version__
    except Exception:
        out[extra] = None
print(json.dumps(out))
"""
LOGIN_SHELL = (
    'echo "PATH=$PATH"; echo "LD=$LD_LIBRARY_PATH"; echo "NVCC=$(command -v nvcc)"; '
    'for d in $(echo "$PATH:$LD_LIBRARY_PATH" | tr ":" " "); do '
    'case "$d" in /usr/local/cuda*) [ -d "$d" ] || echo "MISSING=$d" ;; esac; done; '
    "nvcc --version 2>/dev/null | grep release"
)
PROFILE_FILES_GLOB_DIR = "/etc/profile.d"
# Files that set a login shell's environment besides profile.d (foreign CUDA paths are looked for
# there too; only profile.d and /etc/environment are rewritten, the rest are named for the admin).
OTHER_ENV_FILES = (
    "/etc/environment",
    "/etc/profile",
    "/etc/bash.bashrc",
)
# The login and interactive shell files of the users the site names (gpu_stack_env_users; default
# the SSH user and root): read for another CUDA's paths, named by file and line, never edited.
USER_SHELL_FILES = (".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zprofile")
LOCK_FILES = {
    "apt": (
        "/var/lib/dpkg/lock-frontend",
        "/var/lib/dpkg/lock",
        "/var/lib/apt/lists/lock",
        "/var/cache/apt/archives/lock",
    ),
    "rpm": ("/var/lib/rpm/.rpm.lock",),
}
UNITS = ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service")
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/provision.conf"
PIN_FILE = "/etc/apt/preferences.d/provision-nvidia-driver"


class HostIO(object):
    """The host, as the probe sees it. The module's implementation runs commands with
    AnsibleModule.run_command; tests replace every method."""

    def run(
        self, argv: list[str], timeout: float | None = None, env: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        raise NotImplementedError

    def read(self, path: str) -> str | None:
        try:
            with open(path, "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return None

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def home(self, user: str) -> str | None:
        """The user's home directory (the passwd database), None for an unknown user."""
        try:
            return pwd.getpwnam(user).pw_dir
        except KeyError:
            return None

    def free_bytes(self, path: str) -> int | None:
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def inode(self, path: str) -> tuple[int, int, int] | None:
        """(major, minor, inode) of a file, as /proc/locks names it."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino

    def walk_files(self, top: str, pattern: str) -> list[str]:
        out: list[str] = []
        regex = re.compile(pattern)
        for root, _dirs, files in os.walk(top):
            out.extend(os.path.join(root, f) for f in files if regex.match(f))
        return sorted(out)

    def which(self, name: str) -> str | None:
        for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
            path = os.path.join(d, name)
            if os.access(path, os.X_OK):
                return path
        return None

    def uname(self) -> tuple[str, str]:
        u = os.uname()
        return u.release, u.machine

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def now(self) -> float:
        return time.monotonic()


# ------------------------------------------------------------------------------------ sections


def os_section(io: HostIO, params: dict[str, Any]) -> dict[str, Any]:
    kernel, arch = io.uname()
    release = p.parse_os_release(io.read("/etc/os-release") or io.read("/usr/lib/os-release") or "")
    container = (io.read("/run/systemd/container") or "").strip()
    if not container and io.exists("/.dockerenv"):
        container = "docker"
    return {"os_release": release, "kernel": kernel, "arch": arch, "container": container}


def disk_section(io: HostIO, params: dict[str, Any]) -> dict[str, Any]:
    path = params.get("disk_path") or "/"
    probe = path if io.exists(path) else "/"
    free = io.free_bytes(probe)
    return {"path": path, "probed": probe, "free_bytes": free}


def packages_section(io: HostIO, plat: Platform) -> dict[str, Any]:
    if plat.apt:
        rc, out, _err = io.run(
            ["dpkg-query", "-W", "-f=" + p.DPKG_QUERY_FORMAT.replace("\\n", "\n")]
        )
        pkgs = p.parse_dpkg_query(out) if rc in (0, 1) else {}
        holds = sorted(n for n, v in pkgs.items() if v["held"])
    elif plat.family == "redhat":
        rc, out, _err = io.run(
            ["rpm", "-qa", "--queryformat", p.RPM_QUERY_FORMAT.replace("\\n", "\n")]
        )
        pkgs = p.parse_rpm_qa(out) if rc == 0 else {}
        locks = p.parse_versionlock(io.read("/etc/dnf/plugins/versionlock.list") or "")
        holds = sorted(locks)
        for name in holds:
            if name in pkgs:
                pkgs[name]["held"] = True
    else:
        return {"installed": {}, "held": [], "error": "no package manager known for this OS"}
    wanted = {n: v for n, v in pkgs.items() if PACKAGE_RE.match(n)}
    # an install cut short (lost SSH connection, Ctrl-C, a reboot): dpkg's journal has entries or
    # packages are half-configured; apt then refuses to work until `dpkg --configure -a`
    broken = sorted(n for n, v in pkgs.items() if v.get("broken") or v.get("reinstall"))
    interrupted = plat.apt and (bool(io.listdir("/var/lib/dpkg/updates")) or bool(broken))
    return {
        "installed": wanted,
        "held": [h for h in holds if PACKAGE_RE.match(h)],
        "interrupted": interrupted,
        "broken": broken,
        # name -> the version dpkg was unpacking (what a reinstall must put back)
        "reinstall": {n: v["version"] for n, v in sorted(pkgs.items()) if v.get("reinstall")},
    }


def apt_policy_section(io: HostIO, names: list[str]) -> dict[str, Any]:
    names = [n for n in names if n]
    if not names:
        return {}
    rc, out, _err = io.run(["apt-cache", "policy", *sorted(set(names))])
    policy: dict[str, Any] = p.parse_apt_policy(out) if rc == 0 else {}
    # no package index yet (a fresh image before its first `apt-get update`): "no candidate"
    # then means "not known yet", not "not published"
    lists = [f for f in io.listdir("/var/lib/apt/lists") if f.endswith("Packages")]
    policy["__indexes__"] = len(lists)
    return policy


KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"  # what cuda-keyring installs
OLD_KEY = "7FA2AF80"  # the repository key NVIDIA rotated out in April 2022


def sources_section(io: HostIO, plat: Platform) -> dict[str, Any]:
    files: dict[str, str] = {}
    if plat.apt:
        candidates = ["/etc/apt/sources.list"] + [
            "/etc/apt/sources.list.d/" + f
            for f in io.listdir("/etc/apt/sources.list.d")
            if f.endswith((".list", ".sources"))
        ]
        key_data = io.read_bytes(KEYRING)
        keyring = key_data is not None
        fingerprints = p.openpgp_fingerprints(key_data) if key_data else []
        apt_key = io.which("apt-key") is not None and io.which("gpg") is not None
        # NVIDIA's rotated key (7fa2af80, 2022) in apt's trusted keyrings: `apt-key del` removes it
        old_key = False
        trusted = ["/etc/apt/trusted.gpg"] + [
            "/etc/apt/trusted.gpg.d/" + f
            for f in io.listdir("/etc/apt/trusted.gpg.d")
            if f.endswith(".gpg")
        ]
        for path in trusted:
            data = io.read_bytes(path)
            if data and any(f.endswith(OLD_KEY) for f in p.openpgp_fingerprints(data)):
                old_key = True
    else:
        candidates = [
            "/etc/yum.repos.d/" + f for f in io.listdir("/etc/yum.repos.d") if f.endswith(".repo")
        ]
        keyring = apt_key = old_key = False
        fingerprints = []
    for path in candidates:
        text = io.read(path)
        if text is not None:
            files[path] = text
    return {
        "files": files,
        "keyring": keyring,
        "keyring_fingerprints": fingerprints,
        "apt_key": apt_key,
        "old_key": old_key,
    }


def dnf_available_section(io: HostIO, repo_id: str, package: str) -> dict[str, Any]:
    rc, out, err = io.run(
        # repoquery, not `list --available`: that one hides the installed build, so a rerun
        # against a mirror carrying only that build found nothing in the repository
        ["dnf", "-q", "--repo", repo_id, "repoquery", package],
        timeout=300,
    )
    return {"rc": rc, "stdout": out[-4000:], "stderr": err[-2000:]}


def alternatives_section(io: HostIO, params: dict[str, Any]) -> dict[str, Any]:
    cuda = str(params["cuda_version"])
    major = cuda.split(".", maxsplit=1)[0]
    tool = io.which("update-alternatives") or io.which("alternatives") or "update-alternatives"
    out: dict[str, Any] = {}
    for name in ("cuda", "cuda-%s" % major):
        rc, text, _err = io.run([tool, "--display", name])
        out[name] = p.parse_alternatives_display(text if rc == 0 else "")
    link = io.readlink("/usr/local/cuda")
    out["usr_local_cuda"] = io.realpath("/usr/local/cuda") if link is not None else None
    prefix = "/usr/local/cuda-%s" % cuda
    nvcc = prefix + "/bin/nvcc"
    if io.exists(nvcc):
        rc, text, _err = io.run([nvcc, "--version"])
        out["nvcc_release"], out["nvcc_version"] = p.parse_nvcc_version(text if rc == 0 else "")
    else:
        out["nvcc_release"], out["nvcc_version"] = None, None
    out["prefix_exists"] = io.isdir(prefix)
    return out


def env_section(io: HostIO, params: dict[str, Any]) -> dict[str, Any]:
    managed = params.get("env_profile_file") or "/etc/profile.d/cuda.sh"
    files: dict[str, str] = {}
    for name in io.listdir(PROFILE_FILES_GLOB_DIR):
        path = PROFILE_FILES_GLOB_DIR + "/" + name
        if name.endswith(".sh"):
            text = io.read(path)
            if text is not None and ("cuda" in text or path == managed):
                files[path] = text
    for path in OTHER_ENV_FILES:
        text = io.read(path)
        if text is not None and "cuda" in text:
            files[path] = text
    user_files: dict[str, str] = {}  # path -> text, of the named users' shell files
    owners: dict[str, str] = {}  # path -> user
    for user in params.get("env_users") or ["root"]:
        home = io.home(str(user))
        if not home:
            continue
        for name in USER_SHELL_FILES:
            path = home.rstrip("/") + "/" + name
            text = io.read(path)
            if text is not None and "cuda" in text and path not in files:
                user_files[path] = text
                owners.setdefault(path, str(user))
    ldconf: dict[str, str] = {}
    for name in io.listdir("/etc/ld.so.conf.d"):
        text = io.read("/etc/ld.so.conf.d/" + name)
        if text is not None and "cuda" in text:
            ldconf["/etc/ld.so.conf.d/" + name] = text
    rc, out, _err = io.run(
        [
            "env",
            "-i",
            "HOME=/root",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "bash",
            "-lc",
            LOGIN_SHELL,
        ]
    )
    shell = p.parse_login_shell(out)
    rc, out, _err = io.run(["ldconfig", "-p"])
    libs = sorted({m.group(0) for m in CUDA_LIB_RE.finditer(out)}) if rc == 0 else []
    resolved = {
        name: path
        for name, path in p.parse_ldconfig_p(out if rc == 0 else "").items()
        if CUDA_LIB_RE.match(name)
    }
    return {
        "files": files,
        "user_files": user_files,
        "user_file_owners": owners,
        "ldconfig_resolved": resolved,
        "ldconf": ldconf,
        "managed_profile": managed,
        "shell": shell,
        "ldconfig": libs,
    }


def kernel_section(io: HostIO, plat: Platform) -> dict[str, Any]:
    modules = p.parse_proc_modules(io.read("/proc/modules") or "")
    kernels = [k for k in io.listdir("/lib/modules") if io.isdir("/lib/modules/" + k)]
    ko: dict[str, list[str]] = {}
    for k in kernels:
        ko[k] = io.walk_files("/lib/modules/" + k, r"^nvidia\.ko")
    default = ""
    if plat.family == "redhat":
        rc, out, _err = io.run(["grubby", "--default-kernel"])
        default = out.strip() if rc == 0 else ""
    else:
        default = io.readlink("/boot/vmlinuz") or ""
    default = os.path.basename(default)
    if default.startswith("vmlinuz-"):
        default = default[len("vmlinuz-") :]
    return {
        "loaded": [m for m in modules if m.startswith(("nvidia", "nouveau"))],
        "proc_modules_readable": io.exists("/proc/modules"),
        "nvidia_version": io.read("/proc/driver/nvidia/version") or "",
        "kernels": kernels,
        "nvidia_ko": ko,
        "default_kernel": default,
        "headers_dir": io.isdir(plat.headers_dir()),
        "blacklist": io.read("/etc/modprobe.d/blacklist-nouveau.conf"),
        "pin_file": io.read(PIN_FILE) if plat.apt else None,
    }


def secure_boot_section(io: HostIO) -> dict[str, Any]:
    state = None
    source = "none"
    if io.which("mokutil"):
        rc, out, err = io.run(["mokutil", "--sb-state"])
        state = p.parse_mokutil_sb_state(rc, out + err)
        source = "mokutil"
    if state is None:
        efi = p.parse_secure_boot_efivar(io.read_bytes(p.SECURE_BOOT_EFIVAR))
        if efi is not None:
            state, source = efi, "efivar"
    return {"state": state or "unsupported", "source": source}


def units_section(io: HostIO) -> dict[str, Any]:
    rc, out, _err = io.run(
        ["systemctl", "show", "--property=" + ",".join(p.SYSTEMCTL_PROPERTIES), *UNITS]
    )
    units = p.parse_systemctl_show(out) if rc == 0 else {}
    result: dict[str, Any] = {}
    for unit in UNITS:
        props = units.get(unit, {})
        fragment = props.get("FragmentPath") or ""
        unit_text = io.read(fragment) if fragment else None
        packaged = (p.parse_unit_file(unit_text or "").get("Service") or {}).get("ExecStart") or []
        result[unit.replace(".service", "")] = {
            "packaged_exec_start": p.exec_start_argv(packaged[-1]) if packaged else [],
            "load": props.get("LoadState", "not-found"),
            "active": props.get("ActiveState", "inactive"),
            "enabled": props.get("UnitFileState", ""),
            "exec_start": p.exec_start_argv(props.get("ExecStart", "")),
            "dropins": [d for d in (props.get("DropInPaths") or "").split() if d],
            "fragment": fragment,
        }
    result["persistenced_dropin"] = io.read(PERSISTENCED_DROPIN)
    return result


def python_section(io: HostIO, params: dict[str, Any]) -> dict[str, Any]:
    python = params.get("pytorch_python") or "python3"
    rc, out, err = io.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    return {
        "interpreter": python,
        "version": out.strip() if rc == 0 else None,
        "error": None if rc == 0 else (err.strip() or "exit %d" % rc),
    }


def torch_section(io: HostIO, params: dict[str, Any]) -> dict[str, Any]:
    venv = params.get("pytorch_venv") or "/opt/pytorch"
    python = venv + "/bin/python"
    out: dict[str, Any] = {
        "venv": venv,
        "venv_exists": io.exists(python),
        "pip_exists": io.exists(venv + "/bin/pip"),
    }
    if not out["venv_exists"]:
        out["probe"] = {}
        return out
    _rc, text, err = io.run(
        [python, "-c", TORCH_PROBE], timeout=300, env={"PYTHONDONTWRITEBYTECODE": "1"}
    )
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    try:
        out["probe"] = json.loads(lines[-1]) if lines else {"error": (err or text).strip()[-300:]}
    except ValueError:
        out["probe"] = {"error": "unreadable torch probe output"}
    return out


def _kernel_log(io: HostIO) -> tuple[str, str]:
    """(source, NVRM lines) of the kernel log since boot: the journal when it has kernel entries
    (it keeps what the ring buffer drops), else dmesg; never clears anything (no dmesg -c)."""
    if io.which("journalctl"):
        rc, out, _err = io.run(
            ["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"], timeout=30
        )
        if rc == 0 and out.strip() and "-- No entries --" not in out:
            return "journalctl", "\n".join(ln for ln in out.splitlines() if "NVRM" in ln)
    if io.which("dmesg"):
        rc, out, _err = io.run(["dmesg"], timeout=30)
        if rc == 0:
            return "dmesg", "\n".join(ln for ln in out.splitlines() if "NVRM" in ln)
    return "unavailable", ""


def health_section(io: HostIO, gpu: dict[str, Any]) -> dict[str, Any]:
    """The quick health tier's facts (issue 19), read-only and passive: nvidia-smi -q (ECC, row
    remapper, retired pages, PCIe link, clock event reasons, fabric), the kernel log's NVRM Xid
    lines, /proc/driver/nvidia/version and, on NVLink systems, nvidia-smi nvlink -s and -e.
    Never -pm, -r, -rac or any counter reset."""
    env = {"LC_ALL": "C"}
    out: dict[str, Any] = {"gpus": [], "smi_q_rc": None, "nvlink": None, "nvlink_errors": None}
    if gpu.get("state") == "ok":
        rc, text, _err = io.run(["nvidia-smi", "-q"], env=env)
        out["smi_q_rc"] = rc
        out["gpus"] = hp.parse_smi_q_health(text) if rc == 0 else []
        if (gpu.get("topology") or {}).get("interconnect") == "nvlink":
            rc, text, _err = io.run(["nvidia-smi", "nvlink", "-s"], env=env)
            out["nvlink"] = hp.parse_nvlink_status(text) if rc == 0 else None
            rc, text, _err = io.run(["nvidia-smi", "nvlink", "-e"], env=env)
            out["nvlink_errors"] = hp.parse_nvlink_errors(text) if rc == 0 else None
    source, lines = _kernel_log(io)
    out["kernel_log"] = source
    out["xid"] = hp.parse_xid_lines(lines)
    out["proc_version"] = hp.parse_proc_version(io.read("/proc/driver/nvidia/version") or "")
    return out


# ------------------------------------------------------------------------ first boot and locks


def dcgm_section(io: HostIO, params: dict[str, Any]) -> dict[str, Any]:
    """The deep tier: `dcgmi diag -r N --json` under a hard timeout (only when requested)."""
    level = int(params.get("dcgm_level") or 1)
    timeout = int(params.get("dcgm_timeout_s") or 900)
    out: dict[str, Any] = {"requested": True, "level": level, "timeout_s": timeout}
    path = io.which("dcgmi")
    out["installed"] = path is not None
    out["path"] = path
    if path is None:
        return out
    start = io.now()
    rc, stdout, stderr = io.run([path, "diag", "-r", str(level), "--json"], timeout=timeout)
    out["seconds"] = round(io.now() - start, 1)
    # ModuleIO.run kills the command at the timeout and answers -9
    out["timed_out"] = rc == -9 and stderr.startswith("timed out")
    out["rc"] = rc
    out["stderr"] = stderr[-2000:]
    out["parsed"] = dcgm_parse.parse_diag(stdout)
    return out


def parse_proc_locks(text: str) -> list[dict[str, Any]]:
    """/proc/locks lines `1: POSIX  ADVISORY  WRITE 2448 08:01:1234 0 EOF` -> pid and file id."""
    out = []
    for line in text.splitlines():
        m = re.match(
            r"^\d+:\s+(?:->\s+)?(\S+)\s+\S+\s+(\S+)\s+(-?\d+)\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s",
            line,
        )
        if m:
            out.append(
                {
                    "kind": m.group(1),
                    "mode": m.group(2),
                    "pid": int(m.group(3)),
                    "dev": (int(m.group(4), 16), int(m.group(5), 16)),
                    "inode": int(m.group(6)),
                }
            )
    return out


def lock_holders(io: HostIO, family: str) -> list[dict[str, Any]]:
    """Processes holding the package manager's locks, from /proc/locks."""
    files = LOCK_FILES["apt" if family in ("ubuntu", "debian") else "rpm"]
    ids = {}
    for path in files:
        ident = io.inode(path)
        if ident is not None:
            ids[ident] = path
    holders = []
    for lock in parse_proc_locks(io.read("/proc/locks") or ""):
        key = (lock["dev"][0], lock["dev"][1], lock["inode"])
        if key in ids and lock["pid"] > 0:
            comm = (io.read("/proc/%d/comm" % lock["pid"]) or "?").strip()
            holders.append({"path": ids[key], "pid": lock["pid"], "name": comm})
    return holders


def wait_for_host(
    io: HostIO, family: str, timeout_s: float, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Wait (bounded) for cloud-init to finish and for the package manager's locks to be free.

    Returns {ok, waited_s, cloud_init, holders, message}. First boot of a cloud instance:
    cloud-init and unattended-upgrades hold the dpkg lock for minutes (Azure/aks-engine#1538;
    NVIDIA/holodeck#552 "block on cloud-init before beginning any setup").
    """
    start = io.now()
    result: dict[str, Any] = {
        "ok": True,
        "waited_s": 0.0,
        "cloud_init": None,
        "holders": [],
        "message": "",
    }
    if io.which("cloud-init"):
        rc, out, err = io.run(["cloud-init", "status", "--wait"], timeout=max(timeout_s, 1))
        if rc == -9:  # our timeout
            result.update(
                ok=False,
                cloud_init="running",
                message=(
                    "cloud-init still running after %d s (cloud-init status --wait); raise "
                    "gpu_stack_wait_timeout_s or look at /var/log/cloud-init.log" % timeout_s
                ),
            )
            result["waited_s"] = round(io.now() - start, 1)
            return result
        result["cloud_init"] = p.parse_cloud_init_status(rc, out + err)
    while True:
        holders = lock_holders(io, family)
        if not holders:
            break
        if io.now() - start >= timeout_s:
            h = holders[0]
            result.update(
                ok=False,
                holders=holders,
                message=(
                    "%s is held by process %d (%s) for more than %d s; wait for it to finish "
                    "(unattended-upgrades after first boot can take minutes) or raise "
                    "gpu_stack_wait_timeout_s" % (h["path"], h["pid"], h["name"], timeout_s)
                ),
            )
            break
        if log is not None:
            log(
                "waiting for %s (process %d, %s)"
                % (holders[0]["path"], holders[0]["pid"], holders[0]["name"])
            )
        io.sleep(2)
    result["waited_s"] = round(io.now() - start, 1)
    return result


# ------------------------------------------------------------------------------------ collect

SECTIONS = (
    "os",
    "disk",
    "packages",
    "policy",
    "sources",
    "alternatives",
    "env",
    "kernel",
    "secure_boot",
    "units",
    "gpu",
    "health",
    "python",
    "torch",
)


def collect(
    sections: list[str],
    params: dict[str, Any],
    io: HostIO,
    policy_names: Callable[[Platform], list[str]] | None = None,
) -> dict[str, Any]:
    """Raw facts of the requested sections (always with "os")."""
    facts: dict[str, Any] = {"os": os_section(io, params)}
    o = facts["os"]
    plat = Platform(o["os_release"], o["arch"], o["kernel"])
    wanted = set(sections)
    if "disk" in wanted:
        facts["disk"] = disk_section(io, params)
    if "packages" in wanted:
        facts["packages"] = packages_section(io, plat)
    if "policy" in wanted and plat.apt and policy_names is not None:
        facts["policy"] = apt_policy_section(io, policy_names(plat))
    if "sources" in wanted:
        facts["sources"] = sources_section(io, plat)
        if plat.family == "redhat" and params.get("repo_id"):
            facts["dnf_available"] = dnf_available_section(
                io, str(params["repo_id"]), plat.toolkit_package(str(params["cuda_version"]))
            )
    if "alternatives" in wanted:
        facts["alternatives"] = alternatives_section(io, params)
    if "env" in wanted:
        facts["env"] = env_section(io, params)
    if "kernel" in wanted:
        facts["kernel"] = kernel_section(io, plat)
    if "secure_boot" in wanted:
        facts["secure_boot"] = secure_boot_section(io)
    if "units" in wanted:
        facts["units"] = units_section(io)
    if "gpu" in wanted:
        facts["gpu"] = gpu_facts.gather(lambda argv: io.run(list(argv), env={"LC_ALL": "C"}))
    if "health" in wanted:
        if "gpu" not in facts:
            facts["gpu"] = gpu_facts.gather(lambda argv: io.run(list(argv), env={"LC_ALL": "C"}))
        facts["health"] = health_section(io, facts["gpu"])
    if "python" in wanted:
        facts["python"] = python_section(io, params)
    if "torch" in wanted:
        facts["torch"] = torch_section(io, params)
    if "dcgm" in wanted:
        facts["dcgm"] = dcgm_section(io, params)
    return facts
