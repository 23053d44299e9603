"""Issue 11's remaining lab cases on the Ubuntu 22.04 personality (the default): a host that comes
with Canonical's `-server` driver (adopted when it satisfies the stack, replaced with a plan line
that says so when it does not), the bounded wait for a held dpkg lock (released in time: waited
for; held past the bound: the holder named, nothing changed), and `make demo`'s own provision run
(every check passing, report.json's facts.os Ubuntu 22.04, persistence mode Enabled on every GPU in
`nvidia-smi -q`).

Model facts these rest on (lab/repos/ubuntu-jammy.yml, lab/README.md): Canonical's 535.129.03
`-server` upload to jammy (`-0ubuntu0.22.04.1`, P) and the prebuilt module's path inside
`linux-modules-nvidia-535-server-<kernel>` (P); the `-server` packages' virtual Provides/Conflicts
(canonical control @ 535-server-jammy, P).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from test_roles_helpers import (
    fingerprint,
    fingerprint_diff,
    fleet_args,
    provision_cli,
    run_playbook,
    stack_vars,
)

from lab import demo

APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0"
BRANCH = "535"  # Canonical's -server builds in the lab's archive slice (the lab stack: 580)
SERVER_V = "535.129.03"  # Canonical's jammy -server upload in the lab's archive slice
SERVER_DEB_V = SERVER_V + "-0ubuntu0.22.04.1"
NVIDIA_NEW = "535.154.05"  # the newest 535 in NVIDIA's ubuntu2204 model
REBOOT_HANDLER = "RUNNING HANDLER [provision.gpu.nvidia_driver : Reboot to load the NVIDIA driver]"
DRIVER_CHECKS = (
    "driver.branch",
    "driver.version",
    "driver.module_loaded",
    "driver.hold",
    "driver.persistence",
    "driver.fabricmanager",
    "driver.reboot",
    "driver.next_boot",
    "driver.secure_boot",
)


def sh(fleet: Any, host: str, command: str, timeout: float = 300) -> str:
    res = fleet.run(host, command, timeout=timeout)
    assert res.rc == 0, (command, res.stdout[-3000:], res.stderr[-3000:])
    return str(res.stdout)


def dpkg_versions(fleet: Any, host: str) -> dict[str, str]:
    """Installed packages (ii/hi) and their versions."""
    out = sh(fleet, host, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'")
    return {
        f[0]: f[1]
        for f in (ln.split() for ln in out.splitlines())
        if len(f) == 3 and f[2] in ("ii", "hi")
    }


def preinstall_canonical_server_driver(fleet: Any, host: str) -> dict[str, str]:
    """What an Ubuntu accelerator / cloud image comes with: Canonical's nvidia-driver-535-server
    and the signed prebuilt module for the running kernel, from Ubuntu's archive (the lab's jammy
    slice), before provision ever runs. Returns the -server packages and their versions."""
    sh(
        fleet,
        host,
        f"{APT} update && {APT} install nvidia-driver-535-server "
        "linux-modules-nvidia-535-server-$(uname -r)",
    )
    fleet.reboot(host)  # the image boots with its module loaded
    smi = sh(fleet, host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0")
    assert smi.strip() == SERVER_V, smi
    server = {
        n: v for n, v in dpkg_versions(fleet, host).items() if "-server" in n and ("nvidia" in n)
    }
    assert server["nvidia-driver-535-server"] == SERVER_DEB_V, server
    assert any(n.startswith("linux-modules-nvidia-535-server-") for n in server), server
    return server


def test_canonical_server_driver_that_satisfies_the_stack_is_adopted(
    fleet_factory: Any, tmp_path: Path
) -> None:
    """Branch 535, version 535.129.03 pinned, flavour proprietary: Canonical's packaged driver is
    adopted as it is (nothing of it removed or reinstalled, no NVIDIA driver package, no
    reboot), the plan says so, every driver check passes, and a second run changes nothing."""
    fleet = fleet_factory(1, ["h100-sxm-8"])
    host = fleet.hosts[0].name
    server = preinstall_canonical_server_driver(fleet, host)
    boot = fleet.boot_id(host)
    ev = stack_vars(
        fleet.stack_path, gpu_stack_driver_branch=BRANCH, gpu_stack_driver_version=SERVER_V
    )

    run = run_playbook(
        fleet, "site.yml", ev, tmp=tmp_path / "adopt", skip_tags="pytorch,validation"
    )
    assert run.rc == 0, run.output[-6000:]
    report = run.report(host)
    plan = report["plan"]
    assert plan[0] == (
        f"driver: adopt nvidia-driver-535-server {SERVER_DEB_V} "
        "(Canonical's packaged driver satisfies the stack)"
    ), plan
    assert not [ln for ln in plan if "nvidia-uninstall" in ln or "runfile" in ln], plan
    assert report["driver_adopted"] is True, report
    assert report["driver_package"] == "nvidia-driver-535-server", report
    checks = run.checks(host)
    bad = {k: v for k, v in checks.items() if v["status"] in ("fail", "drift")}
    assert not bad, bad
    for cid in DRIVER_CHECKS:
        assert checks[cid]["status"] == "pass", checks[cid]

    # nothing of Canonical's driver reinstalled or removed, no NVIDIA driver beside it
    after = dpkg_versions(fleet, host)
    assert {n: after.get(n) for n in server} == server
    nvidia_driver = sorted(
        n
        for n in after
        if re.match(
            r"^(nvidia-driver-\d+|cuda-drivers(-\d+)?|nvidia-utils-\d+|libnvidia-compute-\d+"
            r"|nvidia-compute-utils-\d+|nvidia-dkms-\d+|nvidia-kernel-common-\d+)$",
            n,
        )
    )
    assert nvidia_driver == [], nvidia_driver
    assert REBOOT_HANDLER not in run.output
    assert fleet.boot_id(host) == boot, "an adopted driver rebooted the host"
    assert (
        sh(fleet, host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0").strip()
        == SERVER_V
    )
    # the adopted driver is held like NVIDIA's, and its persistence mode is on
    held = sh(fleet, host, "apt-mark showhold").split()
    assert "nvidia-driver-535-server" in held, held
    modes = sh(fleet, host, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    assert set(modes.split()) == {"Enabled"}, modes
    # NVIDIA's fabric manager (NVSwitch) at the adopted driver's version, not the branch's newest
    fm = sh(
        fleet,
        host,
        "dpkg-query -W -f='${Version}\\n' nvidia-fabricmanager-535 "
        "libnvidia-nscq-535; systemctl is-active nvidia-fabricmanager",
    )
    assert fm.split() == [f"{SERVER_V}-1", f"{SERVER_V}-1", "active"], fm
    pin = sh(fleet, host, "cat /etc/apt/preferences.d/provision-nvidia-driver").splitlines()
    assert pin[1:] == [
        "Package: nvidia-fabricmanager-535 libnvidia-nscq-535",
        f"Pin: version {SERVER_V}-*",
        "Pin-Priority: 1001",
    ], pin

    again = run_playbook(
        fleet, "site.yml", ev, tmp=tmp_path / "again", skip_tags="pytorch,validation"
    )
    assert again.rc == 0, again.output[-4000:]
    changed = [ln for ln in again.output.splitlines() if ln.startswith("changed:")]
    assert again.changed(host) == 0, changed
    assert dpkg_versions(fleet, host) == after


def test_canonical_server_driver_that_does_not_satisfy_the_stack_is_replaced(
    fleet_factory: Any, tmp_path: Path
) -> None:
    """Version 535.154.05 pinned, Canonical's 535.129.03 -server installed: the plan says it is
    replaced (never the runfile / nvidia-uninstall advice), every -server package and the signed
    prebuilt module are removed, NVIDIA's 535.154.05 is installed, pinned and held, and the host
    reboots once into it."""
    fleet = fleet_factory(1, ["h100-sxm-8"])
    host = fleet.hosts[0].name
    server = preinstall_canonical_server_driver(fleet, host)
    boot = fleet.boot_id(host)
    ev = stack_vars(
        fleet.stack_path, gpu_stack_driver_branch=BRANCH, gpu_stack_driver_version=NVIDIA_NEW
    )

    run = run_playbook(
        fleet, "site.yml", ev, tmp=tmp_path / "replace", skip_tags="pytorch,validation"
    )
    assert run.rc == 0, run.output[-6000:]
    report = run.report(host)
    plan = report["plan"]
    assert plan[0] == (
        f"driver: replace Canonical's nvidia-driver-535-server {SERVER_DEB_V} with NVIDIA's "
        f"branch 535 version {NVIDIA_NEW} (its packages are removed; reboot needed)"
    ), plan
    assert not [ln for ln in plan if "nvidia-uninstall" in ln or "runfile" in ln], plan
    checks = run.checks(host)
    bad = {k: v for k, v in checks.items() if v["status"] in ("fail", "drift")}
    assert not bad, bad
    for cid in (*DRIVER_CHECKS, "driver.pin"):
        assert checks[cid]["status"] == "pass", checks[cid]
    assert report["driver_adopted"] is False, report
    assert report["driver_package"] == "nvidia-driver-535", report

    after = dpkg_versions(fleet, host)
    left = sorted(n for n in after if "nvidia" in n and ("-server" in n or n.startswith("linux-")))
    assert left == [], left
    assert not set(server) & set(after)
    for pkg in (
        "nvidia-driver-535",
        "nvidia-utils-535",
        "nvidia-compute-utils-535",
        "libnvidia-compute-535",
    ):
        assert after[pkg] == f"{NVIDIA_NEW}-0ubuntu1", (pkg, after.get(pkg))
    assert after["nvidia-fabricmanager-535"] == f"{NVIDIA_NEW}-1", after
    held = sh(fleet, host, "apt-mark showhold").split()
    assert "nvidia-driver-535" in held and "cuda-drivers-535" in held, held
    assert run.output.count(REBOOT_HANDLER) == 1, run.output[-6000:]
    assert fleet.boot_id(host) != boot
    assert (
        sh(fleet, host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0").strip()
        == NVIDIA_NEW
    )


# Stands in for unattended-upgrades after first boot: takes apt's frontend lock as apt does (a POSIX
# fcntl lock on the whole file, so apt itself would wait for it too), then keeps it until HOLD_S
# seconds after a provision run has taken the host (its provisioning lock appears), so that the
# run's probe certainly finds it held. Run as a script, its process name is `unattended-upgr`, as
# the real one's (a Python script; comm is cut to 15 characters).
HOLDER = """#!/usr/bin/python3
import fcntl, os, sys, time
fd = os.open("/var/lib/dpkg/lock-frontend", os.O_RDWR | os.O_CREAT, 0o640)
fcntl.lockf(fd, fcntl.LOCK_EX)
with open("/run/uu-hold.pid", "w") as f:
    f.write(str(os.getpid()))
