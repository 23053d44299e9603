# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Every check id provision reports: what it verifies and how to fix it (`provision checks`).

Derived: each component module under components/ declares its own ids (CHECKS); the ones here are
the CLI's own (ssh.* from the SSH preflight, <role>.task and <role>.pending from the run). A unit
test fails when the collection or the CLI can produce an id that is not in CATALOG.
"""

from __future__ import absolute_import, annotations, division, print_function

from ansible_collections.provision.gpu.plugins.module_utils.components import COMPONENTS

CLI_CHECKS = {
    "<role>.pending": {
        "verifies": "in check mode, no task of the role would change the host",
        "remediation": "run `provision` on the host to converge it",
    },
    "<role>.task": {
        "verifies": (
            "a task that is not a check succeeded (an apt/dnf error, an unreachable "
            "mirror)"
        ),
        "remediation": "see the task error in the output; rerun with -v for details",
    },
    "ssh.auth": {
        "verifies": "the SSH user authenticates (key, agent)",
        "remediation": "check --user/--key, the ssh agent, and authorized_keys",
    },
    "ssh.cloud_init": {
        "verifies": (
            "with --wait: cloud-init finished on the host (`cloud-init status --wait`) "
            "without errors, within the bound"
        ),
        "remediation": (
            "look at `cloud-init status --long` and /var/log/cloud-init-output.log on the"
            " host; give a longer --wait if it is only slow"
        ),
    },
    "ssh.connect": {
        "verifies": (
            "TCP connects to the SSH port and an SSH handshake completes (banner and key "
            "exchange); with --wait, within the bound"
        ),
        "remediation": (
            "check that the host is up and sshd listens on the port (a hung or overloaded"
            " sshd, or a port that is not SSH, shows here)"
        ),
    },
    "ssh.exec": {
        "verifies": "the probe command runs over the SSH session",
        "remediation": (
            "check the host's shell and sshd's session limits (MaxSessions), then rerun"
        ),
    },
    "ssh.hostkey": {
        "verifies": "the host key is in known_hosts, unchanged and not @revoked",
        "remediation": (
            "verify the fingerprint, then --accept-new-host-keys (unknown keys only); a "
            "changed or revoked key needs a person"
        ),
    },
    "ssh.resolve": {
        "verifies": "the host name resolves",
        "remediation": "check the host name (DNS or /etc/hosts)",
    },
    "ssh.sudo": {
        "verifies": "sudo -n works for the SSH user (unless --no-become or -K)",
        "remediation": "configure passwordless sudo or use --ask-become-pass",
    },
    "ssh.timeout": {
        "verifies": "the probe answered within its overall time limit",
        "remediation": "check the host's load and network; rerun, or use --no-preflight",
    },
}

CATALOG = dict(
    [(spec.id, spec.entry()) for component in COMPONENTS for spec in component.CHECKS]
    + sorted(CLI_CHECKS.items())
)
