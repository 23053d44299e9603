# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""The repository EPEL's dkms builds on, on EL 9: CodeReady Builder, and how to enable it.

- EL 9 rebuilds (Rocky, Alma, ...): `crb`, `dnf config-manager --set-enabled crb`.
- RHEL with a subscription-manager entitlement: `subscription-manager repos --enable
  codeready-builder-for-rhel-9-<arch>-rpms`.
- RHEL pay-as-you-go cloud images use RHUI (Red Hat Update Infrastructure): no entitlement, so
  subscription-manager cannot enable anything; the image's own .repo files list CodeReady Builder,
  disabled, under a cloud-specific id (R1-R3), which `dnf config-manager --set-enabled <id>`
  enables. A RHUI image whose files list no such id stops with the commands to find and enable it.

Sources (public):
  R1 AWS (rh-amazon-rhui-client): codeready-builder-for-rhel-9-rhui-rpms, no arch in the id
     (aws/aws-parallelcluster-cookbook:cookbooks/aws-parallelcluster-install/attributes/
     default_redhat8.rb: extra_repo 'codeready-builder-for-rhel-8-rhui-rpms', the RHEL 8 sibling;
     centreon/centreon#2926 and Centreon's RHEL 9 install docs: `dnf config-manager --set-enabled
     codeready-builder-for-rhel-9-rhui-rpms`).
  R2 Azure (rhui-azure-rhel9): codeready-builder-for-rhel-9-x86_64-rhui-rpms, with the EUS variant
     codeready-builder-for-rhel-9-x86_64-eus-rhui-rpms beside rhel-9-for-x86_64-baseos-eus-rhui-rpms
     (`dnf repolist` captures of Azure RHEL 9 images in public installer tests).
  R3 Google Cloud (google-rhui-client-rhel9): rhui-codeready-builder-for-rhel-9-x86_64-rhui-rpms and
     rhui-codeready-builder-for-rhel-9-aarch64-rhui-rpms
     (GoogleCloudPlatform/PerfKitBenchmarker:perfkitbenchmarker/linux_packages/texinfo.py;
     netdata/netdata#21576: "Red Hat CodeReady Linux Builder for RHEL 9 x86_64 ... from RHUI").
  R4 RHEL 9 with an entitlement: codeready-builder-for-rhel-9-<arch>-rpms through
     subscription-manager (E-F-A/eFa5#7; geerlingguy/ansible-role-php-versions#104).
  Confidence: R1 P (the RHEL 8 id is C, the RHEL 9 one from install docs), R2 P (captures whose
  repository was not identified), R3 C, R4 C. The RHUI client package names in brackets are not
  used for detection (the repository ids are): a RHUI host is one whose .repo files list an id
  with "rhui" in it.

Pure Python (Python 3.8+ on targets).
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from typing import TypedDict

# R1-R3: [rhui-]codeready-builder-for-rhel-<major>-[<arch>-][eus-]rhui-rpms
RHUI_CRB_RE = re.compile(
    r"^(?:rhui-)?codeready-builder-for-rhel-(?P<major>\d+)-(?:(?P<arch>x86_64|aarch64)-)?"
    r"(?P<eus>eus-)?rhui-rpms$"
)
SECTION_RE = re.compile(r"^\s*\[([^\]]+)\]\s*$")
ENABLED_RE = re.compile(r"^\s*enabled\s*=\s*(\S+)", re.IGNORECASE)


def repo_sections(text: str) -> dict[str, bool]:
    """The repository ids of one .repo file and whether each is enabled (dnf's default: yes)."""
    out: dict[str, bool] = {}
    current = ""
    for line in text.splitlines():
        m = SECTION_RE.match(line)
        if m:
            current = m.group(1).strip()
            out[current] = True
            continue
        m = ENABLED_RE.match(line)
        if m and current:
            out[current] = m.group(1).lower() in ("1", "true", "yes", "on")
    return out


def _enable(repo_id: str) -> list[str]:
    return ["dnf", "config-manager", "--set-enabled", repo_id]


class CrbPlan(TypedDict):
    """provision_plan.repo.crb: the CodeReady Builder repository the nvidia_repo role enables."""

    id: str  # the repository id, "" when nothing known can be enabled
    cmd: list[str]  # the command that enables it
    how: str  # rebuild | subscription-manager | rhui | stop
    enabled: bool  # already enabled in the host's repo files
    stop: str  # the message that stops the host, "" when none


def choose(os_id: str, major: str, arch: str, repo_files: dict[str, str]) -> CrbPlan:
    """{id, cmd, how, enabled, stop}: the CRB repository of this host and the command that
    enables it (how: rebuild | subscription-manager | rhui | stop); `stop` is the message when
    nothing known can be enabled (then id and cmd are empty)."""
    repos: dict[str, bool] = {}
    for path in sorted(repo_files):
        repos.update(repo_sections(repo_files[path] or ""))
    if os_id != "rhel":
        return {"id": "crb", "cmd": _enable("crb"), "how": "rebuild",
                "enabled": repos.get("crb", False), "stop": ""}
    rhui = sorted(r for r in repos if "rhui" in r)
    if not rhui:
        repo_id = "codeready-builder-for-rhel-%s-%s-rpms" % (major, arch)
        return {"id": repo_id, "cmd": ["subscription-manager", "repos", "--enable", repo_id],
                "how": "subscription-manager", "enabled": repos.get(repo_id, False), "stop": ""}
    eus_image = any("eus" in r and "baseos" in r and on for r, on in repos.items())
    known = []
    for r in rhui:
        m = RHUI_CRB_RE.match(r)
        if not m or m.group("major") != major or m.group("arch") not in (None, arch):
            continue
        # this arch's id before an arch-less one; the EUS id only on an EUS image
        known.append(((m.group("eus") is not None) != eus_image, m.group("arch") is None, r))
    if known:
        repo_id = sorted(known)[0][2]
        return {"id": repo_id, "cmd": _enable(repo_id), "how": "rhui",
                "enabled": repos[repo_id], "stop": ""}
    stop = (
        "RHEL %s on RHUI (a pay-as-you-go cloud image: %s) lists no CodeReady Builder repository "
        "provision knows, and subscription-manager cannot enable one without an entitlement. "
        "Find its id with `dnf repolist all | grep -i codeready`, enable it with "
        "`dnf config-manager --set-enabled <that id>`, then run provision again "
        "(nvidia_repo_el_crb: false skips this step once it is enabled)"
        % (major, ", ".join(rhui[:3]) + (", ..." if len(rhui) > 3 else ""))
    )
    return {"id": "", "cmd": [], "how": "stop", "enabled": False, "stop": stop}