deadline = time.time() + 900
while not os.path.exists("/var/lib/provision/run.lock") and time.time() < deadline:
    time.sleep(0.2)
time.sleep(float(sys.argv[1]))
"""
HOLDER_PATH = "/root/unattended-upgrades"
WAIT_BOUND_S = 40
RELEASE_AFTER_S = 20


def hold_dpkg_lock(fleet: Any, host: str, seconds: float) -> int:
    """Start the holder as a transient unit; returns its pid once the lock is held."""
    sh(
        fleet,
        host,
        f"cat > {HOLDER_PATH} <<'EOF'\n{HOLDER}EOF\nchmod 755 {HOLDER_PATH} && "
        f"systemd-run --quiet --unit=uu-hold {HOLDER_PATH} {seconds}",
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        res = fleet.run(host, "cat /run/uu-hold.pid")
        if res.rc == 0 and res.stdout.strip():
            pid = int(res.stdout)
            comm = sh(fleet, host, f"cat /proc/{pid}/comm").strip()
            assert comm == "unattended-upgr", comm
            locks = sh(fleet, host, "cat /proc/locks")
            assert re.search(rf"POSIX +ADVISORY +WRITE +{pid} ", locks), locks
            return pid
        time.sleep(0.2)
    raise AssertionError(
        "the lock holder did not start: "
        + sh(fleet, host, "systemctl status uu-hold --no-pager || true")
    )


def probe_waits(artifacts: Path, host: str) -> list[float]:
    """waited_s of every host_assess that waited for the host (runner events of the run)."""
    out = []
    events = [json.loads(p.read_text(encoding="utf-8"))
              for p in (artifacts / "job_events").glob("*.json")]
    for ev in sorted(events, key=lambda e: int(e.get("counter", 0))):  # the run's order
        data = ev.get("event_data") or {}
        if ev.get("event") != "runner_on_ok" or data.get("host") != host:
            continue
        waited = (data.get("res") or {}).get("waited")
        if isinstance(waited, dict):
            out.append(float(waited["waited_s"]))
    return out


def test_dpkg_lock_is_waited_for_and_one_held_past_the_bound_is_named(
    fleet_factory: Any, tmp_path: Path
) -> None:
    """Issue 11 item 6, through the CLI, one run over two hosts (gpu_stack_wait_timeout_s=40):
    gpu01's dpkg frontend lock is released 20 s into the run: the probe waits for it and the run
    succeeds; gpu02's is held past the bound: the host fails preflight.package_manager with the
    lock, the holder's pid and its name, and nothing on it changed."""
    fleet = fleet_factory(2, ["h100-sxm-8", "h100-sxm-8"])
    released, stuck = (h.name for h in fleet.hosts)
    stuck_pid = hold_dpkg_lock(fleet, stuck, 900)
    before = fingerprint(fleet, stuck)
    hold_dpkg_lock(fleet, released, RELEASE_AFTER_S)

    proc, data = provision_cli(
        tmp_path,
        *fleet_args(fleet),
        "--skip-tags",
        "pytorch,validation",
        "-e",
        f"gpu_stack_wait_timeout_s={WAIT_BOUND_S}",
        "-e",
        "gpu_stack_preflight_min_free_gib=1",
    )
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]

    # the lock released in time: waited for (not only by apt's own 60 s), then the run succeeded
    h = data["hosts"][released]
    assert h["status"] != "failed", h
    checks = {c["id"]: c for c in h["checks"]}
    bad = {k: v for k, v in checks.items() if v["status"] in ("fail", "drift")}
    assert not bad, bad
    assert checks["driver.version"]["status"] == "pass", checks["driver.version"]
    waits = probe_waits(Path(data["artifacts"]), released)
    assert waits and waits[0] >= 5, waits
    assert max(waits) < WAIT_BOUND_S, waits
    assert sh(fleet, released, "systemctl is-active uu-hold || true").strip() == "inactive"

    # the lock held past the bound: the named error, nothing changed, the holder left alone
    h = data["hosts"][stuck]
    assert h["status"] == "failed", h
    checks = {c["id"]: c for c in h["checks"]}
    pm = checks["preflight.package_manager"]
    assert pm["status"] == "fail", pm
    assert (
        f"/var/lib/dpkg/lock-frontend is held by process {stuck_pid} (unattended-upgr) "
        f"for more than {WAIT_BOUND_S} s"
    ) in pm["message"], pm
    assert "gpu_stack_wait_timeout_s" in pm["message"], pm
    assert not [c for c in checks if not c.startswith("preflight.")], sorted(checks)
    diff = fingerprint_diff(before, fingerprint(fleet, stuck))
    assert diff == [], diff[:40]
    assert sh(fleet, stuck, f"cat /proc/{stuck_pid}/comm").strip() == "unattended-upgr"
    sh(fleet, stuck, "systemctl stop uu-hold")


