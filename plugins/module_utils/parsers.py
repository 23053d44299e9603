# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Pure parsers of what the probe reads on a host (package databases, holds, units, alternatives,
apt policy, Secure Boot, the login shell, ...).

Runs on the target (Python 3.8+): standard library only, no I/O. Each parser is unit-tested on real
captured output where a public capture exists (tests/unit/fixtures/captures/SOURCES.md).
"""

from __future__ import absolute_import, annotations, division, print_function

import base64
import hashlib
import re
import shlex
from typing import Any

# ------------------------------------------------------------------------------------------ OS


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/os-release: KEY=value lines, values optionally quoted (os-release(5))."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value.strip("\"'")]
        out[key.strip()] = parts[0] if parts else ""
    return out


def parse_proc_modules(text: str) -> list[str]:
    """/proc/modules: the module name is the first field of each line."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ packages

# dpkg-query -W -f='${Package}|${Version}|${db:Status-Abbrev}\n': Status-Abbrev is three
# characters, desired/status/error: "ii " installed, "hi " installed and held, "rc " removed with
# config files left, "iU " unpacked (half-installed).
DPKG_QUERY_FORMAT = "${Package}|${Version}|${db:Status-Abbrev}\\n"


def parse_dpkg_query(text: str) -> dict[str, dict[str, Any]]:
    """name -> {version, installed, held, status}; only packages whose state is known."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        name, version, abbrev = parts[0].strip(), parts[1].strip(), parts[2]
        abbrev = (abbrev + "   ")[:3]
        out[name] = {
            "version": version,
            "installed": abbrev[1] == "i",
            "held": abbrev[0] == "h",
            "status": abbrev.strip() or "?",
            # "U" unpacked, "F" half-configured, "H" half-installed, "W"/"t" trigger states
            "broken": abbrev[1] in "UFHWt",
            # half-installed, or the reinst-required flag ("R"): an unpack cut short (a power cut
            # during `dpkg --unpack`); dpkg refuses to configure it ("package is in a very bad
            # inconsistent state; you should reinstall it") and only a reinstall repairs it
            "reinstall": abbrev[1] == "H" or abbrev[2] == "R",
        }
    return out


def parse_dpkg_l(text: str) -> dict[str, dict[str, Any]]:
    """`dpkg -l` listing lines ("ii  name:arch  version  arch  description") as parse_dpkg_query."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z])([a-zA-Z])[ R]?\s+(\S+)\s+(\S+)\s", line)
        if not m:
            continue
        name = m.group(3).split(":", 1)[0]
        out[name] = {
            "version": m.group(4),
            "installed": m.group(2) == "i",
            "held": m.group(1) == "h",
            "status": m.group(1) + m.group(2),
            "broken": m.group(2) in "UFHWt",
        }
    return out


# rpm -qa --queryformat '%{NAME}|%{EPOCHNUM}:%{VERSION}-%{RELEASE}|%{ARCH}\n'
RPM_QUERY_FORMAT = "%{NAME}|%{EPOCHNUM}:%{VERSION}-%{RELEASE}|%{ARCH}\\n"


