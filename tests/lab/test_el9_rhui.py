"""Issue 20 item 5 in the lab: a RHEL 9 pay-as-you-go cloud image (RHUI, no subscription-manager
entitlement). The el9 host is presented as RHEL 9 (os-release ID=rhel) with the image's RHUI .repo
listing CodeReady Builder disabled under AWS's id (codeready-builder-for-rhel-9-rhui-rpms, sources
in plugins/module_utils/crb.py), served from the lab's Rocky CRB directory. The repository role
enables that id with `dnf config-manager --set-enabled` (never subscription-manager), and a second
run leaves it as it is. (Ansible's `distribution` fact still says Rocky here, from the lab's
/etc/redhat-release; provision's probe reads os-release. Before the fix the role went by that fact
and enabled `crb`, leaving the RHUI id disabled: this test failed there.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lab_shell import ok
from test_roles_helpers import run_playbook, stack_vars

from lab.repo import rpm_tools_missing

CAPTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "captures"
# RHEL 9.4's os-release: the RHEL 8.10 capture with 9.4's version fields (same keys, ID=rhel)
RHEL_9 = (
    (CAPTURES / "os-release__rhel_8.10.txt").read_text(encoding="utf-8")
    .replace("8.10", "9.4")
    .replace("Ootpa", "Plow")
    .replace('VERSION_ID="8', 'VERSION_ID="9')
)
CRB = "codeready-builder-for-rhel-9-rhui-rpms"
ENABLE_TASK = f"Enable the repository EPEL's dkms needs, {CRB}"


def test_rhel9_on_rhui_enables_the_images_codeready_builder(
    fleet_factory: Any, tmp_path: Path
) -> None:
    missing = rpm_tools_missing()
    if missing:
        pytest.skip(f"el9 needs {', '.join(missing)} (apt-get install rpm createrepo-c)")
    fleet = fleet_factory(1, ["h100-sxm-8"], personality="el9")
    host = fleet.hosts[0].name
    baseurl = ok(
        fleet, host, "sed -n '/^\\[crb\\]/,/^\\[/p' /etc/yum.repos.d/rocky.repo | grep ^baseurl="
    ).strip()
    ok(
        fleet,
        host,
        f"cat > /usr/lib/os-release <<'EOF'\n{RHEL_9}EOF\n"
        "cat > /etc/yum.repos.d/redhat-rhui.repo <<'EOF'\n"
        f"[{CRB}]\nname=Red Hat CodeReady Linux Builder for RHEL 9 (RPMs) from RHUI\n"
        f"{baseurl}\ngpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9\n"
        "enabled=0\nEOF",
    )
    assert CRB not in ok(fleet, host, "dnf -q repolist --enabled")
    ev = stack_vars(fleet.stack_path)

    run = run_playbook(fleet, "site.yml", ev, tmp=tmp_path / "run", tags="preflight,nvidia_repo")
    assert run.rc == 0, run.output[-6000:]
    assert ENABLE_TASK in run.output, run.output[-6000:]
    assert "subscription-manager" not in run.output
    enabled = ok(fleet, host, "dnf -q repolist --enabled").split()
    assert CRB in enabled and "crb" not in enabled, enabled

    again = run_playbook(
        fleet, "site.yml", ev, tmp=tmp_path / "again", tags="preflight,nvidia_repo"
    )
    assert again.rc == 0, again.output[-6000:]
    changed = [ln for ln in again.output.splitlines() if ln.startswith("changed:")]
    assert again.changed(host) == 0, changed
