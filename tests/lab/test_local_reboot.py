"""Lab: `provision --local` inside a lab host (ubuntu2204, h100-sxm-8), through its reboot.

The host gets the tool as cloud-init user-data would install it: a venv in /opt/provision and
`pip install --no-index --find-links` from a wheelhouse of this checkout and its dependencies,
built here (from the dev venv's versions) and served by the lab's HTTP server (loopback only).
The lab's stack (mirrors pointing at the lab) and its variables are copied in. The host starts as
an image with an older 580 driver loaded, so the 580 version the run pins needs a reboot (on a fresh
lab host the first driver loads at once, as on a real machine without nouveau).

`provision --local` runs as a transient systemd service (as cloud-init's runcmd runs under
cloud-final.service). The driver install needs a reboot: the first run writes and enables
provision-resume.service and reboots (`systemctl reboot`; the lab's supervisor boots the container
again), and after the boot the unit runs `provision --local` again, which writes the final report.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import pytest

from lab import Lab

REPO = Path(__file__).resolve().parents[2]
REPORTS = "/var/lib/provision/reports"
UNIT = "provision-resume.service"
OLD_DRIVER = "580.65.06"  # the image's driver (the lab stack's branch 580)
NEW_DRIVER = "580.95.05"  # the site's stack pins this one (given with -e: carried over the reboot)


def _pip(*args: str, cwd: Path | None = None) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=900, check=False, cwd=cwd)
    assert proc.returncode == 0, f"pip {args}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"


@pytest.fixture
def wheelhouse(lab: Lab, tmp_path: Path) -> Iterator[str]:
    """This checkout as a wheel plus its dependencies (the versions of the dev venv), served by
    the lab's HTTP server; yields the find-links URL."""
    assert lab.repo is not None
    name = f"provision-wheels-{tmp_path.name}"
    house = lab.repo.root / name
    house.mkdir()
    try:
        build = tmp_path / "build"
        _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(build), str(REPO))
        (wheel,) = build.glob("provision-*.whl")
        shutil.copy2(wheel, house / wheel.name)
        pins = tmp_path / "dev-venv-versions.txt"
        pins.write_text(
            "".join(f"{d.metadata['Name']}=={d.version}\n" for d in distributions()
                    if d.metadata["Name"] and d.metadata["Name"].lower() != "provision"),
            encoding="utf-8",
        )
        _pip("download", "--quiet", "--only-binary=:all:", "-c", str(pins), "-d", str(house),
             str(wheel))
        yield f"{lab.repo.base_url}/{name}/"
    finally:
        shutil.rmtree(house, ignore_errors=True)


def _sh(fleet: Any, host: str, command: str, *, timeout: float = 120,
        input_text: str | None = None) -> str:
    res = fleet.runtime(host).run_nsenter(command, timeout=timeout, input_text=input_text)
    assert res.rc == 0, f"{command}: rc {res.rc}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return str(res.stdout)


def _try(fleet: Any, host: str, command: str) -> tuple[int, str]:
    """A command on a host that may be rebooting (rc 255 while it is down)."""
    res = fleet.runtime(host).run_nsenter(command, timeout=60)
    return res.rc, str(res.stdout)


def _report(fleet: Any, host: str) -> dict[str, Any] | None:
    rc, out = _try(fleet, host, f"cat {REPORTS}/report.json 2>/dev/null")
    if rc != 0 or not out.strip():
        return None
    try:
        return dict(json.loads(out))
    except ValueError:
        return None


def _diagnostics(fleet: Any, host: str) -> str:
    rt = fleet.runtime(host)
    parts = [f"--- console\n{rt.console_tail(80)}"]
    for cmd in ("tail -n 60 /var/log/provision-local.log",
                f"journalctl -b --no-pager -u {UNIT} | tail -n 80",
                f"systemctl status {UNIT} --no-pager"):
        res = rt.run_nsenter(cmd, timeout=30)
        parts.append(f"--- {cmd} (rc {res.rc})\n{res.stdout}{res.stderr}")
    return "\n".join(parts)


