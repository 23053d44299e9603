"""Issue 20 item 9: stock EL8 is refused by site.yml with the preflight's reason before fact
gathering (which fails there with an interpreter error under ansible-core 2.17+): the first play
reads /etc/os-release with the raw module (no Python) and stops EL8 hosts, recording check
preflight.os. Its patterns are tried here on real os-release files."""

from __future__ import annotations

import re
from pathlib import Path

import conftest
import yaml
from ansible_collections.provision.gpu.plugins.module_utils.platforms import REFUSED

SITE = Path(__file__).resolve().parents[2] / "playbooks" / "site.yml"


def _first_play() -> dict:
    return yaml.safe_load(SITE.read_text(encoding="utf-8"))[0]


def _refuses(os_release: str) -> bool:
    play = _first_play()
    refuse = play["tasks"][1]
    patterns = [
        re.search(r"is regex\('(.*)'\)$", cond).group(1)  # type: ignore[union-attr]
        for cond in refuse["when"]
        if "is regex" in cond
    ]
    assert len(patterns) == 2
    # Jinja string literals are unicode-escape decoded; what reaches re.search:
    patterns = [p.encode("ascii").decode("unicode-escape") for p in patterns]
    return all(re.search(p, os_release) for p in patterns)


def test_the_first_play_reads_the_os_without_python_and_gathers_no_facts() -> None:
    play = _first_play()
    assert play["gather_facts"] is False
    assert "ansible.builtin.raw" in play["tasks"][0]
    reason = " ".join(play["vars"]["__provision_el8_reason"].split())
    assert reason == REFUSED[("redhat", "8")]  # the support table's reason (support.yml)
    records = play["tasks"][1]["block"][0]["ansible.builtin.set_fact"]["provision_checks"]
    assert records[0]["id"] == "preflight.os" and records[0]["status"] == "fail"


def test_el8_releases_are_refused_and_el9_ubuntu_debian_are_not() -> None:
    for name in ("os-release__rhel_8.10.txt", "os-release__rhel_8.6.txt",
                 "os-release__rocky_8.10.txt"):
        text = conftest.capture(name)
        assert _refuses(text), name
        assert _refuses(text.replace("\n", "\r\n")), name  # raw over a pty
    for name in ("os-release__rocky_9.4.txt", "os-release__ubuntu_22.04.txt",
                 "os-release__debian_11.txt", "os-release__debian_12.txt",
                 "os-release__ubuntu_24.04.txt"):
        assert not _refuses(conftest.capture(name)), name
