"""`--wait DURATION`: wait for new hosts before the preflight.

Per host, in parallel threads, within one bound (DURATION from the start):

1. SSH answers: TCP connect, the SSH banner and a login, retried (1 s, growing to 5 s between tries)
   while the connection is refused, times out, sends no banner, stalls in the key exchange or
   refuses the key (cloud-init may not have installed it yet). The host key is checked as the
   preflight checks it (`provisioner.ssh_preflight.connect`): an unknown key is accepted only with
   `--accept-new-host-keys`, and an unknown, changed or revoked key ends the wait at once (waiting
   cannot fix it).
2. cloud-init finished, where the host has cloud-init: `cloud-init status --wait` over that login,
   bounded by what is left of DURATION. A lost connection (cloud-init rebooting the machine) goes
   back to step 1.

Progress lines go to stderr: what each host is waiting for, on every change and every 15 s. When
the bound passes, the host gets one check: `ssh.connect` (or `ssh.resolve`, `ssh.auth`) with status
unreachable (exit 3), or `ssh.cloud_init` with status failed (exit 1), naming the host and what it
was waiting for. cloud-init ending in `status: error` also fails the host (`ssh.cloud_init`); a
degraded finish (exit 2, recoverable errors) is a warning.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from provisioner import inventory as inv
from provisioner.inventory import Target
from provisioner.settings import Settings
from provisioner.ssh_preflight import (
    ProbeOptions,
    SshProbeResult,
    connect,
    not_probed,
    probe_options,
    quiet_paramiko,
)

Say = Callable[[str], None]

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")
MAX_SECONDS = 7 * 24 * 3600.0


def parse_duration(text: str) -> float:
    """`10m`, `300s`, `1h30m`, `90` (seconds) -> seconds; ValueError for anything else."""
    t = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        seconds = float(t)
    else:
        m = _DURATION.fullmatch(t)
        if not t or m is None or not any(m.groups()):
            raise ValueError(f"{text!r} is not a duration (examples: 10m, 300s, 1h30m)")
        h, mi, s = m.groups()
        seconds = int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)
    if seconds <= 0:
        raise ValueError(f"{text!r}: the duration must be more than 0")
    if seconds > MAX_SECONDS:
        raise ValueError(f"{text!r}: at most 7 days (168h)")
    return seconds


def format_duration(seconds: float) -> str:
    """600 -> `10m`, 5400 -> `1h30m`, 75 -> `1m15s`, 4.2 -> `4s`."""
    total = round(seconds)
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s or not (h or m) else "")


# Run over the login: is there a cloud-init, and if so its `status --wait`, bounded by `timeout`
# where coreutils has it. The exit status is cloud-init's (0 done, 1 error, 2 degraded).
CLOUD_INIT_SCRIPT = """\
if ! command -v cloud-init >/dev/null 2>&1; then echo '==cloud-init absent'; exit 0; fi
echo '==cloud-init present'
if command -v timeout >/dev/null 2>&1; then exec timeout {limit} cloud-init status --wait
else exec cloud-init status --wait; fi
"""
CLOUD_INIT_OUTPUT_LIMIT = 64 * 1024  # bytes of `cloud-init status --wait` output kept (the tail)
CLOUD_INIT_RUNNING = "cloud-init is running: waiting for `cloud-init status --wait`"
CLOUD_INIT_FIX = (
    "look at `cloud-init status --long` and /var/log/cloud-init-output.log on the host"
)


@dataclass(frozen=True)
class WaitOptions:
    budget_s: float
    heartbeat_s: float = 15.0
    first_delay_s: float = 1.0
    max_delay_s: float = 5.0
    poll_s: float = 0.5


@dataclass(frozen=True)
class _Env:
    """What every host's wait shares."""

    probe: ProbeOptions
    opts: WaitOptions
    lock: threading.Lock  # known_hosts appends
    say: Say
    clock: Callable[[], float]
    sleep: Callable[[float], None]


