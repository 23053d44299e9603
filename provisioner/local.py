"""`provision --local`: provision the machine provision runs on (cloud-init user-data).

The inventory is this machine alone (named by its host name, `ansible_host: localhost`,
`ansible_connection: local`, no become: it runs as root). There is no SSH and no preflight probe.

A driver change that needs a reboot is never done in the middle of the play (the nvidia_driver
role does not reboot over a local connection): the run goes on as under `--no-reboot` and ends
with `driver.reboot` failed ("reboot required"). Then, when the machine runs systemd, provision

1. keeps what the next run needs in `<state dir>/resume/` (0700): `state.json` (the run, the boot
   id, the command), a copy of the stack, and the `-e` values (`extra-vars.json`, 0600: they may
   hold secrets, and unit files are world-readable);
2. writes and enables `/etc/systemd/system/provision-resume.service`, a oneshot unit with
   `ConditionPathExists=<state dir>/resume/state.json` that runs `provision --local` with the same
   stack, `-e` values, tags and report directory;
3. says so on stderr and reboots (`systemctl reboot`).

After the boot, the unit's run sees the state from an earlier boot: it disables the unit and
removes the resume directory, provisions (every role again: they are idempotent), writes the
report and removes the unit file. It never reboots a second time: if the driver still needs a
reboot after the one it arranged, the run fails with that (exit 1) and leaves the machine as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner import extravars as ev
from provisioner.exitcodes import SetupError, UsageProblem
from provisioner.inventory import Target
from provisioner.report_model import Report
from provisioner.settings import Settings

UNIT_NAME = "provision-resume.service"
UNIT_DIR = Path("/etc/systemd/system")
STATE_SCHEMA = 1
MAX_RESUMES = 1  # reboots provision arranges in a row; more would risk a boot loop

Say = Callable[[str], None]
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=120)


@dataclass
class System:
    """What `--local` touches outside the Ansible run (the tests give their own)."""

    unit_dir: Path = UNIT_DIR
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    systemd_marker: Path = Path("/run/systemd/system")  # exists when systemd is PID 1
    run: Runner = _run
    euid: Callable[[], int] = os.geteuid
    hostname: Callable[[], str] = socket.gethostname
    calls: list[list[str]] = field(default_factory=list)

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = ["systemctl", *args]
        self.calls.append(argv)
        return self.run(argv)

    def boot_id(self) -> str:
        try:
            return self.boot_id_file.read_text(encoding="utf-8").strip()
        except OSError:
            return ""

    def has_systemd(self) -> bool:
        return self.systemd_marker.is_dir()

    @property
    def unit_path(self) -> Path:
        return self.unit_dir / UNIT_NAME


def local_target(system: System) -> Target:
    """This machine, by its host name, reached through the local connection."""
    name = (system.hostname() or "").strip() or "localhost"
    return Target(name=name, address="localhost", connection="local")


def _ansible_bool(value: object) -> bool:
    """The value as the role's `| bool` reads it: Ansible's own filter (was: a list of strings
    that let `1.0` through)."""
    from ansible.plugins.filter.core import to_bool  # noqa: PLC0415 - lazy, heavy

    return bool(to_bool(value))


def check(s: Settings, given_vars: dict[str, Any], system: System) -> None:
    """Before anything runs: root, and no variable that would reboot in the middle of the play."""
    if system.euid() != 0:
        raise UsageProblem(
            "--local runs as root (it installs packages, writes the resume unit and reboots): "
            "run it with sudo, or from cloud-init user-data (runcmd runs as root)"
        )
    if _ansible_bool(given_vars.get("nvidia_driver_reboot_local", False)):
        raise UsageProblem(
            "--local with -e nvidia_driver_reboot_local=true would reboot in the middle of the "
            "play; provision --local reboots after the run and resumes after boot instead"
        )


# ---------------------------------------------------------------------------- the resume state


@dataclass(frozen=True)
class ResumeState:
    run_id: str
    boot_id: str
    created: str
    attempt: int  # reboots arranged in a row, this one included
    command: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": STATE_SCHEMA, "run_id": self.run_id, "boot_id": self.boot_id,
                "created": self.created, "attempt": self.attempt, "command": self.command}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResumeState:
        return cls(
            run_id=str(d.get("run_id") or "?"),
            boot_id=str(d.get("boot_id") or ""),
            created=str(d.get("created") or ""),
            attempt=int(d.get("attempt") or 1),
            command=[str(x) for x in d.get("command") or []],
        )


def resume_dir(state_root: Path) -> Path:
    return state_root / "resume"


def state_file(state_root: Path) -> Path:
    return resume_dir(state_root) / "state.json"


def read_state(state_root: Path) -> ResumeState | None:
    path = state_file(state_root)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SetupError(f"{path}: unreadable resume state ({exc}); remove it") from exc
    if not isinstance(raw, dict):
        raise SetupError(f"{path}: unreadable resume state (not a mapping); remove it")
    return ResumeState.from_dict(raw)


def _disable(system: System, say: Say) -> None:
    if system.unit_path.exists() or system.has_systemd():
        res = system.systemctl("disable", UNIT_NAME)
        if res.returncode != 0 and system.unit_path.exists():
            say(f"warning: `systemctl disable {UNIT_NAME}` failed: {res.stderr.strip()}")


def _clear(state_root: Path, system: System, say: Say) -> None:
    """Disable and remove the unit (not running), remove the resume directory."""
    _disable(system, say)
    with contextlib.suppress(FileNotFoundError):
        system.unit_path.unlink()
    if system.has_systemd():
        system.systemctl("daemon-reload")
    shutil.rmtree(resume_dir(state_root), ignore_errors=True)


def begin(state_root: Path, system: System, say: Say) -> ResumeState | None:
    """At the start of a `--local` run: consume a resume state. Returns it when this run is the
    resume after the reboot it arranged (an earlier boot); None otherwise.

    The resumed run is the unit's own process: the unit is disabled (its file stays until the run
    ends, `finish()`: a daemon-reload without it would drop the unit's settings, its start
    timeout among them, while it runs) and the resume directory removed (the stack and the -e
    values were read before this)."""
    st = read_state(state_root)
    if st is None:
        return None
    if st.boot_id and st.boot_id == system.boot_id():
        say(f"note: run {st.run_id} arranged a resume after a reboot, but the machine has not "
            "rebooted since; this run replaces it")
        _clear(state_root, system, say)
        return None
    say(f"resuming after the reboot that run {st.run_id} arranged ({st.created}): "
        f"{UNIT_NAME} disabled; provisioning again")
    _disable(system, say)
    shutil.rmtree(resume_dir(state_root), ignore_errors=True)
    return st


def finish(system: System) -> None:
    """At the end of the resumed run: the (disabled) unit file goes too; systemd forgets it at
    its next reload."""
    with contextlib.suppress(FileNotFoundError):
        system.unit_path.unlink()


# ---------------------------------------------------------------------------- arranging a resume


def reboot_needed(report: Report) -> bool:
    """A host of the report failed driver.reboot (the new driver is installed, not loaded)."""
    return any(
        c.id == "driver.reboot" and c.status == "fail"
        for h in report.hosts.values()
        for c in h.checks
    )


def provision_command() -> list[str]:
    """How to run this same provision again: the console script beside the interpreter, or
    `python -m provisioner`."""
    script = Path(sys.executable).parent / "provision"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "provisioner"]


def _plain(arg: str) -> bool:
    return bool(arg) and all(c.isalnum() or c in "@+=:,./-_" for c in arg)


def systemd_quote(arg: str) -> str:
    """One word of a unit's ExecStart= (systemd.service(5) "Command lines"): `%` and `$`
    doubled (specifiers, variables), anything unusual in double quotes with C escapes."""
    text = arg.replace("%", "%%").replace("$", "$$")
    if _plain(arg):
        return text
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def resume_command(s: Settings, state_root: Path, *, extra: bool) -> list[str]:
    d = resume_dir(state_root)
    argv = [*provision_command(), "--local"]
    if s.stack_path is not None:
        argv += ["--stack", str(d / "stack.yml")]
    if extra:
        argv += ["-e", f"@{d / 'extra-vars.json'}"]
    if s.tags:
        argv += ["--tags", s.tags]
    if s.skip_tags:
        argv += ["--skip-tags", s.skip_tags]
    if s.forks:
        argv += ["--forks", str(s.forks)]
    if s.diff:
        argv.append("--diff")
    if s.verbosity:
        argv.append("-" + "v" * s.verbosity)
    if s.report_dir is not None:
        argv += ["--report-dir", str(s.report_dir.expanduser().resolve())]
    return argv


def unit_text(argv: list[str], state_root: Path, run_id: str) -> str:
    cond = systemd_quote(str(state_file(state_root)))
    env = systemd_quote(f"PROVISION_STATE_DIR={state_root}")
    return f"""\
