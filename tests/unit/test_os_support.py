"""Issue 20 item 4: every line of the README's supported-OS table says what runs and what stops in
preflight, and names the test that proves it; the OS lines without a lab personality are proved here
on real os-release files (tests/unit/fixtures/captures/SOURCES.md)."""

from __future__ import annotations

import re
from pathlib import Path

import conftest
import probe_fakes as pf
from probe_fakes import FakeHost, judge

ROOT = Path(__file__).resolve().parents[2]
UBUNTU_2404 = conftest.capture("os-release__ubuntu_24.04.txt")
# Ubuntu 20.04's fields differ from 22.04's capture only in the version (the same base-files format)
UBUNTU_2004 = (
    pf.UBUNTU_2204.replace('VERSION_ID="22.04"', 'VERSION_ID="20.04"')
    .replace("jammy", "focal")
    .replace("22.04", "20.04")
)


def _table_rows() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Supported targets", 1)[1]
    table = next(b for b in section.split("\n\n") if "| target |" in b)
    rows = [r for r in table.splitlines() if r.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def test_every_line_of_the_readme_os_table_names_a_test_that_exists() -> None:
    rows = _table_rows()
    assert [r[0] for r in rows] == [
        "Ubuntu 22.04",
        "Ubuntu 20.04",
        "Ubuntu 24.04",
        "Debian 11",
        "Debian 12",
        "RHEL / Rocky / Alma 9",
        "RHEL / Rocky / Alma 8",
    ]
    for row in rows:
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row[-1])
        assert named, row[0]
        for path, name in named:
            source = (ROOT / path).read_text(encoding="utf-8")
            assert re.search(rf"^def {name}\(", source, re.M), (row[0], path, name)


def test_ubuntu_2404_stops_in_preflight_with_the_reason() -> None:
    """NVIDIA publishes no CUDA 12.1 for ubuntu2404: the preflight stops the host (before the
    repository role writes any apt source), naming the releases that have it and the mirror
    declaration that lifts the stop."""
    r = judge(FakeHost(UBUNTU_2404).gpus(), ["preflight"])
    assert r["by_id"]["preflight.os"]["status"] == "pass"
    check = r["by_id"]["preflight.cuda_repo"]
    assert check["status"] == "fail", check
    assert "no CUDA 12.1 packages for ubuntu2404/x86_64" in check["message"]
    assert "ubuntu2204/x86_64" in check["message"]
    assert "mirrors.nvidia_repo_carries: [ubuntu2404/x86_64]" in check["message"]
    carried = pf.stack(**{"mirrors.carries": ["ubuntu2404/x86_64"]})
    r = judge(FakeHost(UBUNTU_2404).gpus(), ["preflight"], carried)
    assert r["by_id"]["preflight.cuda_repo"]["status"] == "pass"


def test_ubuntu_2004_passes_the_preflight_os_and_repository_checks() -> None:
    r = judge(FakeHost(UBUNTU_2004).gpus(), ["preflight"])
    assert r["by_id"]["preflight.os"]["status"] == "pass", r["by_id"]["preflight.os"]
    assert r["by_id"]["preflight.cuda_repo"]["status"] == "pass"
    assert "ubuntu2004/x86_64" in r["by_id"]["preflight.cuda_repo"]["expected"]
