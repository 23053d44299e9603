"""One simulated host: an overlay of the base, a supervisor that boots it with systemd-nspawn (and
boots it again when the guest reboots, exit 133), readiness, commands, reboot, teardown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lab import cgroups, payload
from lab.profiles import HOST_DESCRIPTION, host_description
from lab.util import LabError, clean_env, remove_tree, run, unmount_all

# where the simulated Secure Boot state answers (sudo's secure_path and root's PATH search it first)
MOKUTIL = "/usr/local/sbin/mokutil"
# the simulated `modprobe nvidia` + udev (payload/nvidia_loader.py), written into every host
LOADER = "/usr/lib/fake-nvidia/loader"
GENERATOR = "/usr/lib/systemd/system-generators/provision-lab-nvidia"

SUPERVISOR = r"""
set -u
merged=$1; machine=$2; hostdir=$3; shift 3
for cg in "$@"; do mkdir -p "$cg" && echo $$ > "$cg/cgroup.procs"; done
child=
trap 'if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi; exit 0' TERM INT
while :; do
  systemd-nspawn --quiet --register=no --keep-unit --directory="$merged" --machine="$machine" \
    --boot --console=pipe --link-journal=no --resolv-conf=off --timezone=off </dev/null &
  child=$!
  echo "$child" > "$hostdir/nspawn.pid"
  wait "$child"; rc=$?
  echo "[provision-lab] nspawn exited with $rc at $(date +%T)"
  [ "$rc" = 133 ] || exit "$rc"