# Written by `provision --local` (run {run_id}): resumes the provisioning after the reboot that
# loads the new NVIDIA driver. The run it starts disables and removes this unit first.
[Unit]
Description=provision: resume the local provisioning after the driver reboot
Wants=network-online.target
After=network-online.target cloud-final.service
ConditionPathExists={cond}

[Service]
Type=oneshot
Environment=LANG=C.UTF-8 HOME=/root
Environment={env}
ExecStart={" ".join(systemd_quote(a) for a in argv)}
TimeoutStartSec=infinity
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
"""


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    path.chmod(0o600)


@dataclass(frozen=True)
class Outcome:
    arranged: bool
    rebooting: bool
    message: str


def after_run(
    s: Settings,
    report: Report,
    state_root: Path,
    system: System,
    say: Say,
    *,
    resumed: ResumeState | None,
) -> Outcome | None:
    """After a `--local` full run: when the driver needs a reboot, arrange the resume and reboot
    (or say why not). None when there is nothing to do."""
    if resumed is not None:
        finish(system)
    if s.command != "run" or s.ansible_check or s.no_reboot or not reboot_needed(report):
        return None
    sys.stdout.flush()  # the summary first, then what happens next (stderr)
    if resumed is not None and resumed.attempt >= MAX_RESUMES:
        msg = (
            f"the NVIDIA driver still needs a reboot after the reboot that run {resumed.run_id} "
            "arranged: not rebooting again (that could loop). Look at the driver.* checks above "
            "(driver.module_loaded, driver.next_boot), fix the cause, then reboot and run "
            "`provision --local` again"
        )
        say(f"error: {msg}")
        return Outcome(False, False, msg)
    if not system.has_systemd():
        msg = (
            "the NVIDIA driver needs a reboot, and this machine does not run systemd, so "
            "provision cannot resume after boot: reboot it, then run `provision --local` again"
        )
        say(msg)
        return Outcome(False, False, msg)
    d = resume_dir(state_root)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True, mode=0o700)
    d.chmod(0o700)
    if s.stack_path is not None:  # copied: a stack under /tmp would not survive the reboot
        _write_private(d / "stack.yml", s.stack_path.expanduser().read_text(encoding="utf-8"))
    given = ev.parse(s.extra_vars)
    if given:
        _write_private(d / "extra-vars.json", json.dumps(given, indent=2, default=str) + "\n")
    argv = resume_command(s, state_root, extra=bool(given))
    st = ResumeState(
        run_id=report.run_id,
        boot_id=system.boot_id(),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        attempt=(resumed.attempt if resumed else 0) + 1,
        command=argv,
    )
    system.unit_dir.mkdir(parents=True, exist_ok=True)
    system.unit_path.write_text(unit_text(argv, state_root, report.run_id), encoding="utf-8")
    system.unit_path.chmod(0o644)
    _write_private(state_file(state_root), json.dumps(st.to_dict(), indent=2) + "\n")
    for args in (("daemon-reload",), ("enable", UNIT_NAME)):
        res = system.systemctl(*args)
        if res.returncode != 0:
            msg = (f"the NVIDIA driver needs a reboot, but `systemctl {' '.join(args)}` failed "
                   f"({res.stderr.strip() or res.returncode}): reboot the machine yourself and "
                   "run `provision --local` again")
            _clear(state_root, system, say)
            say(f"error: {msg}")
            return Outcome(False, False, msg)
    say(f"reboot required to load the NVIDIA driver: {UNIT_NAME} (enabled) runs "
        f"`{' '.join(argv)}` after boot and writes the report; rebooting now")
    sys.stderr.flush()
    res = system.systemctl("reboot")
    if res.returncode != 0:
        msg = (f"`systemctl reboot` failed ({res.stderr.strip() or res.returncode}): reboot the "
               f"machine yourself; {UNIT_NAME} resumes after boot")
        say(f"error: {msg}")
        return Outcome(True, False, msg)
    return Outcome(True, True, "rebooting; provisioning resumes after boot")
