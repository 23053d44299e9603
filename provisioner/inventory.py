"""Inventories: build one from `--host` values, or validate an `-i` path and read its hosts.

ansible-runner treats a string inventory that is not an existing path as inline inventory text, so a
mistyped `-i` path would silently become a one-host inventory. Paths are therefore checked here and
handed on absolute.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from provisioner.exitcodes import UsageProblem

GROUP = "gpu_servers"
_USER = r"[A-Za-z0-9_.][A-Za-z0-9_.-]*"
_HOST_RE = re.compile(
    rf"^(?:(?P<user>{_USER})@)?"
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+))"
    r"(?::(?P<port>\d{1,5}))?$"
)


@dataclass(frozen=True)
class Target:
    """One host as the preflight and the inventory see it."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    connection: str = "ssh"
    known_hosts: str | None = None  # from ansible_ssh_common_args UserKnownHostsFile, if any
    strict_host_key_checking: str | None = None  # from ansible_ssh_common_args: no | accept-new
    # why the preflight cannot probe it (a connection variable that only resolves at run time)
    deferred: str | None = None
    # secret values among the host's inventory variables (scrubbed from what provision writes)
    secrets: frozenset[str] = field(default=frozenset(), compare=False, repr=False)


def check_user(user: str | None) -> None:
    """--user as the user part of --host is checked (was: anything, `-oProxyCommand=...` too)."""
    if user is not None and (len(user) > 64 or not re.fullmatch(_USER, user)):
        raise UsageProblem(
            f"--user {user[:60]!r}: not a user name (letters, digits, '_', '.', '-'; not "
            "starting with '-')"
        )


def parse_host(value: str, *, port: int | None = None, user: str | None = None) -> Target:
    """`[user@]host[:port]` (IPv6 in brackets). Explicit --port/--user apply unless given inline."""
    m = _HOST_RE.match(value.strip())
    if not m:
        raise UsageProblem(f"--host {value!r}: expected [user@]host[:port]")
    address = m.group("v6") or m.group("host")
    p = int(m.group("port")) if m.group("port") else (port or 22)
    if not 0 < p < 65536:
        raise UsageProblem(f"--host {value!r}: port {p} is out of range")
    return Target(name=address, address=address, port=p, user=m.group("user") or user)


def targets_from_hosts(
    hosts: tuple[str, ...] | list[str],
    *,
    port: int | None = None,
    user: str | None = None,
    key_file: str | None = None,
    connection: str = "ssh",
) -> list[Target]:
    check_user(user)
    parsed = [parse_host(value, port=port, user=user) for value in hosts]
    if not parsed:
        raise UsageProblem("no hosts: give --host HOST (repeatable) or -i INVENTORY")
    seen: set[tuple[str, int]] = set()
    for t in parsed:
        if (t.address, t.port) in seen:
            where = t.address if t.port == 22 else f"{t.address}:{t.port}"
            raise UsageProblem(f"--host {where} given twice")
        seen.add((t.address, t.port))
    # one address on several ports (several sshd, or NAT): the inventory names carry the port
    shared = {a for a, _ in seen if sum(1 for b, _ in seen if b == a) > 1}
    return [
        replace(t, name=f"{t.address}_{t.port}" if t.address in shared else t.address,
                key_file=key_file, connection=connection)
        for t in parsed
    ]


KEY_FILE_LIMIT = 1024 * 1024


def check_key_file(path: Path) -> Path:
    """`--key FILE` must be a readable private key: checked before any host is contacted."""
    p = path.expanduser()
    try:
        with p.open("rb") as fh:
            head = fh.read(KEY_FILE_LIMIT)
    except FileNotFoundError as exc:
        raise UsageProblem(f"--key {path}: not found") from exc
    except IsADirectoryError as exc:
        raise UsageProblem(f"--key {path}: is a directory, not a key file") from exc
    except OSError as exc:
        raise UsageProblem(f"--key {path}: cannot be read ({exc.strerror or exc})") from exc
    text = head.decode("ascii", "replace").strip()
    if not text:
        raise UsageProblem(f"--key {path}: is empty")
    if re.match(r"^(ssh-|ecdsa-|sk-)\S+ [A-Za-z0-9+/=]+", text):
        raise UsageProblem(
            f"--key {path}: is a public key; give the private key (the file without .pub)"
        )
    if not (re.search(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----", text)
            or text.startswith("PuTTY-User-Key-File-")):
        raise UsageProblem(
            f"--key {path}: is not a private key (expected an OpenSSH or PEM private key file)"
        )
    return p


def limit_targets(targets: list[Target], limit: str) -> list[Target]:
    """Apply an Ansible --limit pattern to --host targets (Ansible's own pattern matching, on the
    inventory that would be written for them), so the preflight and the run see the same hosts."""
    import tempfile  # noqa: PLC0415

    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="provision-limit-") as tmp:
        path = write_inventory(targets, Path(tmp))
        manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
        manager.subset(limit)
        names = {str(h.name) for h in manager.get_hosts("all")}
    out = [t for t in targets if t.name in names]
    if not out:
        given = ", ".join(t.name for t in targets)
        raise UsageProblem(f"--limit {limit!r} matches none of the --host hosts ({given})")
    return out