def parse_rpm_qa(text: str) -> dict[str, dict[str, Any]]:
    """name -> {version: "V-R", epoch, installed: True, held: False} from RPM_QUERY_FORMAT lines."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        epoch, _, vr = parts[1].partition(":")
        if not vr:
            epoch, vr = "0", parts[1]
        out[parts[0]] = {
            "version": vr,
            "epoch": epoch or "0",
            "installed": True,
            "held": False,
            "status": "ii",
            "broken": False,
        }
    return out


VERSIONLOCK_RE = re.compile(r"^(?P<name>.+)-(?P<epoch>\d+):(?P<version>[^-]+)-(?P<release>.+)$")


def parse_versionlock(text: str) -> dict[str, str]:
    """`dnf versionlock list` output or /etc/dnf/plugins/versionlock.list: name -> "V-R" locked.

    Lines are `name-epoch:version-release.*` (e.g. `libcudnn8-devel-0:8.9.2.26-1.cuda12.1.*`,
    `nvidia-driver-3:535.154.05-1.el9.*`); the name itself may contain `-`, so it is everything
    before the last `-<epoch>:`. Comments, blank lines, excludes (`!`) and dnf's own status lines
    ("Last metadata expiration check ...") are ignored.
    """
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        m = VERSIONLOCK_RE.match(line)
        if not m:
            continue
        release = m.group("release")
        if release.endswith(".*"):
            release = release[:-2]
        out[m.group("name")] = "%s-%s" % (m.group("version"), release)
    return out


def parse_apt_policy(text: str) -> dict[str, dict[str, Any]]:
    """`apt-cache policy PKG...`: name -> {installed, candidate, versions: [{version, sources}]}.

    "(none)" becomes None. Versions are listed newest first as apt prints them; sources are the
    URL lines under each version (e.g. "500 http://host/path  Packages" -> "http://host/path").
    """
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    version: dict[str, Any] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^(\S+):\s*$", line)
        if m:
            current = {"installed": None, "candidate": None, "versions": []}
            out[m.group(1)] = current
            version = None
            continue
        if current is None:
            continue
        stripped = line.strip()
        m = re.match(r"^(Installed|Candidate):\s*(\S+)", stripped)
        if m:
            value = None if m.group(2) == "(none)" else m.group(2)
            current[m.group(1).lower()] = value
            continue
        if stripped.startswith(("Version table:", "Package pin:")):
            continue
        m = re.match(r"^(\*\*\*\s+)?(\S+)\s+(-?\d+)$", stripped)
        if m:
            version = {
                "version": m.group(2),
                "priority": int(m.group(3)),
                "sources": [],
                "installed": bool(m.group(1)),
            }
            current["versions"].append(version)
            continue
        m = re.match(r"^(-?\d+)\s+(\S+)", stripped)
        if m and version is not None:
            version["sources"].append(m.group(2))
    return out


# ------------------------------------------------------------------------------------- systemd

SYSTEMCTL_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "FragmentPath",
    "DropInPaths",
    "ExecStart",
)


def parse_systemctl_show(text: str) -> dict[str, dict[str, str]]:
    """`systemctl show -p Id,... UNIT...`: blocks separated by blank lines -> Id -> properties.

    A block without Id (a single-unit `show -p X`) is filed under "" .
    """
    out: dict[str, dict[str, str]] = {}
    block: dict[str, str] = {}

    def flush() -> None:
        if block:
            out[block.get("Id", "")] = dict(block)

    for line in text.splitlines():
        if not line.strip():
            flush()
            block = {}
            continue
        if line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        block[key.strip()] = value.strip()
    flush()
    return out


def exec_start_argv(value: str) -> list[str]:
    """The argv of a systemctl-show ExecStart value `{ path=... ; argv[]=a b c ; ... }` (or a plain
    command line, as in a unit file)."""
    m = re.search(r"argv\[\]=([^;]*)", value or "")
    text = m.group(1) if m else (value or "")
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def parse_unit_file(text: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file or drop-in: section -> key -> values in order (an empty assignment, as
    in `ExecStart=`, resets the list as systemd does)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        m = re.match(r"^\[(.+)\]$", line)
        if m:
            section = m.group(1)
            out.setdefault(section, {})
            continue
        if "=" not in line:
            continue
        key, _, value = line.partition("=")
        values = out.setdefault(section, {}).setdefault(key.strip(), [])
        if value.strip() == "":
            del values[:]
        else:
            values.append(value.strip())
    return out


# ---------------------------------------------------------------------------------- Secure Boot

# /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c: 4 attribute bytes then
# the value byte (1 = enabled).
SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def parse_mokutil_sb_state(rc: int, text: str) -> str | None:
    """`mokutil --sb-state` -> "enabled" | "disabled" | None (not EFI / not answered).

    Prints "SecureBoot enabled" / "SecureBoot disabled" (possibly with "Platform is in Setup Mode"),
    and on BIOS hosts "EFI variables are not supported on this system" with a non-zero exit.
    """
    if re.search(r"SecureBoot\s+enabled", text or "", re.IGNORECASE):
        return "enabled"
    if re.search(r"SecureBoot\s+disabled", text or "", re.IGNORECASE):
        return "disabled"
    return None


def parse_secure_boot_efivar(data: bytes | None) -> str | None:
    if data is None or len(data) < 5:
        return None
    return "enabled" if data[4] == 1 else "disabled"


# ---------------------------------------------------------------------------------- alternatives


def parse_alternatives_display(text: str) -> dict[str, Any]:
    """`update-alternatives --display NAME` (Debian) or `alternatives --display NAME` (EL).

    -> {mode: auto|manual|None, current: path|None, choices: {path: priority}}; an unknown name
    ("no alternatives for cuda") gives current None and no choices.
    """
    out: dict[str, Any] = {"mode": None, "current": None, "choices": {}}
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^\S+ - (?:status is )?(auto|manual)", line)
        if m:
            out["mode"] = m.group(1)
            continue
        m = re.match(r"^link currently points to (\S+)", line)
        if m:
            out["current"] = m.group(1)
            continue
        m = re.match(r"^(/\S+) - priority (-?\d+)", line)
        if m:
            out["choices"][m.group(1)] = int(m.group(2))
    return out


# ------------------------------------------------------------------------------------ toolchain

NVCC_RE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")


def parse_nvcc_version(text: str) -> tuple[str | None, str | None]:
    """`nvcc --version` -> (release "12.1", version "12.1.105")."""
    m = NVCC_RE.search(text or "")
    if m:
        return m.group(1), m.group(2)
    m = re.search(r"release (\d+\.\d+)", text or "")
    return (m.group(1), None) if m else (None, None)


def parse_login_shell(text: str) -> dict[str, Any]:
    """What the probe's login shell printed: PATH=, LD=, NVCC=, MISSING= lines and nvcc's output."""
    out: dict[str, Any] = {
        "path": "",
        "ld_library_path": "",
        "nvcc": "",
        "missing": [],
        "nvcc_release": None,
        "nvcc_version": None,
    }
    rest: list[str] = []
    for line in text.splitlines():
        if line.startswith("PATH="):
            out["path"] = line[5:]
        elif line.startswith("LD="):
            out["ld_library_path"] = line[3:]
        elif line.startswith("NVCC="):
            out["nvcc"] = line[5:]
        elif line.startswith("MISSING="):
            out["missing"].append(line[8:])
        else:
            rest.append(line)
    out["nvcc_release"], out["nvcc_version"] = parse_nvcc_version("\n".join(rest))
    return out


CUDA_DIR_RE = re.compile(r"/usr/local/cuda(?:-(\d+(?:\.\d+)?))?(?=/|:|\"|'|\s|$)")


def cuda_paths_in(text: str) -> list[tuple[int, str, list[str]]]:
    """Lines of a shell profile or /etc/environment that name CUDA directories:
    [(line number, line, [cuda version or "" for the unversioned /usr/local/cuda])]."""
    found: list[tuple[int, str, list[str]]] = []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not re.search(r"\b(PATH|LD_LIBRARY_PATH)\b", stripped):
            continue
        versions = [m.group(1) or "" for m in CUDA_DIR_RE.finditer(stripped)]
        if versions:
            found.append((n, line, versions))
    return found


LDCONFIG_ENTRY_RE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$")


def parse_ldconfig_p(text: str) -> dict[str, str]:
    """`ldconfig -p` -> {soname: path} of the entry the dynamic linker resolves: the first one
    listed for a 64-bit ABI (x86-64, AArch64), else the first listed (the cache is searched in
    the order ldconfig prints it)."""
    first: dict[str, str] = {}
    wide: dict[str, str] = {}
    for line in (text or "").splitlines():
        m = LDCONFIG_ENTRY_RE.match(line)
        if not m:
            continue
        name, flags, path = m.groups()
        first.setdefault(name, path)
        if "x86-64" in flags or "AArch64" in flags or "aarch64" in flags:
            wide.setdefault(name, path)
    first.update(wide)
    return first


LD_CONF_CUDA_RE = re.compile(r"^\s*/usr/local/cuda-(\d+(?:\.\d+)?)(?:/|$)")


def cuda_dirs_in_ld_conf(text: str) -> list[tuple[int, str, str]]:
    """Lines of an /etc/ld.so.conf.d file naming a versioned CUDA directory:
    [(line number, line, version)]; comments and other lines are left out."""
    found: list[tuple[int, str, str]] = []
    for n, line in enumerate((text or "").splitlines(), 1):
        m = LD_CONF_CUDA_RE.match(line)
        if m and not line.strip().startswith("#"):
            found.append((n, line, m.group(1)))
    return found


# ------------------------------------------------------------------------------ first boot/locks


def parse_cloud_init_status(rc: int, text: str) -> str:
    """`cloud-init status [--wait]` -> done | running | error | degraded | disabled | not-run |
    unknown. Since 24.4 `--wait` prints the dots and "status: done" on one line; exit 2 means done
    with recoverable errors (degraded), 1 an error."""
    m = re.search(r"status:\s*(\S+)", text or "")
    status = m.group(1) if m else ""
    if rc == 2 and status in ("done", ""):
        return "degraded"
    if status in ("done", "running", "error", "disabled", "degraded"):
        return status
    if status == "not":
        return "not-run"
    return status or "unknown"


def parse_dpkg_lock_holder(text: str) -> tuple[int, str] | None:
    """apt's "Could not get lock ... held by process 2448 (unattended-upgr)" -> (pid, name)."""
    m = re.search(r"held by process (\d+)(?: \(([^)]*)\))?", text or "")
    if not m:
        return None
    return int(m.group(1)), m.group(2) or ""