def test_make_demo_run_passes_every_check_on_ubuntu_2204(
    fleet_factory: Any, tmp_path: Path
) -> None:
    """`make demo`'s own provision command (lab.demo.provision_command, the Makefile's default
    personality ubuntu2204 and the demo's 8x H100 profile): exit 0, every check passing (the one
    multi-node validation check skipped on a one-host fleet), report.json's facts.os Ubuntu 22.04,
    the validation passed, and `nvidia-smi -q` shows persistence mode Enabled on all 8 GPUs."""
    fleet = fleet_factory(1, [demo.PROFILE], personality="ubuntu2204")
    host = fleet.hosts[0]
    out = tmp_path / "demo-report"
    proc = subprocess.run(
        demo.provision_command(fleet, out),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env=dict(os.environ, PROVISION_STATE_DIR=str(tmp_path / "state")),
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert data["exit_code"] == 0 and list(data["hosts"]) == [host.address], data["hosts"].keys()
    h = data["hosts"][host.address]
    statuses = {c["id"]: c["status"] for c in h["checks"]}
    not_passed = {k: v for k, v in statuses.items() if v != "pass"}
    # single node; DCGM is not part of the default stack (dcgm.install: false)
    assert not_passed == {"validation.multinode": "skip", "driver.dcgm": "skip"}, not_passed
    for cid in (
        "preflight.os",
        "driver.persistence",
        "driver.fabricmanager",
        "cuda.nvcc",
        "cudnn.version",
        "nccl.version",
        "env.path",
        "pytorch.version",
        "validation.allreduce",
        "validation.ddp",
    ):
        assert statuses.get(cid) == "pass", (cid, statuses.get(cid))
    facts = h["facts"]
    assert facts["os"] == "Ubuntu 22.04.4 LTS", facts["os"]
    assert (facts["os_id"], facts["os_version"]) == ("ubuntu", "22.04"), facts
    assert int(facts["gpu_count"]) == 8
    assert h["validation"], h
    for name in ("junit.xml", "provision.prom"):
        assert (out / name).stat().st_size > 0, name

    # persistence mode as nvidia-smi -q shows it: Enabled on every GPU, through the drop-in
    q = sh(fleet, host.name, "nvidia-smi -q")
    modes = re.findall(r"^\s*Persistence Mode\s*:\s*(\S+)\s*$", q, re.M)
    assert modes == ["Enabled"] * 8, modes
    unit = sh(fleet, host.name, "systemctl show -p ActiveState -p ExecStart nvidia-persistenced")
    assert "ActiveState=active" in unit and "--persistence-mode" in unit, unit
    assert "--no-persistence-mode" not in unit, unit
