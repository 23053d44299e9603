"""Fixtures for lab tests: `lab` (session: base image, repo, wheelhouse) and `fleet_factory`.

Lab tests skip with a reason where the machine cannot run the lab (not root, no systemd-nspawn, no
overlayfs); with PROVISION_REQUIRE_LAB=1 (CI) every such skip is turned into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from lab import Fleet, Lab, LabError, unavailable_reason

REQUIRE_LAB = os.environ.get("PROVISION_REQUIRE_LAB") == "1"
LAB_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if LAB_TESTS in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.lab)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_LAB and report.skipped and item.get_closest_marker("lab") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"lab test skipped, but PROVISION_REQUIRE_LAB=1 forbids skips: {reason}"


def require_lab() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"lab unavailable: {reason}")


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """The lab directory with a finished base image, and the repo + wheelhouse server running."""
    require_lab()
    the_lab = Lab()
    the_lab.reap_stale_fleets()
    the_lab.ensure_base(log=True)
    the_lab.start_repo()
    yield the_lab
    the_lab.stop_repo()


FleetFactory = Callable[..., Fleet]


@pytest.fixture
def fleet_factory(lab: Lab) -> Iterator[FleetFactory]:
    """`fleet_factory(n=1, profiles=("h100-sxm-8",), personality=None)` boots a fleet (of the
    default personality, ubuntu2204, unless given); all die at teardown."""
    fleets: list[Fleet] = []

    def make(
        n: int = 1, profiles: Sequence[str] = ("h100-sxm-8",), personality: str | None = None
    ) -> Fleet:
        fleet = lab.create_fleet(n, profiles, personality=personality)
        fleets.append(fleet)
        return fleet

    yield make
    errors = []
    for fleet in fleets:
        try:
            fleet.destroy()
        except LabError as exc:
            errors.append(str(exc))
    if errors:
        pytest.fail("fleet teardown failed: " + "; ".join(errors))