# ------------------------------------------------------------------------------------- OpenPGP
def _pgp_unarmor(data: bytes) -> bytes:
    """An ASCII-armored key block's binary packets (RFC 4880 section 6.2); binary input as is."""
    text = data.decode("ascii", "replace")
    if "-----BEGIN PGP" not in text:
        return data
    body: list[str] = []
    started = False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("-----BEGIN PGP"):
            started, body = True, []
            continue
        if s.startswith("-----END PGP"):
            break
        if not started:
            continue
        if ":" in s and not body:  # an armor header (Version: ...)
            continue
        if s.startswith("=") and len(s) == 5:  # the CRC24 checksum line
            continue
        body.append(s)
    try:
        return base64.b64decode("".join(body))
    except (ValueError, TypeError):
        return b""


def openpgp_fingerprints(data: bytes) -> list[str]:
    """The fingerprints (upper-case hex) of every primary key and subkey in an OpenPGP keyring or
    key block, binary or armored: v4 is SHA-1 over 0x99, a two-octet length and the public-key
    packet (RFC 4880 section 12.2), v6 SHA-256 over 0x9B and a four-octet length (RFC 9580
    section 5.5.4). Malformed input ends the walk; what was read so far is returned."""
    raw = _pgp_unarmor(data)
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        first = raw[i]
        if not first & 0x80:
            break
        if first & 0x40:  # new format
            tag = first & 0x3F
            if i + 1 >= n:
                break
            o1 = raw[i + 1]
            if o1 < 192:
                length, head = o1, 2
            elif o1 < 224:
                if i + 2 >= n:
                    break
                length, head = ((o1 - 192) << 8) + raw[i + 2] + 192, 3
            elif o1 == 255:
                if i + 5 >= n:
                    break
                length, head = int.from_bytes(raw[i + 2 : i + 6], "big"), 6
            else:  # partial body lengths never occur in key packets
                break
        else:  # old format
            tag = (first >> 2) & 0x0F
            ltype = first & 0x03
            if ltype == 3:
                break
            size = (1, 2, 4)[ltype]
            if i + size >= n:
                break
            length, head = int.from_bytes(raw[i + 1 : i + 1 + size], "big"), 1 + size
        body = raw[i + head : i + head + length]
        if len(body) < length:
            break
        if tag in (6, 14) and body:
            if body[0] == 4:
                digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body)  # noqa: S324
                out.append(digest.hexdigest().upper())
            elif body[0] == 6:
                digest = hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body)
                out.append(digest.hexdigest().upper())
        i += head + length
    return out