@dataclass
class _CloudInit:
    outcome: str  # absent | done | disabled | degraded | error | running (timed out) | lost
    status: str = ""  # the last `status:` value cloud-init printed
    rc: int = 0


def _status_line(text: str) -> str:
    found = re.findall(r"^\s*\.*\s*status:\s*(.+?)\s*$", text, re.MULTILINE)
    return found[-1] if found else ""


class _HostWait:
    """One host's wait (runs in its own thread)."""

    def __init__(self, target: Target, env: _Env) -> None:
        self.t = target
        self.probe = env.probe
        self.opts = env.opts
        self.lock = env.lock
        self.say = env.say
        self.clock = env.clock
        self.sleep = env.sleep
        self.start = env.clock()
        self.deadline = self.start + env.opts.budget_s
        self.result = SshProbeResult(host=target.name, address=target.address, port=target.port)
        self._last_line = ""
        self._last_said = self.start

    # ------------------------------------------------------------------ output
    @property
    def where(self) -> str:
        return f"{self.t.address}:{self.t.port}"

    def elapsed(self) -> str:
        spent = format_duration(self.clock() - self.start)
        return f"{spent} of {format_duration(self.opts.budget_s)}"

    def tell(self, line: str, *, heartbeat: bool = False) -> None:
        """A progress line: always when it changes, else once per heartbeat."""
        now = self.clock()
        if heartbeat and line == self._last_line and now - self._last_said < self.opts.heartbeat_s:
            return
        self._last_line, self._last_said = line, now
        self.say(f"wait {self.t.name}: {line} ({self.elapsed()})")

    # ------------------------------------------------------------------ the wait
    def run(self) -> SshProbeResult:
        skip = not_probed(self.t)
        if skip:
            self.result.status = "skipped"
            self.result.message = skip.replace("not probed", "not waited for")
            return self.result
        self.say(
            f"wait {self.t.name}: waiting up to {format_duration(self.opts.budget_s)} for SSH on "
            f"{self.where}, then for cloud-init"
        )
        try:
            self._loop()
        finally:
            self.result.seconds = round(self.clock() - self.start, 3)
        return self.result

    def left(self) -> float:
        return float(self.deadline - self.clock())

    def _loop(self) -> None:
        delay = self.opts.first_delay_s
        last: SshProbeResult | None = None
        while True:
            left = self.left()
            if left <= 0:
                self._gave_up_on_ssh(last)
                return
            attempt = SshProbeResult(host=self.t.name, address=self.t.address, port=self.t.port)
            timeout = max(1.0, min(self.probe.connect_timeout, left))
            popts = replace(self.probe, connect_timeout=timeout)
            opened = connect(self.t, popts, self.lock, attempt)
            if opened is None:
                if attempt.stage == "hostkey":  # waiting cannot fix a key: stop now
                    self._copy_failure(attempt)
                    return
                last = attempt
                self.tell(f"no SSH yet: {_short(attempt)}", heartbeat=True)
                self.sleep(max(0.0, min(delay, self.left())))
                delay = min(delay * 1.5, self.opts.max_delay_s)
                continue
            client, sock = opened
            if attempt.accepted_key:
                self.result.accepted_key = True
                self.result.fingerprint = attempt.fingerprint
                self.result.key_type = attempt.key_type
                self.result.warnings.extend(attempt.warnings)
            banner = getattr(client.get_transport(), "remote_version", "") or "SSH"
            self.tell(f"SSH answers ({banner}); logged in")
            try:
                ci = self._cloud_init(client)
            finally:
                client.close()
                sock.close()
            if ci.outcome == "lost":
                self.tell("the connection was lost while waiting for cloud-init (a reboot?); "
                          "waiting for SSH again", heartbeat=True)
                last = None
                self.sleep(max(0.0, min(delay, self.left())))
                delay = min(delay * 1.5, self.opts.max_delay_s)
                continue
            self._finish(ci)
            return

    def _cloud_init(self, client: Any) -> _CloudInit:  # noqa: ANN401 - paramiko.SSHClient
        import paramiko  # noqa: PLC0415

        limit = max(1, int(self.left()) + 5)
        try:
            transport = client.get_transport()
            chan = transport.open_session(timeout=max(1.0, min(10.0, self.left())))
            chan.settimeout(self.opts.poll_s)
            chan.exec_command("sh -c " + shlex.quote(CLOUD_INIT_SCRIPT.format(limit=limit)))
            text, ended = self._read(chan)
        except (paramiko.SSHException, OSError, EOFError):
            return _CloudInit("lost")
        if not ended:  # the bound passed
            chan.close()
            return _CloudInit("running", _status_line(text) or "running")
        while not chan.exit_status_ready() and transport.is_active() and self.left() > 0:
            self.sleep(0.05)
        rc = chan.recv_exit_status() if chan.exit_status_ready() else -1
        return _classify(text, rc)

    def _read(self, chan: Any) -> tuple[str, bool]:  # noqa: ANN401 - paramiko.Channel
        """The command's output until EOF (True) or the bound (False), with progress lines."""
        out = bytearray()
        said_running = cut = False
        while True:
            try:
                chunk: bytes | None = chan.recv(65536)
            except TimeoutError:
                chunk = None
            if chunk:
                out += chunk
                if len(out) > CLOUD_INIT_OUTPUT_LIMIT:
                    # keep the tail (cloud-init's last `status:` line); decode it once at the end
                    # (was: the whole output kept and decoded again for every 4 KB read)
                    del out[:-CLOUD_INIT_OUTPUT_LIMIT]
                    if not cut:
                        self.tell(f"`cloud-init status --wait` printed over "
                                  f"{CLOUD_INIT_OUTPUT_LIMIT} bytes: only the last "
                                  f"{CLOUD_INIT_OUTPUT_LIMIT} kept")
                    cut = True
            if said_running or b"==cloud-init present" in out:
                self.tell(CLOUD_INIT_RUNNING, heartbeat=said_running)
                said_running = True
            if chunk == b"":  # EOF: the command ended (or the connection died)
                return out.decode("utf-8", "replace"), True
            if self.left() <= 0:
                return out.decode("utf-8", "replace"), False

    # ------------------------------------------------------------------ endings
    def _copy_failure(self, attempt: SshProbeResult) -> None:
        r = self.result
        r.status, r.stage, r.message = attempt.status, attempt.stage, attempt.message
        r.fingerprint, r.key_type = attempt.fingerprint, attempt.key_type
        self.say(f"wait {self.t.name}: {attempt.message}")

    def _gave_up_on_ssh(self, last: SshProbeResult | None) -> None:
        r = self.result
        stage = last.stage if last is not None and last.stage in ("resolve", "auth") else "connect"
        what = "a login over SSH" if stage == "auth" else "SSH to answer"
        r.status, r.stage = "unreachable", stage
        r.message = (
            f"{self.t.name}: gave up after {format_duration(self.opts.budget_s)} (--wait) waiting "
            f"for {what} on {self.where}; last: {last.message if last else 'no answer'}"
        )
        self.say(f"wait {self.t.name}: {r.message}")

    def _finish(self, ci: _CloudInit) -> None:
        r = self.result
        r.cloud_init = ci.outcome
        budget = format_duration(self.opts.budget_s)
        if ci.outcome == "running":
            r.status, r.stage = "failed", "cloud_init"
            r.message = (
                f"{self.t.name}: gave up after {budget} (--wait) waiting for cloud-init to finish "
                f"(`cloud-init status --wait` still running; last status: {ci.status}); "
                f"{CLOUD_INIT_FIX}, or give a longer --wait"
            )
        elif ci.outcome == "error":
            r.status, r.stage = "failed", "cloud_init"
            r.message = (
                f"{self.t.name}: cloud-init finished with errors (status: {ci.status}, exit "
                f"{ci.rc}); {CLOUD_INIT_FIX}"
            )
        elif ci.outcome == "absent":
            self.tell("no cloud-init on the host; ready")
            return
        else:
            if ci.outcome == "degraded":
                w = f"cloud-init finished with recoverable errors (status: {ci.status}, exit 2)"
                r.warnings.append(w)
                self.tell(f"warning: {w}")
            self.tell(f"cloud-init {ci.outcome}; ready")
            return
        self.say(f"wait {self.t.name}: {r.message}")


