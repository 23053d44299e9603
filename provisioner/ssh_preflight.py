"""Paramiko probe of all hosts in parallel, in seconds, before Ansible starts.

Per host: reachable (connect timeout), host key known (unknown keys are refused with their SHA256
fingerprint unless `accept_new`), authentication, `sudo -n`, OS/version/arch/kernel, target Python,
NVIDIA devices (`lspci -nn -d 10de:`) and the current driver (`nvidia-smi`).
"""

from __future__ import annotations

import base64
import functools
import getpass
import hashlib
import importlib.util
import re
import shlex
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from provisioner import content, knownhosts
from provisioner.exitcodes import SetupError
from provisioner.inventory import Target
from provisioner.report_model import Check, HostReport
from provisioner.settings import Settings

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
_SECTIONS = ("os", "uname", "python", "sudo", "lspci", "driver")
# What only an SSH login can tell, and cheap: the OS release, the kernel, sudo.
_CONNECTION_SCRIPT = r"""
echo '==os'; cat /etc/os-release 2>/dev/null
echo '==uname'; uname -r; uname -m
echo '==sudo'
if [ "$(id -u)" = 0 ]; then echo root
elif sudo -n true >/dev/null 2>&1; then echo ok
else echo no; fi
"""
# The host's inventory: Python, the NVIDIA PCI devices, the loaded driver. `provision check` leaves
# these to the probe its playbook runs anyway (host_assess reads all three), so a nightly check runs
# lspci and nvidia-smi once per host, not twice.
_INVENTORY_SCRIPT = r"""
echo '==python'
python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null
echo '==lspci'
if command -v lspci >/dev/null 2>&1; then lspci -nn -d 10de: 2>/dev/null; echo "rc=$?"
else echo 'rc=127'; fi
echo '==driver'
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null; echo "rc=$?"
"""
_PROBE_SCRIPT = _CONNECTION_SCRIPT + _INVENTORY_SCRIPT


@dataclass
class SshProbeResult:
    host: str
    address: str
    port: int
    status: str = "ok"  # ok | unreachable | failed | skipped
    stage: str = ""  # where it stopped: resolve, connect, hostkey, auth, exec, sudo
    message: str = ""
    fingerprint: str | None = None
    key_type: str | None = None
    accepted_key: bool = False
    os_id: str | None = None
    os_version: str | None = None
    os_name: str | None = None
    arch: str | None = None
    kernel: str | None = None
    python: str | None = None
    sudo: str | None = None  # root | ok | no
    gpus: list[str] = field(default_factory=list)
    lspci_available: bool | None = None
    driver_version: str | None = None
    # full: the inventory too (python, GPUs, driver); connection: login, OS and sudo only
    scope: str = "full"
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cloud_init: str | None = None  # --wait: done | degraded | disabled | absent | error | running

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "skipped")

    @property
    def gpu_count(self) -> int:
        """Display/3D controllers (PCI class 03xx); NVSwitch bridges and the like not counted."""
        return sum(1 for line in self.gpus if re.search(r"\[03[0-9a-f]{2}\]", line))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(key_bytes: bytes) -> str:
    """OpenSSH style `SHA256:<base64 without padding>`."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_bytes).digest()).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def parse_sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {s: [] for s in _SECTIONS}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("==") and line[2:] in out:
            current = line[2:]
            continue
        if current:
            out[current].append(line.rstrip())
    return out


def _rc(lines: list[str]) -> tuple[int, list[str]]:
    if lines and lines[-1].startswith("rc="):
        try:
            return int(lines[-1][3:]), lines[:-1]
        except ValueError:
            pass
    return -1, lines


def apply_probe_output(result: SshProbeResult, text: str, *, inventory: bool = True) -> None:
    """Fill OS, kernel, python, sudo, GPUs and driver from the probe script's output (without
    `inventory`: OS, kernel and sudo only; the rest stays unknown)."""
    sec = parse_sections(text)
    osr: dict[str, str] = {}
    for line in sec["os"]:
        if "=" in line:
            k, v = line.split("=", 1)
            osr[k.strip()] = v.strip().strip('"').strip("'")
    result.os_id = osr.get("ID") or None
    result.os_version = osr.get("VERSION_ID") or None
    result.os_name = osr.get("PRETTY_NAME") or None
    uname = [x for x in sec["uname"] if x]
    if uname:
        result.kernel = uname[0]
    if len(uname) > 1:
        result.arch = uname[1]
    sudo = [x for x in sec["sudo"] if x]
    result.sudo = sudo[0] if sudo else None
    if not inventory:
        result.scope = "connection"
        return
    py = [x for x in sec["python"] if x]
    result.python = py[0] if py else None
    rc, lines = _rc(sec["lspci"])
    result.lspci_available = rc != 127
    result.gpus = [x for x in lines if x.strip()]
    rc, lines = _rc(sec["driver"])
    versions = [x.strip() for x in lines if re.match(r"^\d+\.\d+", x.strip())]
    result.driver_version = versions[0] if rc == 0 and versions else None


def _platforms() -> ModuleType:
    """The probe's own platform code (plugins/module_utils/platforms.py: standard library only,
    loaded by path), so the CLI judges an OS as the probe does: the content's this run uses, else
    (a $PROVISION_CONTENT_DIR without plugins) the installed collection's."""
    where = [content.locate().plugins, *(root / "plugins" for root, _, _ in content.candidates())]
    rel = Path("module_utils") / "platforms.py"
    path = next((p / rel for p in where if (p / rel).is_file()), None)
    if path is None:
        raise SetupError(f"the probe's platform code ({rel}) is missing: broken install?")
    return _load(path)


