"""The only module that imports ansible_runner. Runs a playbook, returns a frozen RunResult.

Pitfalls handled: a fresh private data dir per run
with `suppress_env_files` (no secrets or stale env files on disk); an absolute, existing inventory;
ANSIBLE_HOST_KEY_CHECKING=True unless the caller says otherwise; only the environment Ansible needs;
PATH gets the interpreter's bin dir so ansible-playbook is found without an activated venv; Ctrl-C
(SIGINT/SIGTERM) cancels the run (status `canceled`, exit 130 upstream).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.exitcodes import SetupError, UsageProblem
from provisioner.redact import Scrubber, secret_values

EventHandler = Callable[[dict[str, Any]], None]

# Environment variables passed through from the caller (everything else is dropped).
_PASS_EXACT = frozenset(
    {"HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "SSH_AUTH_SOCK", "SHELL"}
)
_PASS_PREFIX = ("LC_", "ANSIBLE_", "AWX_", "RUNNER_")
_RUNNER_KEYS = frozenset({"ORIGINAL_STDOUT_CALLBACK", "JOB_ID", "AD_HOC_COMMAND_ID"})

STAT_KEYS = ("ok", "changed", "failures", "dark", "skipped", "ignored", "rescued", "processed")


@dataclass(frozen=True)
class RunRequest:
    project_dir: Path  # holds the playbook (cwd of ansible-playbook)
    playbook: str  # relative to project_dir
    inventory: Path
    artifact_dir: Path
    ident: str
    extravars: Mapping[str, Any] = field(default_factory=dict)
    collections_path: Path | None = None  # holds ansible_collections/provision/gpu
    roles_path: Path | None = None  # short-named roles (test content only)
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    diff: bool = False
    verbosity: int = 0
    forks: int | None = None
    become: bool | None = True  # None: leave it to the playbook and inventory
    become_password: str | None = None
    secrets: frozenset[str] = frozenset()  # values to scrub from artifacts (with -e's and -K's)
    user: str | None = None  # -u, for -i inventories
    private_key: str | None = None  # --private-key, for -i inventories
    known_hosts: Path | None = None
    host_key_checking: bool = True
    pipelining: bool = True
    rotate: int = 20
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    status: str  # successful | failed | timeout | canceled
    rc: int
    artifacts: Path
    stats: Mapping[str, Mapping[str, int]]
    command: tuple[str, ...] = ()

    @property
    def canceled(self) -> bool:
        return self.status == "canceled"


def exec_path(current: str | None = None) -> str:
    """PATH with the running interpreter's bin directory first (venv need not be activated)."""
    bindir = str(Path(sys.executable).parent)
    parts = [p for p in (current if current is not None else os.environ.get("PATH", "")).split(":")]
    return ":".join([bindir, *[p for p in parts if p and p != bindir]])


def find_ansible_playbook(path: str | None = None) -> str:
    found = shutil.which("ansible-playbook", path=path or exec_path())
    if not found:
        raise SetupError(
            "ansible-playbook not found next to the Python interpreter or on PATH "
            f"({sys.executable}); install ansible-core into this environment"
        )
    return found


def ansible_pythonpath(pythonpath: str) -> str | None:
    """The PYTHONPATH entry this Python imports ansible from, if it is one (an install made with
    `pip install --target DIR` and run with PYTHONPATH=DIR): ansible-playbook, a script of the
    same install, needs it too. No other entry passes."""
    spec = importlib.util.find_spec("ansible")
    if spec is None or spec.origin is None:
        return None
    home = str(Path(spec.origin).resolve().parent.parent)
    entries = {str(Path(p).resolve()) for p in pythonpath.split(":") if p}
    return home if home in entries else None


def filter_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """Keep only what Ansible and ansible-runner need."""
    kept = {
        k: v
        for k, v in env.items()
        if k in _PASS_EXACT or k in _RUNNER_KEYS or k == "PATH" or k.startswith(_PASS_PREFIX)
    }
    home = ansible_pythonpath(str(env.get("PYTHONPATH") or ""))
    if home is not None:
        kept["PYTHONPATH"] = home
    return kept