def test_local_mode_through_the_reboot_to_a_passing_validation(
    fleet_factory: Any, wheelhouse: str
) -> None:
    fleet = fleet_factory(1, ("h100-sxm-8",), personality="ubuntu2204")
    h = fleet.hosts[0].name

    # install the tool the way the user-data example does, from the lab's loopback wheelhouse
    _sh(fleet, h, "python3 -m venv /opt/provision && /opt/provision/bin/pip install -q "
        f"--no-index --find-links {shlex.quote(wheelhouse)} provision", timeout=900)
    version = _sh(fleet, h, "/opt/provision/bin/provision --version")
    assert version.startswith("provision 0.") and "ansible-core 2.1" in version, version
    _sh(fleet, h, "install -d /etc/provision && cat > /etc/provision/stack.yml",
        input_text=fleet.stack_path.read_text(encoding="utf-8"))
    _sh(fleet, h, "cat > /etc/provision/lab-vars.yml",
        input_text=fleet.extra_vars_path.read_text(encoding="utf-8"))
    # the image came with an older 580 driver, loaded (made here with provision itself, its state
    # kept apart); the site's stack pins a newer one, which needs a reboot to load
    _sh(fleet, h, "PROVISION_STATE_DIR=/var/tmp/image-build /opt/provision/bin/provision --local "
        "--stack /etc/provision/stack.yml -e @/etc/provision/lab-vars.yml "
        f"-e gpu_stack_driver_version={OLD_DRIVER} --tags nvidia_repo,nvidia_driver "
        ">/var/log/provision-image.log 2>&1", timeout=1800)
    loaded = _sh(fleet, h, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0")
    assert loaded.strip() == OLD_DRIVER, loaded
    boot_before = fleet.boot_id(h)

    command = ("/opt/provision/bin/provision --local --stack /etc/provision/stack.yml "
               f"-e @/etc/provision/lab-vars.yml -e gpu_stack_driver_version={NEW_DRIVER} "
               f"--report-dir {REPORTS}")
    _sh(fleet, h, "systemd-run --unit=provision-local --collect --no-block "
        f"/bin/sh -c {shlex.quote(command + ' >/var/log/provision-local.log 2>&1')}")

    # the first run reboots the host; after the boot the resume unit writes the final report
    final: dict[str, Any] | None = None
    deadline = time.monotonic() + 3600  # a bound for a hung run, not an expectation
    while time.monotonic() < deadline:
        time.sleep(3)
        rc, boot = _try(fleet, h, "cat /proc/sys/kernel/random/boot_id")
        if rc != 0:
            continue  # rebooting
        if boot.strip() == boot_before:
            rc, active = _try(fleet, h, "systemctl is-active provision-local.service")
            pending = _try(fleet, h, "test -e /var/lib/provision/resume/state.json")[0] == 0
            if active.strip() not in ("active", "activating") and not pending:
                pytest.fail("the first run ended without arranging a resume\n"
                            + _diagnostics(fleet, h))
            continue
        rc, active = _try(fleet, h, f"systemctl is-active {UNIT}")
        if rc == 255 or active.strip() in ("active", "activating", "deactivating", "reloading"):
            continue
        if _try(fleet, h, "test -e /var/lib/provision/resume/state.json")[0] == 0:
            # the resumed run consumes the state first: not started yet, or it never will
            rc, system = _try(fleet, h, "systemctl is-system-running")
            if active.strip() == "failed" or system.strip() in ("running", "degraded"):
                pytest.fail(f"{UNIT} did not run after the boot\n" + _diagnostics(fleet, h))
            continue
        final = _report(fleet, h)
        break
    assert final is not None, "no report from the resumed run\n" + _diagnostics(fleet, h)
    diag = _diagnostics(fleet, h)
    print(diag)  # shown with pytest -rP
    runs = sorted(_sh(fleet, h, "ls /var/lib/provision/history").split())
    assert runs[-1] == f"{final['run_id']}.json" and len(runs) == 2, runs
    first_id = runs[0].removesuffix(".json")

    # the machine rebooted once: two runs, one boot after the first
    # the first run: everything but the reboot, which it arranged and did
    first = json.loads(_sh(fleet, h, f"cat /var/lib/provision/history/{first_id}.json"))
    (entry,) = first["hosts"].values()
    checks = {c["id"]: c for c in entry["checks"]}
    assert first["exit_code"] == 1 and entry["status"] == "failed"
    assert checks["driver.reboot"]["status"] == "fail", checks["driver.reboot"]
    assert checks["validation.allreduce"]["actual"] == "reboot required"
    log = _sh(fleet, h, "cat /var/log/provision-local.log")
    assert f"reboot required to load the NVIDIA driver: {UNIT} (enabled) runs" in log, log[-3000:]
    assert "rebooting now" in log

    # the resumed run: a passing validation
    (name, entry) = next(iter(final["hosts"].items()))
    checks = {c["id"]: c for c in entry["checks"]}
    assert final["exit_code"] == 0, (entry, diag)
    assert entry["status"] in ("ok", "changed"), entry
    assert checks["driver.reboot"]["status"] == "pass", checks["driver.reboot"]
    assert checks["validation.allreduce"]["status"] == "pass", checks["validation.allreduce"]
    assert checks["validation.ddp"]["status"] == "pass", checks["validation.ddp"]
    failing = [c for c in entry["checks"] if c["status"] in ("fail", "drift")]
    assert failing == [], failing
    # the same stack and -e values after the reboot
    assert final["stack"] == first["stack"]
    assert final["stack"]["driver"]["version"] == NEW_DRIVER
    assert entry["facts"]["driver_version"] == NEW_DRIVER, entry["facts"]
    assert name == h  # this machine by its host name
    journal = _sh(fleet, h, f"journalctl -b --no-pager -u {UNIT}")
    assert f"resuming after the reboot that run {first_id} arranged" in journal, diag
    assert "interrupted" not in journal and "timed out" not in journal, diag
    rc, result = _try(fleet, h, f"systemctl show -p Result --value {UNIT}")
    assert result.strip() in ("success", ""), (result, diag)

    # the unit disabled and removed itself; its state and the copied -e values are gone
    rc, enabled = _try(fleet, h, f"systemctl is-enabled {UNIT}")
    assert rc != 0 and enabled.strip() != "enabled", enabled
    assert _try(fleet, h, f"test -e /etc/systemd/system/{UNIT}")[0] == 1
    assert _try(fleet, h, "test -e /var/lib/provision/resume")[0] == 1
    assert _try(fleet, h, "ls /etc/systemd/system/multi-user.target.wants/ | grep -c provision")[
        1].strip() == "0"