def ansible_connection(connection: str) -> str:
    return {"ssh": "ssh", "paramiko": "paramiko_ssh"}.get(connection, connection)


def inventory_yaml(targets: list[Target]) -> str:
    """A YAML inventory: every host in group `gpu_servers` with its connection vars."""
    import yaml  # noqa: PLC0415 - lazy

    hosts: dict[str, dict[str, Any]] = {}
    for t in targets:
        if t.connection == "local":  # `provision --local`: this machine, as root (no become)
            hosts[t.name] = {"ansible_host": t.address, "ansible_connection": "local",
                             "ansible_become": False}
            continue
        hv: dict[str, Any] = {
            "ansible_host": t.address,
            "ansible_port": t.port,
            "ansible_connection": ansible_connection(t.connection),
        }
        if t.user:
            hv["ansible_user"] = t.user
        if t.key_file:
            hv["ansible_ssh_private_key_file"] = t.key_file
        hosts[t.name] = hv
    doc = {"all": {"children": {GROUP: {"hosts": hosts}}}}
    return str(yaml.safe_dump(doc, sort_keys=False))


def write_inventory(targets: list[Target], directory: Path) -> Path:
    path = directory / "inventory.yml"
    path.write_text(inventory_yaml(targets), encoding="utf-8")
    path.chmod(0o600)
    return path


def check_inventory_path(value: str) -> Path:
    """An `-i` value must be an existing file or directory; returned absolute."""
    path = Path(value).expanduser()
    if not path.exists():
        raise UsageProblem(f"inventory {value!r} does not exist")
    return path.resolve()


def ssh_option(args: str | None, name: str) -> str | None:
    """The value of `-o NAME=VALUE` (first one wins, as in ssh) in an ssh args string."""
    if not args:
        return None
    try:
        words = shlex.split(args)
    except ValueError:
        return None
    for i, w in enumerate(words):
        if w == "-o" and i + 1 < len(words):
            opt = words[i + 1]
        elif w.startswith("-o") and len(w) > 2:
            opt = w[2:]
        else:
            continue
        m = re.match(rf"(?i)^\s*{re.escape(name)}\s*[= ]\s*(\S+)", opt)
        if m:
            return m.group(1)
    return None


def known_hosts_from_args(args: str | None) -> str | None:
    """`-o UserKnownHostsFile=FILE` out of an ansible_ssh_common_args string."""
    return ssh_option(args, "UserKnownHostsFile")


def strict_checking_from_args(args: str | None) -> str | None:
    """`no` or `accept-new` when the inventory relaxes host key checking, else None."""
    value = (ssh_option(args, "StrictHostKeyChecking") or "").lower()
    if value in ("no", "off"):
        return "no"
    if value == "accept-new":
        return "accept-new"
    return None


# the connection variables the preflight needs, resolved (templated) as Ansible resolves them
_CONNECTION_KEYS = (
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user",
    "ansible_ssh_user", "ansible_ssh_private_key_file", "ansible_connection",
    "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_host_key_checking",
)


class _Deferred(Exception):
    pass


def _resolved(hv: dict[str, Any], templar: Any) -> dict[str, Any]:  # noqa: ANN401
    """The connection variables of one host, templated with its variables (raw: `{{ x }}`);
    `templar` None: a plain inventory, nothing to template."""
    out: dict[str, Any] = {}
    for k in _CONNECTION_KEYS:
        raw = hv.get(k)
        if raw is None:
            continue
        value = raw if templar is None else _template(templar, k, raw)
        out[k] = value if isinstance(value, bool) else (
            int(value) if isinstance(value, int) else str(value))
    return out