@functools.cache
def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("provision_collection_platforms", path)
    if spec is None or spec.loader is None:
        raise SetupError(f"the probe's platform code {path} cannot be loaded: broken install?")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any error in that code: a broken install
        raise SetupError(f"the probe's platform code {path} cannot be loaded: {exc}") from exc
    return module


def platform_of(result: SshProbeResult) -> Any:  # noqa: ANN401 - module_utils' Platform, loaded by path
    """The probe's Platform for what the CLI probe read (os-release, uname -m, uname -r)."""
    os_release = {"ID": result.os_id or "", "VERSION_ID": result.os_version or "",
                  "PRETTY_NAME": result.os_name or ""}
    return _platforms().Platform(os_release, result.arch or "", result.kernel or "")


def python_warnings(
    result: SshProbeResult, torch: str, build: str, releases: dict[str, Any]
) -> list[str]:
    """The target's python3 against the Python range of the stack's torch wheels (`releases`:
    the matrix's table for the stack's build, {} for builds it does not list)."""
    rel = releases.get(torch)
    if rel is None or not result.python:
        return []
    lo, hi = (tuple(int(x) for x in str(v).split(".")) for v in rel["python"])
    have = tuple(int(x) for x in result.python.split(".")[:2])
    if lo <= have <= hi:
        return []
    return [
        f"python3 {result.python}: torch {torch} {build} wheels need Python "
        f"{rel['python'][0]} to {rel['python'][1]}"
    ]


def matrix_warnings(
    result: SshProbeResult, distros: list[dict[str, Any]], carries: list[str], cuda: str
) -> list[str]:
    """Distro support (the probe's judgement, preflight.os) and the matrix: unsupported,
    unconfirmed or unknown -> a warning."""
    plat = platform_of(result)
    supported, reason = plat.support()
    if not supported:
        return [f"OS {result.os_name or result.os_id or '?'}: {reason} (preflight.os stops it)"]
    d, a = plat.repo_dir, plat.arch_dir
    key = f"{d}/{a}"
    if key in carries:
        return []
    row = next((x for x in distros if x.get("name") == d and a in x.get("arches", [])), None)
    if row is None:
        return [f"{key}: no CUDA {cuda} packages known for it (not in the matrix)"]
    if row.get("published") is False:
        return [
            f"{key}: NVIDIA publishes no CUDA {cuda} packages there: the preflight role stops "
            f"this host (declare mirrors.nvidia_repo_carries: [{key}] if your mirror has them)"
        ]
    if row.get("confidence") == "U":
        return [
            f"{key}: CUDA {cuda} packages there are unconfirmed; declare "
            f"mirrors.nvidia_repo_carries: [{key}] if your mirror has them"
        ]
    return []


SSH_REMEDIATION = {
    "resolve": "check the host name (DNS or /etc/hosts)",
    "connect": "check that the host is up and sshd listens on the port",
    "hostkey": "verify the fingerprint, then --accept-new-host-keys (unknown keys only)",
    "auth": "check --user/--key, the ssh agent, and authorized_keys",
    "sudo": "configure passwordless sudo or use --ask-become-pass",
    "cloud_init": "look at `cloud-init status --long` and /var/log/cloud-init-output.log on the "
                  "host; give a longer --wait if it is only slow",
}