def _classify(text: str, rc: int) -> _CloudInit:
    """The cloud-init script's output and exit status (-1: none, the connection died)."""
    if "==cloud-init absent" in text:
        return _CloudInit("absent")
    if rc == -1:
        return _CloudInit("lost")
    status = _status_line(text)
    if rc == 0:
        return _CloudInit("disabled" if status.startswith("disabled") else "done", status, rc)
    if rc == 2:
        return _CloudInit("degraded", status, rc)
    if rc == 124:  # timeout(1) ended it: the bound passed
        return _CloudInit("running", status or "running", rc)
    return _CloudInit("error", status or f"exit {rc}", rc)


def _short(r: SshProbeResult) -> str:
    msg = r.message
    for prefix in ("cannot connect to ", "SSH to "):
        if msg.startswith(prefix):
            msg = msg.split(": ", 1)[-1]
    return f"{r.stage}: {msg}" if r.stage else msg


def wait_for_hosts(
    targets: list[Target],
    probe: ProbeOptions,
    opts: WaitOptions,
    *,
    say: Say,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[SshProbeResult]:
    """Wait for every target in parallel (daemon threads: Ctrl-C is not held up); one result per
    target, in order: status ok (skipped for local or deferred targets), or the failure."""
    quiet_paramiko()
    say_lock = threading.Lock()

    def locked_say(line: str) -> None:
        with say_lock:
            say(line)

    env = _Env(probe, opts, threading.Lock(), locked_say, clock, sleep)
    done: list[SshProbeResult | BaseException | None] = [None] * len(targets)

    def work(i: int, t: Target) -> None:
        try:
            done[i] = _HostWait(t, env).run()
        except BaseException as exc:  # reported per host below
            done[i] = exc

    threads = [
        threading.Thread(target=work, args=(i, t), name=f"wait-{t.name}", daemon=True)
        for i, t in enumerate(targets)
    ]
    for th in threads:
        th.start()
    # each host's wait ends by itself at its deadline; the slack covers one last connect attempt
    end = time.monotonic() + opts.budget_s + probe.connect_timeout * 3 + 15
    for th in threads:
        while th.is_alive() and time.monotonic() < end:
            th.join(timeout=0.5)
    results: list[SshProbeResult] = []
    for t, got in zip(targets, done, strict=True):
        if isinstance(got, SshProbeResult):
            results.append(got)
            continue
        r = SshProbeResult(host=t.name, address=t.address, port=t.port, status="unreachable",
                        stage="connect" if got is None else "error")
        r.message = (
            f"{t.name}: no end to the wait after {format_duration(opts.budget_s)} (--wait)"
            if got is None else f"{t.name}: waiting failed: {got!r}"
        )
        results.append(r)
    return results


def _echo_err(line: str) -> None:
    import click  # noqa: PLC0415

    click.echo(line, err=True)


def wait_hosts(
    s: Settings, targets: list[inv.Target], fn: Callable[..., list[SshProbeResult]] | None = None
) -> dict[str, SshProbeResult]:
    """--wait: host -> the wait's result (ok, or why it ended); {} without --wait."""
    if not s.wait or not targets:
        return {}
    results = (fn or wait_for_hosts)(
        targets, probe_options(s), WaitOptions(budget_s=float(s.wait)), say=_echo_err
    )
    return {r.host: r for r in results}