def build_env(req: RunRequest) -> dict[str, str]:
    env: dict[str, str] = {
        "PATH": exec_path(),
        "ANSIBLE_HOST_KEY_CHECKING": str(req.host_key_checking),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_SSH_RETRIES": "0",
    }
    if req.pipelining and "ANSIBLE_PIPELINING" not in os.environ:
        env["ANSIBLE_PIPELINING"] = "True"
    if req.known_hosts is not None:
        env["ANSIBLE_SSH_COMMON_ARGS"] = f"-o UserKnownHostsFile={req.known_hosts}"
    if req.collections_path is not None:
        # ours first; a site's own collections (ANSIBLE_COLLECTIONS_PATH) stay reachable after it
        extra = os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")
        paths = (str(req.collections_path), extra)
        env["ANSIBLE_COLLECTIONS_PATH"] = ":".join(p for p in paths if p)
    env.update(req.extra_env)
    return env


def build_cmdline(req: RunRequest) -> list[str]:
    args: list[str] = []
    if req.check:
        args.append("--check")
    if req.diff:
        args.append("--diff")
    if req.become:
        args.append("--become")
    if req.become_password is not None:
        args.append("--ask-become-pass")
    if req.user:
        args += ["--user", req.user]
    if req.private_key:
        args += ["--private-key", req.private_key]
    return args


def write_extravars(private_data_dir: Path, extravars: Mapping[str, Any]) -> Path:
    """Extra variables go to ansible-playbook as `-e @<pdd>/env/extravars`: a 0600 file in the
    0700 private data dir, never on the command line (/proc/<pid>/cmdline, runs/<id>/command)."""
    env = private_data_dir / "env"
    env.mkdir(mode=0o700, exist_ok=True)
    path = env / "extravars"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(dict(extravars), fh)
    return path


def keep_extravars(
    art: Path, pdd: Path, extravars: Mapping[str, Any], scrub: Scrubber, command: tuple[str, ...]
) -> tuple[str, ...]:
    """The run's extra variables, secrets masked, kept as `<artifacts>/extravars` (0600), and the
    recorded command (`command` file and the returned argv) pointed at that copy instead of the
    private data dir that is gone after the run: the command can be rerun by hand (with secrets
    given again) and shows what the run was given."""
    if not art.is_dir():
        return command
    kept = art / "extravars"
    with contextlib.suppress(FileNotFoundError):
        kept.unlink()
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(scrub.data(json.loads(json.dumps(dict(extravars)))), fh, indent=1)
    old, new = f"@{pdd / 'env' / 'extravars'}", f"@{kept}"
    recorded = art / "command"
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(recorded.read_text(encoding="utf-8"))
        data["command"] = [new if c == old else c for c in data.get("command") or []]
        recorded.write_text(json.dumps(data), encoding="utf-8")
    return tuple(new if c == old else c for c in command)


# events from the playbook's start on (verbose, warning and deprecation events come before it,
# while ansible-playbook still reads the -e file and parses the inventory)
STARTED_EVENTS = ("playbook_on_", "runner_on_", "runner_item_", "runner_retry")


def keep_event(events_dir: Path, event: dict[str, Any]) -> Path | None:
    """Write one event to `job_events/<counter>-<uuid>.json` as ansible-runner does (the same
    name and JSON, 0600, through a temporary file and a rename), in one write: ansible-runner's
    json.dump into a codecs writer makes a write call per JSON token. None if not written."""
    counter, uuid = event.get("counter"), event.get("uuid")
    if counter is None or not uuid:
        return None
    path = events_dir / f"{counter}-{uuid}.json"
    tmp = path.with_name(path.name + ".tmp")
    try:
        data = json.dumps(event).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        tmp.replace(path)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return path


