"""known_hosts read and written as OpenSSH does, for the paramiko preflight.

Reading (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT"): comma-separated host patterns with `*`/`?`
wildcards and `!` negation, `[host]:port` for other ports, hashed names (`|1|salt|hash`,
HMAC-SHA1), the markers `@cert-authority` and `@revoked`. A line that cannot be understood
(malformed, an unknown marker or key type, bad base64) is skipped, as OpenSSH skips it; it never
fails the other lines. `@revoked` keys are never accepted. `@cert-authority` lines are kept but
cannot be checked here (paramiko does not verify host certificates): a host known only through a
CA is reported as such.

Writing (`--accept-new-host-keys`): appended through a descriptor opened with O_NOFOLLOW (a
symlinked known_hosts is refused, not followed), the file's mode is left as it is (0600 only for a
new file), and a file that cannot be written is an error that says so.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

CA = "@cert-authority"
REVOKED = "@revoked"


class KnownHostsWriteError(OSError):
    """The known_hosts file cannot be appended to; the message says why and names it."""


@dataclass(frozen=True)
class Entry:
    line_no: int
    marker: str | None
    hosts: str  # the host field as written
    key_type: str
    key_b64: str

    @property
    def blob(self) -> bytes:
        return base64.b64decode(self.key_b64)

    def matches(self, name: str) -> bool:
        return host_matches(self.hosts, name)


@dataclass
class KnownHosts:
    path: Path
    entries: list[Entry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "line N: why"
    error: str | None = None  # the file could not be read

    def keys_for(self, name: str) -> list[Entry]:
        """Plain (unmarked) keys for `name`, minus revoked ones."""
        return [e for e in self.entries if e.marker is None and e.matches(name)
                and not self.is_revoked(e.key_type, e.blob)]

    def is_revoked(self, key_type: str, blob: bytes) -> bool:
        return any(e.marker == REVOKED and e.blob == blob for e in self.entries)

    def has_ca_for(self, name: str) -> bool:
        return any(e.marker == CA and e.matches(name) for e in self.entries)


def _hashed_match(pattern: str, name: str) -> bool:
    parts = pattern.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return False
    got = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(got, want)


def _wildcard(pattern: str) -> re.Pattern[str]:
    """OpenSSH patterns: `*` and `?` only (brackets are literal: `[host]:port`)."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.IGNORECASE)


def host_matches(hosts: str, name: str) -> bool:
    """OpenSSH's match_hostname: any positive pattern matches and no negated one does."""
    if hosts.startswith("|"):
        return _hashed_match(hosts, name)
    found = False
    for raw in hosts.split(","):
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        if not pattern:
            continue
        if _wildcard(pattern).fullmatch(name):
            if negate:
                return False
            found = True
    return found


def _blob_type(blob: bytes) -> str | None:
    if len(blob) < 4:
        return None
    (n,) = struct.unpack(">I", blob[:4])
    if n > len(blob) - 4:
        return None
    try:
        return blob[4 : 4 + n].decode("ascii")
    except UnicodeDecodeError:
        return None


def parse_line(line: str, line_no: int) -> Entry | str | None:
    """An Entry, a reason to skip the line (str), or None for blanks and comments."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    fields = text.split()
    marker = None
    if fields[0].startswith("@"):
        marker = fields[0]
        if marker not in (CA, REVOKED):
            return f"line {line_no}: unknown marker {marker}"
        fields = fields[1:]
    if len(fields) < 3:
        return f"line {line_no}: expected hosts, key type and key"
    hosts, key_type, key_b64 = fields[0], fields[1], fields[2]
    try:
        blob = base64.b64decode(key_b64, validate=True)
    except (binascii.Error, ValueError):
        return f"line {line_no}: the key is not valid base64"
    if _blob_type(blob) != key_type:
        return f"line {line_no}: the key is not a {key_type} key"
    return Entry(line_no, marker, hosts, key_type, key_b64)


MAX_BYTES = 16 * 1024 * 1024  # a known_hosts file of ~100,000 hosts


def _read_bounded(path: Path) -> str:
    """The file's text: a regular file (or /dev/null) of at most MAX_BYTES. OSError otherwise,
    and never a hang: opened non-blocking (a FIFO), never read past the bound (/dev/zero)."""
    if str(path) == os.devnull:
        return ""  # UserKnownHostsFile=/dev/null: no known hosts
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file (a directory, a device, a FIFO or a socket)")
        data = bytearray()
        while len(data) <= MAX_BYTES and (chunk := os.read(fd, 1024 * 1024)):
            data += chunk
        if len(data) > MAX_BYTES:
            raise OSError(0, f"over {MAX_BYTES} bytes; is this a known_hosts file?")
        return data.decode("utf-8", "replace")
    finally:
        os.close(fd)


def load(path: Path) -> KnownHosts:
    kh = KnownHosts(path)
    try:
        text = _read_bounded(path)
    except (FileNotFoundError, NotADirectoryError):
        return kh  # no known hosts yet
    except OSError as exc:
        kh.error = f"cannot read known_hosts {path}: {exc.strerror or exc}"
        return kh
    for n, line in enumerate(text.splitlines(), 1):
        got = parse_line(line, n)
        if isinstance(got, Entry):
            kh.entries.append(got)
        elif got:
            kh.skipped.append(got)
    return kh


def append(path: Path, name: str, key_type: str, key_b64: str) -> None:
    """Add `name key_type key` to known_hosts without following a symlink or changing the mode."""
    line = f"{name} {key_type} {key_b64}\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if path.is_symlink():
            raise KnownHostsWriteError(
                f"{path} is a symbolic link; provision does not write through it "
                f"(add the key to {path.resolve()} yourself)"
            ) from exc
        raise KnownHostsWriteError(f"{path} cannot be written: {exc.strerror or exc}") from exc
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line  # the last line had no newline: do not glue ours onto it
        os.write(fd, line.encode())
    except OSError as exc:
        raise KnownHostsWriteError(f"{path} cannot be written: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