done
"""


@dataclass(frozen=True)
class RunResult:
    """What a command on a host returned."""

    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass
class Host:
    """A lab host: `name` is its hostname (gpu01..), `machine` its unique nspawn machine name."""

    name: str
    address: str
    machine: str
    dir: Path
    profile: str
    user: str
    key: Path

    def to_json(self) -> dict[str, str]:
        data = asdict(self)
        return {k: str(v) for k, v in data.items()}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> Host:
        return cls(
            name=data["name"],
            address=data["address"],
            machine=data["machine"],
            dir=Path(data["dir"]),
            profile=data["profile"],
            user=data["user"],
            key=Path(data["key"]),
        )

    @property
    def merged(self) -> Path:
        return self.dir / "merged"

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(c) for c in (task / "children").read_text(encoding="utf-8").split()]
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


class HostRuntime:
    """Process-level control of one host (prepare, boot, wait, run, reboot, stop)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._proc: subprocess.Popen[bytes] | None = None

    # ----------------------------------------------------------------- preparation
    def prepare(
        self, lowerdir: str | Path, etc_hosts: str, files: dict[str, bytes] | None = None
    ) -> str:
        """Mount the overlay (lowerdir: the base's layers and rootfs) and write the per-host files
        (plus `files`: path -> content); returns the host's public key line."""
        h = self.host
        for sub in ("upper", "work", "merged"):
            (h.dir / sub).mkdir(parents=True, exist_ok=True)
        run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={lowerdir},upperdir={h.dir / 'upper'},workdir={h.dir / 'work'}",
                h.merged,
            ]
        )
        m = h.merged
        (m / "etc/hostname").write_text(h.name + "\n", encoding="utf-8")
        (m / "etc/hosts").write_text(etc_hosts, encoding="utf-8")
        (m / "etc/ssh/sshd_config.d/20-listen.conf").write_text(
            f"ListenAddress {h.address}\n", encoding="utf-8"
        )
        keyfile = m / "etc/ssh/ssh_host_ed25519_key"
        if not keyfile.exists():
            run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"root@{h.name}",
                    "-f",
                    keyfile,
                ]
            )
        lspci = m / "usr/local/bin/lspci"
        lspci.write_text(payload.read("lspci.py"), encoding="utf-8")
        lspci.chmod(0o755)
        # the simulated kernel log of the GPUs (NVRM lines, injected Xids): issue 19's health tier
        dmesg = m / "usr/local/bin/dmesg"
        dmesg.write_text(payload.read("dmesg.py"), encoding="utf-8")
        dmesg.chmod(0o755)
        # the simulated module loading + udev binding (lab infrastructure, not in any package)
        loader = m / LOADER.lstrip("/")
        loader.parent.mkdir(parents=True, exist_ok=True)
        loader.write_text(payload.read("nvidia_loader.py"), encoding="utf-8")
        loader.chmod(0o755)
        gen = m / GENERATOR.lstrip("/")
        gen.parent.mkdir(parents=True, exist_ok=True)
        if not gen.is_symlink():
            gen.symlink_to(LOADER)
        (m / "lib/modules" / os.uname().release).mkdir(parents=True, exist_ok=True)
        for rel, data in (files or {}).items():
            dest = m / rel.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        self.write_description(h.profile)
        pub = (m / "etc/ssh/ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()
        return f"{h.address},{h.name} {pub[0]} {pub[1]}"

    def write_description(self, profile: str, driver: str = "auto") -> None:
        path = self.host.merged / HOST_DESCRIPTION.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(host_description(profile, self.host.name, driver), indent=2) + "\n",
            encoding="utf-8",
        )
        tmp.rename(path)
        self.host.profile = profile

    def write_secure_boot(self, enabled: bool | None) -> None:
        """Simulate the Secure Boot state as `mokutil --sb-state` reports it (None: no mokutil, as
        on a host without the package and without EFI variables: state "unsupported")."""
        path = self.host.merged / MOKUTIL.lstrip("/")
        if enabled is None:
            path.unlink(missing_ok=True)
            return
        state = "enabled" if enabled else "disabled"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            "#!/bin/sh\n# provision lab: simulated mokutil (Secure Boot state only)\n"
            f'if [ "$1" = "--sb-state" ]; then echo "SecureBoot {state}"; exit 0; fi\n'
            'echo "mokutil (provision lab): only --sb-state is simulated" >&2; exit 1\n',
            encoding="utf-8",
        )
        tmp.chmod(0o755)
        tmp.rename(path)

    # ----------------------------------------------------------------- boot
    def start(self) -> None:
        h = self.host
        (h.dir / "nspawn.pid").unlink(missing_ok=True)
        log = h.console_log.open("ab")
        cgs = [str(c) for c in cgroups.host_cgroups(h.machine)]
        self._proc = subprocess.Popen(
            [
                "bash",
                "-c",
                SUPERVISOR,
                "provision-lab-host",
                str(h.merged),
                h.machine,
                str(h.dir),
                *cgs,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            start_new_session=True,
        )
        log.close()
        (h.dir / "supervisor.pid").write_text(f"{self._proc.pid}\n", encoding="utf-8")

    def supervisor_pid(self) -> int | None:
        return self._proc.pid if self._proc else _read_pid(self.host.dir / "supervisor.pid")

    def nspawn_pid(self) -> int | None:
        return _read_pid(self.host.dir / "nspawn.pid")

    def init_pid(self) -> int | None:
        """PID (in our namespace) of the guest's systemd, if it is running."""
        npid = self.nspawn_pid()
        if npid is None or not _alive(npid):
            return None
        for child in _children(npid):
            if _comm(child) == "systemd":
                return child
        return None

    def wait_ready(self, timeout: float = 120.0, previous_boot: str | None = None) -> str:
        """Wait until `systemctl is-system-running --wait` answers inside; returns the state."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            sup = self.supervisor_pid()
            if (
                sup is not None
                and not _alive(sup)
                and (self._proc is None or self._proc.poll() is not None)
            ):
                raise LabError(
                    f"{self.host.name}: supervisor exited; console:\n{self.console_tail()}"
                )
            pid = self.init_pid()
            if pid is None:
                time.sleep(0.1)
                continue
            remaining = max(1.0, deadline - time.monotonic())
            res = self._nsenter(
                pid, ["systemctl", "is-system-running", "--wait"], timeout=remaining
            )
            last = res.stdout.strip() or res.stderr.strip()
            if last in ("running", "degraded"):
                if previous_boot is not None and self.boot_id() == previous_boot:
                    time.sleep(0.1)
                    continue
                return last
            if last in ("stopping", "offline", "maintenance") or not res.ok:
                time.sleep(0.2)
        raise LabError(
            f"{self.host.name}: not ready after {timeout:.0f}s (last: {last!r}); "
            f"console:\n{self.console_tail()}"
        )

    def console_tail(self, lines: int = 30) -> str:
        try:
            text = self.host.console_log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ----------------------------------------------------------------- commands
    def _nsenter(
        self, pid: int, argv: list[str], timeout: float | None = 60.0, input_text: str | None = None
    ) -> RunResult:
        cmd = ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-p", "-r", "-w", "--", *argv]
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                input=input_text,
                env=clean_env(HOME="/root", TERM="dumb"),
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout if isinstance(exc.stdout, str) else ""
            return RunResult(124, out, f"timed out after {timeout}s")
        return RunResult(proc.returncode, proc.stdout, proc.stderr)

    def run_nsenter(
        self, command: str, timeout: float | None = 120.0, input_text: str | None = None
    ) -> RunResult:
        pid = self.init_pid()
        if pid is None:
            return RunResult(255, "", f"{self.host.name} is not running")
        return self._nsenter(pid, ["/bin/sh", "-c", command], timeout, input_text)

    def run_ssh(
        self,
        command: str,
        known_hosts: Path,
        timeout: float | None = 120.0,
        user: str | None = None,
    ) -> RunResult:
        h = self.host
        cmd = [
            "ssh",
            "-i",
            str(h.key),
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "LogLevel=ERROR",
            f"{user or h.user}@{h.address}",
            command,
        ]
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return RunResult(124, "", f"timed out after {timeout}s")
        return RunResult(proc.returncode, proc.stdout, proc.stderr)

    def boot_id(self) -> str:
        res = self.run_nsenter("cat /proc/sys/kernel/random/boot_id", timeout=30)
        if not res.ok:
            raise LabError(f"{self.host.name}: cannot read boot id: {res.stderr.strip()}")
        return res.stdout.strip()

    def reboot(self, timeout: float = 120.0) -> str:
        """Reboot from inside (systemctl reboot), wait for the new boot; returns the new boot id."""
        old = self.boot_id()
        old_nspawn = self.nspawn_pid()
        self.run_nsenter("systemctl reboot", timeout=30)
        deadline = time.monotonic() + timeout
        while self.nspawn_pid() == old_nspawn and time.monotonic() < deadline:
            time.sleep(0.1)
        self.wait_ready(timeout=max(1.0, deadline - time.monotonic()), previous_boot=old)
        return self.boot_id()

    # ----------------------------------------------------------------- teardown
    def stop(self, timeout: float = 20.0) -> None:
        """Halt the guest: SIGTERM to the supervisor, which forwards it to nspawn."""
        sup = self.supervisor_pid()
        if sup is not None and _alive(sup):
            with contextlib.suppress(ProcessLookupError):
                os.kill(sup, signal.SIGTERM)

    def wait_stopped(self, timeout: float = 20.0) -> None:
        sup = self.supervisor_pid()
        deadline = time.monotonic() + timeout
        if self._proc is not None:
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        elif sup is not None:
            while _alive(sup) and time.monotonic() < deadline:
                time.sleep(0.1)
        cgroups.kill_and_remove(self.host.machine)
        npid = self.nspawn_pid()
        if npid is not None and _alive(npid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(npid, signal.SIGKILL)

    def remove(self) -> None:
        unmount_all(self.host.dir)
        remove_tree(self.host.dir)