class _EventSink:
    """ansible-runner's event handler: each event scrubbed (in place), handed to `on_event`, and
    kept in job_events/ (written here, `kept`; ansible-runner writes any this could not)."""

    def __init__(
        self, events_dir: Path, scrub: Scrubber, on_event: EventHandler, secrets_file: list[Path]
    ) -> None:
        self.events_dir = events_dir
        self.scrub = scrub
        self.on_event = on_event
        self.secrets_file = secrets_file
        self.kept: set[Path] = set()

    def __call__(self, event: dict[str, Any]) -> bool:
        if self.secrets_file and str(event.get("event", "")).startswith(STARTED_EVENTS):
            # ansible-playbook has read -e @file (its inventory parsing too) before the playbook
            # starts: the unmasked values go now, not at the end (a SIGKILL would leave them)
            with contextlib.suppress(OSError):
                self.secrets_file.pop().unlink()
        self.scrub.data(event)  # in place, before the event is kept
        self.on_event(event)
        path = keep_event(self.events_dir, event)
        if path is None:
            return True  # ansible-runner writes it (and the scrub after the run reads it)
        self.kept.add(path)
        return False  # written already


@contextlib.contextmanager
def _prompt_close() -> Iterator[None]:
    """ansible-runner reads ansible-playbook's pty while the process lives, then closes it; the
    close (ptyprocess) sleeps `delayafterclose` (0.1 s) to let the kernel update the status of a
    child it may have to kill. The child has ended and been reaped by then (`terminated`): that
    sleep only delays every run's end by 0.1 s. It is skipped for a child that has ended; a live
    one is closed as before."""
    try:
        from ptyprocess import PtyProcess  # noqa: PLC0415 - ansible-runner's pty (pexpect's)
    except ImportError:  # pragma: no cover - a dependency of pexpect
        yield
        return
    original = PtyProcess.close

    def close(self: Any, force: bool = True) -> None:  # noqa: ANN401
        if getattr(self, "terminated", False):
            self.delayafterclose = 0
        original(self, force)

    PtyProcess.close = close
    try:
        yield
    finally:
        PtyProcess.close = original


def scrubber_for(req: RunRequest) -> Scrubber:
    values = secret_values(dict(req.extravars)) | set(req.secrets)
    if req.become_password:
        values.add(req.become_password)
    return Scrubber(values)


def _signal_handlers() -> dict[int, Any]:
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {
        int(sig): signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }


