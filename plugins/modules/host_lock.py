#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: the provision authors. Apache-2.0.
"""Ansible module provision.gpu.host_lock: one provisioning run per host at a time."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_lock
short_description: Take, refresh or release the host's provisioning lock
description:
  - Keeps two provisioning runs from changing one host at once. The lock is a file,
    C(/var/lib/provision/run.lock), holding the run id, the controller, its pid and the start
    time, and a heartbeat that every probe of the run refreshes; it survives the driver's reboot.
  - Another run is refused while the lock is alive, naming the holder; a lock without a sign of life
    for more than I(stale_s) belongs to a dead run and is taken over.
  - In check mode nothing is written (read-only runs do not lock). The lock is the run's own
    bookkeeping, not the host's configuration, so the task never reports C(changed).
options:
  state:
    description: "C(present) takes or refreshes the lock, C(absent) releases it (only this run's)."
    type: str
    choices: [present, absent]
    default: present
  run_id:
    description: This run's id.
    type: str
    required: true
  controller:
    description: The controller host name, for the message another run sees.
    type: str
    default: ""
  pid:
    description: The controller process id, for the same message.
    type: int
    default: 0
  started:
    description: This run's start time (ISO 8601), for the same message.
    type: str
    default: ""
  stale_s:
    description: Seconds without a sign of life after which a lock is taken over.
    type: int
    default: 1200
  takeover:
    description: Take the lock over even from a live run (after checking that run is dead).
    type: bool
    default: false
author:
  - provision authors
"""

EXAMPLES = r"""
- name: Take the host's provisioning lock
  provision.gpu.host_lock:
    run_id: "{{ gpu_stack_run_id }}"
    controller: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"
"""

RETURN = r"""
action:
  description: acquire, refresh, takeover, refuse, release, none.
  returned: always
  type: str
holder:
  description: The lock found on the host before this task (run_id, controller, pid, started_iso,
    heartbeat).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.gpu.plugins.module_utils import lock as lk


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "run_id": {"type": "str", "required": True},
            "controller": {"type": "str", "default": ""},
            "pid": {"type": "int", "default": 0},
            "started": {"type": "str", "default": ""},
            "stale_s": {"type": "int", "default": lk.DEFAULT_STALE_S},
            "takeover": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, action="none", holder=lk.read_lock())
    if p["state"] == "absent":
        released = lk.release(p["run_id"])
        # the lock is this run's own bookkeeping, not the host's configuration: never "changed"
        module.exit_json(changed=False, action="release" if released else "none", holder=None)
    me = {
        "run_id": p["run_id"],
        "controller": p["controller"],
        "pid": p["pid"],
        "started_iso": p["started"],
    }
    try:
        result = lk.apply(me, stale_s=p["stale_s"], takeover=p["takeover"])
    except OSError as exc:
        module.fail_json(msg="cannot write %s: %s" % (lk.LOCK_PATH, exc))
    if result["action"] == "refuse":
        check = {
            "id": "preflight.lock",
            "status": "fail",
            "expected": "no other provisioning run on this host",
            "actual": lk.describe(result["holder"], lk.time.time()),
            "message": result["reason"] + ": nothing was changed",
            "remediation": (
                "wait for that run to finish; if it is dead, its lock is taken over after %d s "
                "without a sign of life, or at once with -e gpu_stack_lock_takeover=true"
                % p["stale_s"]
            ),
        }
        module.fail_json(
            msg=check["message"],
            action="refuse",
            holder=result["holder"],
            ansible_facts={"provision_checks": [check]},
        )
    module.exit_json(
        changed=False,
        action=result["action"],
        reason=result["reason"],
        holder=result["holder"],
    )


if __name__ == "__main__":
    main()