def ssh_failure_entry(r: SshProbeResult) -> HostReport:
    expected = "reachable" if r.status == "unreachable" else "sudo -n works"
    if r.stage == "cloud_init":
        expected = "cloud-init finished (cloud-init status --wait)"
    check = Check(
        id=f"ssh.{r.stage or 'probe'}",
        status="fail",
        expected=expected,
        actual=r.message,
        message=r.message,
        remediation=SSH_REMEDIATION.get(r.stage, ""),
        role="ssh",
    )
    return HostReport(status=r.status, checks=[check], message=r.message, preflight=r.to_dict())


def probe_options(s: Settings) -> ProbeOptions:
    return ProbeOptions(
        known_hosts=(s.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser(),
        accept_new=bool(s.accept_new_host_keys),
        need_sudo=s.become is not False and not s.ask_become_pass,
        inventory=not s.read_only_check,
    )


class _RecordingPolicy:
    """Reject unknown host keys (recording them), or accept and append them when asked.
    A revoked key (`@revoked` in known_hosts) is never accepted."""

    def __init__(
        self, accept_new: bool, known: knownhosts.KnownHosts, lock: threading.Lock, *,
        write: bool = True,
    ) -> None:
        self.accept_new = accept_new
        self.write = write
        self.known = known
        self.lock = lock
        self.key: Any = None
        self.accepted = False
        self.revoked = False
        self.write_error: str | None = None

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:  # noqa: ANN401
        import paramiko  # noqa: PLC0415

        self.key = key
        if self.known.is_revoked(key.get_name(), key.asbytes()):
            self.revoked = True
            raise paramiko.SSHException(f"host key for {hostname} is revoked")
        if not self.accept_new:
            raise paramiko.SSHException(f"host key for {hostname} is not known")
        if not self.write:
            self.accepted = True
            return
        try:
            with self.lock:
                knownhosts.append(self.known.path, hostname, key.get_name(), key.get_base64())
        except knownhosts.KnownHostsWriteError as exc:
            self.write_error = str(exc)
            raise paramiko.SSHException(str(exc)) from exc
        self.accepted = True


@dataclass(frozen=True)
class ProbeOptions:
    known_hosts: Path = DEFAULT_KNOWN_HOSTS
    accept_new: bool = False
    need_sudo: bool = True
    inventory: bool = True  # False: the connection script only (provision check)
    connect_timeout: float = 10.0
    command_timeout: float = 20.0


def probe(target: Target, opts: ProbeOptions, lock: threading.Lock) -> SshProbeResult:
    start = time.monotonic()
    result = SshProbeResult(host=target.name, address=target.address, port=target.port)
    try:
        _probe(target, opts, lock, result)
    finally:
        result.seconds = round(time.monotonic() - start, 3)
    return result


def _fail(result: SshProbeResult, status: str, stage: str, message: str) -> None:
    result.status, result.stage, result.message = status, stage, message


def _open_socket(
    target: Target, opts: ProbeOptions, result: SshProbeResult
) -> socket.socket | None:
    where = f"{target.address}:{target.port}"
    try:
        infos = socket.getaddrinfo(target.address, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        _fail(result, "unreachable", "resolve", f"cannot resolve {target.address}: {exc.strerror}")
        return None
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(opts.connect_timeout)
    try:
        sock.connect(sockaddr)
    except OSError as exc:
        sock.close()
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        _fail(result, "unreachable", "connect", f"cannot connect to {where}: {reason}")
        return None
    return sock


def _host_key_failure(
    result: SshProbeResult, target: Target, known: Path, key: Any, *,  # noqa: ANN401
    changed: bool = False, policy: _RecordingPolicy | None = None,
) -> None:
    hk_name = known_hosts_name(target.address, target.port)
    result.fingerprint = fingerprint(key.asbytes())
    result.key_type = key.get_name()
    if policy is not None and policy.revoked:
        msg = (
            f"REVOKED host key for {hk_name}: {result.fingerprint} ({result.key_type}) is marked "
            f"@revoked in {known}; it is never accepted. Find out why it was revoked before "
            "going on"
        )
    elif policy is not None and policy.write_error:
        msg = (
            f"unknown host key for {hk_name}: {result.fingerprint} ({result.key_type}); "
            f"--accept-new-host-keys could not add it: {policy.write_error}"
        )
    elif changed:
        msg = (
            f"HOST KEY CHANGED for {hk_name}: offered {result.fingerprint} ({result.key_type}) "
            f"does not match {known}; if the host was reinstalled, remove the old entry with "
            f"`ssh-keygen -R '{hk_name}' -f {known}` and verify the new fingerprint"
        )
    else:
        msg = (
            f"unknown host key for {hk_name}: {result.fingerprint} ({result.key_type}), "
            f"not in {known}. Verify it, then accept it with --accept-new-host-keys, or "
            f"`ssh-keyscan -p {target.port} {shlex.quote(target.address)} >> {known}`"
        )
        if policy is not None and policy.known.has_ca_for(hk_name):
            msg += (
                f". {known} trusts a @cert-authority for this host; the preflight (paramiko) "
                "cannot check host certificates: add the host's own key, or use --no-preflight"
            )
    _fail(result, "unreachable", "hostkey", msg)


def _ssh_connect(
    client: Any,  # noqa: ANN401 - paramiko.SSHClient, imported lazily
    sock: socket.socket,
    target: Target,
    *,
    opts: ProbeOptions,
    policy: _RecordingPolicy,
    known: Path,
    result: SshProbeResult,
) -> bool:
    import paramiko  # noqa: PLC0415

    user = target.user or getpass.getuser()
    where = f"{target.address}:{target.port}"
    try:
        client.connect(
            target.address,
            port=target.port,
            username=user,
            key_filename=str(Path(target.key_file).expanduser()) if target.key_file else None,
            timeout=opts.connect_timeout,
            banner_timeout=opts.connect_timeout,
            auth_timeout=opts.connect_timeout,
            sock=sock,
            look_for_keys=True,
            allow_agent=True,
        )
    except paramiko.BadHostKeyException as exc:
        _host_key_failure(result, target, known, exc.key, changed=True, policy=policy)
        return False
    except paramiko.AuthenticationException as exc:
        _fail(result, "unreachable", "auth", f"authentication failed for {user}@{where}: {exc}")
        return False
    except (paramiko.SSHException, OSError, EOFError) as exc:
        transport = client.get_transport()
        # no SSH banner (a hung sshd, or not SSH at all): a connect problem, never auth
        banner = getattr(transport, "remote_version", None) if transport is not None else None
        kex_done = transport is not None and bool(getattr(transport, "initial_kex_done", True))
        if policy.key is not None and not policy.accepted:
            _host_key_failure(result, target, known, policy.key, policy=policy)
        elif not banner:
            _fail(result, "unreachable", "connect",
                  f"SSH to {where} failed: no SSH banner from the server ({exc}); is sshd hung, or "
                  "is this port not SSH?")
        elif not kex_done and transport is not None and not transport.is_active():
            # banner received, then the server broke the protocol or hung up: not a timeout
            _fail(result, "unreachable", "connect",
                  f"SSH handshake with {where} failed after the server's banner ({banner}): "
                  f"{exc or 'the connection was closed'}; is this an SSH server, and a healthy "
                  "one?")
        elif not kex_done:
            # banner received, then the key exchange stalled: the handshake timed out
            _fail(result, "unreachable", "connect",
                  f"SSH handshake with {where} timed out after {opts.connect_timeout:.0f}s: the "
                  f"server ({banner}) sent its banner but never completed the key exchange; is "
                  "sshd overloaded or hung?")
        elif transport is not None and transport.is_active() and not transport.is_authenticated():
            # paramiko re-raises the last key-loading error after every key was refused
            _fail(result, "unreachable", "auth", f"authentication failed for {user}@{where}: {exc}")
        else:
            _fail(result, "unreachable", "connect", f"SSH to {where} failed: {exc}")
        return False
    return True


def _add_known_keys(client: Any, kh: knownhosts.KnownHosts, name: str) -> None:  # noqa: ANN401
    """The host's keys from known_hosts, as paramiko's client checks them (`name` is host or
    [host]:port, as paramiko looks it up). Keys of types paramiko does not know are left out."""
    import paramiko  # noqa: PLC0415

    keys = client.get_host_keys()
    for e in kh.keys_for(name):
        try:
            key = paramiko.PKey.from_type_string(e.key_type, e.blob)
        except (paramiko.pkey.UnknownKeyType, paramiko.SSHException, ValueError, TypeError):
            key = None  # a key type paramiko does not know: skipped, as OpenSSH skips it
        if key is not None:
            keys.add(name, e.key_type, key)


PROBE_OUTPUT_LIMIT = 1024 * 1024  # bytes of probe output read at most (was: without bound)


def _run_probe(client: Any, target: Target, opts: ProbeOptions, result: SshProbeResult) -> None:  # noqa: ANN401
    import paramiko  # noqa: PLC0415

    try:
        _, stdout, _ = client.exec_command(
            "sh -c " + shlex.quote(_PROBE_SCRIPT if opts.inventory else _CONNECTION_SCRIPT),
            timeout=opts.command_timeout,
        )
        out = bytearray()
        while chunk := stdout.read(65536):
            out += chunk
            if len(out) > PROBE_OUTPUT_LIMIT:
                _fail(result, "failed", "exec",
                      f"the probe on {target.address}:{target.port} printed over "
                      f"{PROBE_OUTPUT_LIMIT} bytes (its output is a few KB): stopped reading; "
                      "is the login shell printing without end (a profile script)?")
                return
        text = out.decode("utf-8", "replace")
    except (paramiko.SSHException, OSError) as exc:
        where = f"{target.address}:{target.port}"
        _fail(result, "unreachable", "exec", f"running the probe on {where} failed: {exc}")
        return
    apply_probe_output(result, text, inventory=opts.inventory)
    if opts.need_sudo and result.sudo == "no":
        _fail(
            result,
            "failed",
            "sudo",
            f"`sudo -n true` fails for {target.user or getpass.getuser()} on {target.name}: "
            "give passwordless sudo, or use --ask-become-pass",
        )
    if not opts.inventory:
        return
    if result.lspci_available is False:
        result.warnings.append("lspci not installed: NVIDIA devices not listed")
    elif not result.gpus:
        result.warnings.append("no NVIDIA PCI devices (lspci -d 10de:)")


def connect(
    target: Target, opts: ProbeOptions, lock: threading.Lock, result: SshProbeResult
) -> tuple[Any, socket.socket] | None:
    """An authenticated paramiko client to the target, its host key verified against known_hosts
    (an unknown key accepted and appended only with `accept_new`), or None with `result` saying
    where it stopped (resolve, connect, hostkey, auth). The caller closes client and socket."""
    import paramiko  # noqa: PLC0415 - lazy

    sock = _open_socket(target, opts, result)
    if sock is None:
        return None
    known = Path(target.known_hosts or opts.known_hosts).expanduser()
    relaxed = target.strict_host_key_checking  # from the inventory's ssh args: no | accept-new
    kh = knownhosts.load(known) if relaxed != "no" else knownhosts.KnownHosts(known)
    if kh.error:
        sock.close()
        _fail(result, "unreachable", "hostkey", kh.error)
        return None
    policy = _RecordingPolicy(
        opts.accept_new or relaxed in ("no", "accept-new"), kh, lock, write=relaxed != "no"
    )
    client = paramiko.SSHClient()
    try:
        _add_known_keys(client, kh, known_hosts_name(target.address, target.port))
        client.set_missing_host_key_policy(policy)  # type: ignore[arg-type]
        connected = _ssh_connect(
            client, sock, target, opts=opts, policy=policy, known=known, result=result
        )
    except BaseException:
        client.close()
        sock.close()
        raise
    if not connected:
        client.close()
        sock.close()
        return None
    if policy.accepted and policy.key is not None:
        result.accepted_key = True
        result.fingerprint = fingerprint(policy.key.asbytes())
        result.key_type = policy.key.get_name()
        into = f"into {known}" if policy.write else "(StrictHostKeyChecking=no)"
        result.warnings.append(f"accepted new host key {result.fingerprint} {into}")
    return client, sock


def not_probed(target: Target) -> str | None:
    """Why the target is not reached over SSH by provision itself (local, or deferred)."""
    if target.connection in ("local", "ansible.builtin.local"):
        return "local connection: not probed"
    if target.deferred:
        return f"not probed: {target.deferred}; left to Ansible"
    return None


def _probe(
    target: Target, opts: ProbeOptions, lock: threading.Lock, result: SshProbeResult
) -> None:
    skip = not_probed(target)
    if skip:
        result.status, result.message = "skipped", skip
        return
    opened = connect(target, opts, lock, result)
    if opened is None:
        return
    client, sock = opened
    try:
        _run_probe(client, target, opts, result)
    finally:
        client.close()
        sock.close()


def quiet_paramiko() -> None:
    """paramiko logs a failed handshake (garbage or HTTP on the port) with a traceback from its
    transport thread; without a handler Python prints that on stderr. The probe reports the
    failure itself, so paramiko's log goes nowhere."""
    import logging  # noqa: PLC0415

    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
    log.propagate = False


def import_paramiko() -> ModuleType:
    """paramiko, imported before the probes start (was: in the first probe, inside its deadline
    and its `seconds`). Its ssh_config module imports `invoke` when it can, only to run the
    commands of a `Match exec` (paramiko raises the ImportError at that point only: "the laziest
    spot", paramiko/config.py), and invoke imports asyncio and unittest.mock: 0.04 of paramiko's
    0.11 CPU-s of import, in every `provision check`. The preflight reads no ssh_config, so invoke
    is hidden while paramiko is first imported; an `import invoke` later works as usual."""
    import sys  # noqa: PLC0415

    hide = "invoke" not in sys.modules and "paramiko" not in sys.modules
    if hide:
        sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` raises
    try:
        import paramiko  # noqa: PLC0415
    finally:
        if hide and "invoke" in sys.modules and sys.modules["invoke"] is None:
            del sys.modules["invoke"]
    return paramiko


WORKERS = 32  # probes at a time; each also holds a paramiko transport thread


def run_ssh_preflight(
    targets: list[Target], opts: ProbeOptions, *, deadline: float | None = None,
    workers: int = WORKERS,
) -> list[SshProbeResult]:
    """Probe all targets with a bounded pool of worker threads; one result per target.

    Each host has its own deadline, counted from when its probe starts (was: one global deadline
    for all, which reported healthy hosts queued behind slow ones as unreachable). A probe past
    its deadline counts as unreachable and a replacement worker takes its place, up to twice the
    pool: threads stay bounded however many hosts (was: one thread per host, and "can't start new
    thread" at 5,000). Daemon threads, not an executor: an executor's threads are joined at
    interpreter exit, so Ctrl-C or SIGTERM would wait for the slowest connect timeout."""
    import_paramiko()
    quiet_paramiko()
    lock = threading.Lock()
    limit = deadline or (opts.connect_timeout * 3 + opts.command_timeout + 5)
    done: list[SshProbeResult | BaseException | None] = [None] * len(targets)
    started: dict[int, float] = {}  # in flight: index -> monotonic start
    pending = list(range(len(targets)))[::-1]
    cond = threading.Condition()
    pool = max(1, min(workers, len(targets)))
    live = [0]

    def work() -> None:
        while True:
            with cond:
                if not pending:
                    live[0] -= 1
                    cond.notify_all()
                    return
                i = pending.pop()
                started[i] = time.monotonic()
                cond.notify_all()  # its deadline starts now
            try:
                got: SshProbeResult | BaseException = probe(targets[i], opts, lock)
            except BaseException as exc:  # reported per host below
                got = exc
            with cond:
                if started.pop(i, None) is not None:  # not given up on meanwhile
                    done[i] = got
                cond.notify_all()

    def spawn() -> None:
        live[0] += 1
        threading.Thread(target=work, name=f"probe-{live[0]}", daemon=True).start()

    with cond:
        for _ in range(pool):
            spawn()
        while pending or started:
            now = time.monotonic()
            for i in [i for i, t0 in started.items() if now - t0 > limit]:
                del started[i]  # past its own deadline: unreachable (done[i] stays None)
                if live[0] < 2 * pool:
                    spawn()  # the stuck worker rejoins the pool when its probe returns
            waits = [t0 + limit - now for t0 in started.values()]
            cond.wait(timeout=max(0.05, min(waits, default=1.0)))
    results: list[SshProbeResult] = []
    for t, got in zip(targets, done, strict=True):
        if isinstance(got, SshProbeResult):
            results.append(got)
            continue
        r = SshProbeResult(host=t.name, address=t.address, port=t.port, seconds=limit)
        _fail(r, "unreachable", "timeout" if got is None else "error",
              f"no answer within {limit:.0f}s" if got is None else f"probe error: {got!r}")
        results.append(r)
    return results