def _cancel_on_signals(saved: dict[int, Any]) -> Any:  # noqa: ANN401 - a Callable[[], bool]
    """INT, TERM and HUP (a dropped SSH session to the controller) cancel the run alike: the
    callback ansible-runner polls (was: HUP killed provision and left ansible-playbook running)."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    stop = threading.Event()
    for sig in saved:
        signal.signal(sig, lambda _n, _f: stop.set())
    return stop.is_set


def become_subreaper() -> bool:
    """Linux: orphaned descendants (ansible-core's workers call setsid; ssh ControlPersist
    masters daemonize) are re-parented to provision, not to init, so a cancelled run can find
    and stop them (prctl PR_SET_CHILD_SUBREAPER)."""
    import ctypes  # noqa: PLC0415

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def descendants(root: int, *, spare: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """Live processes below `root` (from /proc), nearest first; not below those in `spare`.
    A scan of every /proc/<pid>/stat (about 20 ms with 100 processes): the kernel's
    /proc/<pid>/task/*/children is documented as unreliable for running processes, and this
    list decides which processes a cancel kills."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields and fields[0] != "Z":
            parent[int(d.name)] = int(fields[1])
    out: list[int] = []
    frontier = [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier and p not in out
                and p not in spare]
        out.extend(kids)
        frontier = kids
    return out


def stop_process_tree(
    root: int, *, spare: set[int] | frozenset[int] = frozenset(), tries: int = 200
) -> list[int]:
    """SIGKILL every process below `root` but `spare` (and theirs) and reap them, until none is
    left (or `tries` rounds of 50 ms). Returns the pids stopped. Used after a cancelled run, before
    its locks are released."""
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    stopped: list[int] = []
    for _ in range(tries):
        left = [p for p in descendants(root, spare=spare) if p not in spare]
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            if pid not in stopped:
                stopped.append(pid)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        time.sleep(0.05)
    for pid in stopped:  # those re-parented to us: reaped, not left as zombies (1 s at most)
        with contextlib.suppress(ChildProcessError):
            for _ in range(100):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
                time.sleep(0.01)
    return stopped


def _restore_signal_handlers(saved: dict[int, Any]) -> None:
    import signal  # noqa: PLC0415

    for sig, handler in saved.items():
        if handler is not None:
            signal.signal(sig, handler)


def run_playbook(req: RunRequest, on_event: EventHandler) -> RunResult:
    """Run one playbook through ansible-runner; blocks; events go to `on_event` as they come."""
    import shlex  # noqa: PLC0415

    import ansible_runner  # noqa: PLC0415 - the only import of ansible_runner, lazy by design

    if not req.inventory.is_absolute() or not req.inventory.exists():
        raise UsageProblem(f"inventory {req.inventory} does not exist (or is not absolute)")
    if not (req.project_dir / req.playbook).is_file():
        raise SetupError(f"playbook not found: {req.project_dir / req.playbook}")
    find_ansible_playbook()
    req.artifact_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    scrub = scrubber_for(req)

    secrets_file: list[Path] = []
    handle = _EventSink(req.artifact_dir / req.ident / "job_events", scrub, on_event, secrets_file)

    passwords: dict[str, str] = {}
    if req.become_password is not None:
        passwords = {r"^BECOME password.*:\s*?$": req.become_password}

    extravars = dict(req.extravars)
    if req.become is False:
        extravars["ansible_become"] = False
    cmdline = build_cmdline(req)
    with tempfile.TemporaryDirectory(prefix="provision-pdd-") as pdd:
        secrets_file.append(write_extravars(Path(pdd), extravars))
        kwargs: dict[str, Any] = {
            "private_data_dir": pdd,
            "project_dir": str(req.project_dir),
            "playbook": req.playbook,
            "roles_path": [str(req.roles_path)] if req.roles_path else None,
            "inventory": str(req.inventory),
            "limit": req.limit,
            "tags": req.tags,
            "skip_tags": req.skip_tags,
            "verbosity": req.verbosity or None,
            "forks": req.forks,
            "cmdline": shlex.join(cmdline) if cmdline else None,
            "passwords": passwords,
            "envvars": build_env(req),
            "artifact_dir": str(req.artifact_dir),
            "ident": req.ident,
            "rotate_artifacts": req.rotate,
            "suppress_env_files": True,
            "quiet": True,
            "event_handler": handle,
        }
        # ansible-runner installs SIGINT/SIGTERM handlers that cancel the run (status "canceled",
        # exit 130) and never restores the previous ones: restore them, or a later Ctrl-C is lost
        saved = _signal_handlers()
        kwargs["cancel_callback"] = _cancel_on_signals(saved)
        spare = set(descendants(os.getpid()))  # processes of ours that are not the run's
        canceled = True
        try:
            r = ansible_runner.interface.init_runner(**kwargs)
            r.config.env = {**filter_env(r.config.env), **build_env(req)}
            command = tuple(scrub.text(str(c)) for c in (getattr(r.config, "command", None) or ()))
            with _prompt_close():
                r.run()
            canceled = str(r.status) == "canceled"
        finally:
            if canceled:
                # ansible-runner kills ansible-playbook's process group; workers in sessions of
                # their own (setsid) outlive it: stop them before anyone releases the locks
                stop_process_tree(os.getpid(), spare=spare)
            _restore_signal_handlers(saved)
            art = req.artifact_dir / req.ident
            scrub.tree(art, skip=handle.kept)  # stdout, command (the kept events are already)
            command = keep_extravars(art, Path(pdd), extravars, scrub, command)
        stats = r.stats or {}
        status, rc = str(r.status), int(r.rc if r.rc is not None else 1)
    clean = {k: {str(h): int(n) for h, n in (stats.get(k) or {}).items()} for k in STAT_KEYS}
    return RunResult(
        status=status,
        rc=rc,
        artifacts=req.artifact_dir / req.ident,
        stats=clean,
        command=command,
    )