def _template(templar: Any, k: str, raw: object) -> object:  # noqa: ANN401
    from ansible.errors import AnsibleError  # noqa: PLC0415

    try:
        return templar.template(raw)
    except AnsibleError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _Deferred(f"{k} {str(raw)!r} cannot be resolved before the run ({first})") from exc


def _port(value: object, name: str, key: str, path: Path) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise UsageProblem(
            f"inventory {path}: host {name}: {key} {str(value)!r} is not a port number (1-65535)"
        )
    return port


def targets_from_inventory(
    path: Path,
    limit: str | None = None,
    *,
    port: int | None = None,
    user: str | None = None,
    key_file: str | None = None,
    connection: str | None = None,
) -> list[Target]:
    """Read hosts and their connection vars with Ansible's own inventory parser, templated as
    Ansible templates them. A host whose connection vars only resolve at run time (facts, an
    undefined variable) is kept, marked `deferred`: the preflight leaves it to Ansible."""
    from provisioner import plain_inventory  # noqa: PLC0415
    from provisioner.redact import secret_values  # noqa: PLC0415

    check_user(user)
    plain = plain_inventory.read(path, limit)
    hosts = _ansible_host_vars(path, limit) if plain is None else _plain_host_vars(plain)
    out: list[Target] = []
    for name, hv, cv, deferred in hosts:
        conn = ansible_connection(connection) if connection else None
        conn = str(conn or cv.get("ansible_connection") or "ssh")
        if conn in ("paramiko", "ansible.builtin.paramiko_ssh"):
            conn = "paramiko_ssh"
        common = " ".join(
            str(cv.get(k) or "") for k in ("ansible_ssh_common_args", "ansible_ssh_extra_args")
        )
        # `is not None`, not truthiness: ansible_port 0 is refused (was: probed 22 silently)
        port_key = "ansible_port" if cv.get("ansible_port") is not None else "ansible_ssh_port"
        raw_port = cv.get(port_key)
        # Explicit command-line options win over inventory values (as -u / --private-key would).
        address = str(cv.get("ansible_host") or cv.get("ansible_ssh_host") or name)
        if len(address) > MAX_ADDRESS or not address.isprintable() or " " in address:
            raise UsageProblem(
                f"inventory {path}: host {_cut(name)}: ansible_host {_cut(address)!r} is not a "
                f"host name or address (at most {MAX_ADDRESS} characters, no spaces)"
            )
        out.append(
            Target(
                name=name,
                address=address,
                port=port or (_port(raw_port, name, port_key, path)
                              if raw_port not in (None, "") else 22),
                user=user or _opt_str(cv.get("ansible_user") or cv.get("ansible_ssh_user")),
                key_file=key_file or _opt_str(cv.get("ansible_ssh_private_key_file")),
                connection=conn,
                known_hosts=known_hosts_from_args(common),
                strict_host_key_checking=(
                    "no"
                    if str(cv.get("ansible_host_key_checking", "")).lower() in ("false", "no", "0")
                    else strict_checking_from_args(common)
                ),
                deferred=deferred,
                secrets=frozenset(secret_values(dict(hv))),
            )
        )
    if not out:
        where = f" matching --limit {limit!r}" if limit else ""
        raise UsageProblem(f"inventory {path} has no hosts{where}")
    return out


HostVars = tuple[str, dict[str, Any], dict[str, Any], str | None]  # name, vars, resolved, deferred


def _plain_host_vars(plain: dict[str, dict[str, Any]]) -> list[HostVars]:
    """A plain inventory (provisioner/plain_inventory.py): nothing to template."""
    return [(name, hv, _resolved(hv, None), None) for name, hv in plain.items()]


def _ansible_host_vars(path: Path, limit: str | None) -> list[HostVars]:
    """Any other inventory: Ansible's own parser and templating (about 0.3 s of imports)."""
    # lazy and heavy; ansible ships no type information
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.template import Templar  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[str(path)])
    if limit:
        inv.subset(limit)
    vm = VariableManager(loader=loader, inventory=inv)
    out: list[HostVars] = []
    for host in inv.get_hosts("all"):
        hv = vm.get_vars(host=host, include_hostvars=False)
        deferred = None
        try:
            cv = _resolved(hv, Templar(loader=loader, variables=hv))
        except _Deferred as exc:
            cv, deferred = {}, str(exc)
        out.append((str(host.name), hv, cv, deferred))
    return out


MAX_ADDRESS = 253  # the longest DNS name (RFC 1035); an IPv6 address is shorter


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def _opt_str(value: object) -> str | None:
    return None if value in (None, "") else str(value)
