"""`make demo`: build the lab (cached), boot one simulated 8x H100 host (Ubuntu 22.04 personality
unless --personality says otherwise), provision the full stack
on it with `provision --host ...`, print the summary, keep the reports, tear the lab down."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from lab.fleet import Fleet
from lab.lab import Lab, unavailable_reason
from lab.util import LabError

EXIT_SETUP = 4
PROFILE = "h100-sxm-8"


def provision_command(fleet: Fleet, report_dir: Path) -> list[str]:
    """The `provision` run of `make demo` against a one-host lab fleet (tests/lab runs the same)."""
    host = fleet.hosts[0]
    return [
        sys.executable,
        "-m",
        "provisioner",
        "--host",
        f"{host.user}@{host.address}",
        "--key",
        str(host.key),
        "--known-hosts",
        str(fleet.known_hosts),
        "--stack",
        str(fleet.stack_path),
        "--report-dir",
        str(report_dir),
        "-e",
        f"@{fleet.extra_vars_path}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.demo")
    parser.add_argument("--report-dir", default="demo-report", type=Path)
    parser.add_argument("--profile", default=PROFILE)
    parser.add_argument("--personality", default=None, help="host personality (default ubuntu2204)")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(
            f"make demo needs the simulated lab, which cannot run here: {reason}.", file=sys.stderr
        )
        return EXIT_SETUP
    lab = Lab()
    started = time.monotonic()
    fleet = None
    try:
        lab.ensure_base(log=True, personality=args.personality)
        repo = lab.start_repo()
        fleet = lab.create_fleet(1, [args.profile], personality=args.personality)
        host = fleet.hosts[0]
        print(
            f"[lab] ready in {time.monotonic() - started:.0f}s: {host.name} ({args.profile}, "
            f"{fleet.personality}) "
            f"at {host.address}; repo {repo.repos_url}",
            flush=True,
        )
        cmd = provision_command(fleet, args.report_dir)
        print("[lab] $ provision " + " ".join(cmd[3:]), flush=True)
        rc = subprocess.run(cmd, check=False).returncode
        print(
            f"[lab] provision exited {rc}; reports in {args.report_dir}/ "
            f"({time.monotonic() - started:.0f}s in all)",
            flush=True,
        )
        return rc
    except LabError as exc:
        print(f"[lab] error: {exc}", file=sys.stderr)
        return 1
    finally:
        if fleet is not None:
            fleet.destroy()
        lab.stop_repo()


if __name__ == "__main__":
    sys.exit(main())
