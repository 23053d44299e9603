"""Exit codes of `provision` and the exceptions that carry them."""

from __future__ import annotations

from enum import IntEnum

import click


class ExitCode(IntEnum):
    """The documented exit codes (also in `provision --help` and docs/cli.md)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    UNREACHABLE = 3
    SETUP = 4
    DRIFT = 5
    INTERRUPTED = 130


EXIT_CODES_HELP = (
    "Exit codes: 0 success (compliant, for check) | 1 a host failed | 2 usage or stack error | "
    "3 a host unreachable (none failed) | 4 setup error (content or ansible-playbook not found) | "
    "5 drift found by check | 130 interrupted."
)


class ProvisionError(click.ClickException):
    """An expected error: printed as `Error: <message>` on stderr, exits with `exit_code`."""

    exit_code = int(ExitCode.FAILED)


class UsageProblem(ProvisionError):
    """Bad options or arguments that Click itself cannot see."""

    exit_code = int(ExitCode.USAGE)


class StackError(ProvisionError):
    """The stack manifest is malformed or violates a rule of the compatibility matrix."""

    exit_code = int(ExitCode.USAGE)


class SetupError(ProvisionError):
    """The tool's own installation is broken (content, ansible-playbook or data missing)."""

    exit_code = int(ExitCode.SETUP)


def exit_code_for(
    host_statuses: dict[str, str],
    *,
    run_status: str = "successful",
    rc: int = 0,
    drift_is_error: bool = False,
) -> ExitCode:
    """Map a run's outcome to the documented exit code (precedence: 130, 1, 3, 5, 0).

    `host_statuses` uses report.json host statuses (ok, changed, drift, failed, unreachable).
    `drift_is_error` is set by `provision check`: drift then gives 5.
    """
    if run_status == "canceled":
        return ExitCode.INTERRUPTED
    statuses = set(host_statuses.values())
    if "failed" in statuses:
        return ExitCode.FAILED
    if "unreachable" in statuses:
        return ExitCode.UNREACHABLE
    if run_status in ("failed", "timeout") or rc != 0:
        return ExitCode.FAILED  # e.g. a playbook error before any host ran
    if drift_is_error and "drift" in statuses:
        return ExitCode.DRIFT
    return ExitCode.OK
