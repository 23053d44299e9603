"""The plain-inventory reader (provisioner/plain_inventory.py) against Ansible's InventoryManager:
same hosts, same order, same variables, on every shape it accepts; None on every shape it must
leave to Ansible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner import inventory as inv
from provisioner import plain_inventory

LAB = """\
all:
  vars:
    ansible_user: gpuadmin
    ansible_become: true
    ansible_ssh_private_key_file: /keys/id_ed25519
    ansible_ssh_common_args: -o UserKnownHostsFile=/x/known_hosts -o StrictHostKeyChecking=yes
    site_var: [1, 2]
  children:
    gpu_servers:
      hosts:
        gpu01: {ansible_host: 127.0.0.11, lab_gpu_profile: h100-sxm-8}
        gpu02: {ansible_host: 127.0.0.12, ansible_port: 2222}
"""

# depth beats name (b, depth 2, over z and c, depth 1); at one depth the later name wins (c over
# a); host variables beat every group; `all` loses to every group
NESTED = """\
all:
  vars: {x: all, y: all, ansible_user: root}
  hosts:
    h3: {ansible_host: 10.0.0.3}
  children:
    a:
      vars: {x: a, y: a, ansible_port: 2201}
      children:
        b:
          vars: {x: b}
          hosts:
            h1: {ansible_host: 10.0.0.1}
    c:
      vars: {x: c, y: c}
      hosts:
        h1:
        h2: {ansible_host: 10.0.0.2, y: h2}
    z:
      vars: {x: z, ansible_user: zed}
      hosts:
        h1:
"""

# a group met twice merges its variables key by key; a host met twice too (the later value wins)
TWICE = """\
all:
  children:
    g1:
      vars: {p: 1, q: 1}
      hosts:
        n1: {ansible_host: 192.0.2.1, v: first, w: kept}
    g2:
      children:
        g1:
          vars: {q: 2}
          hosts:
            n1: {v: second}
"""

# top-level groups without `all:` become children of all; a host under all only is ungrouped
TOPLEVEL = """\
workers:
  vars: {ansible_connection: paramiko, role: worker}
  hosts:
    w1: {ansible_host: w1.example}
    w2:
loners:
  hosts:
    l1: {ansible_host: 198.51.100.7, ansible_host_key_checking: false}
"""

CASES = {"lab": LAB, "nested": NESTED, "twice": TWICE, "toplevel": TOPLEVEL}
VARS = ("x", "y", "p", "q", "v", "w", "role", "site_var", "lab_gpu_profile", "ansible_become",
        *inv._CONNECTION_KEYS)


def _write(tmp_path: Path, text: str, name: str = "inventory.yml") -> Path:
    d = tmp_path / "inv"
    d.mkdir(exist_ok=True)
    path = d / name
    path.write_text(text, encoding="utf-8")
    return path


def _project(hv: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, list) else v) for k, v in hv.items() if k in VARS}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plain_reader_sees_what_ansible_sees(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, CASES[case])
    plain = plain_inventory.read(path)
    assert plain is not None, f"{case} should be read without Ansible"
    ansible = inv._ansible_host_vars(path, None)
    assert list(plain) == [name for name, *_ in ansible]  # the same hosts, in the same order
    for name, hv, cv, deferred in ansible:
        assert deferred is None
        assert _project(plain[name]) == _project(dict(hv)), name
        assert inv._resolved(plain[name], None) == cv, name


def test_the_precedence_is_ansibles(tmp_path: Path) -> None:
    """The expectations written out, so that a change in Ansible shows here too."""
    plain = plain_inventory.read(_write(tmp_path, NESTED))
    assert plain is not None
    assert list(plain) == ["h3", "h1", "h2"]
    assert plain["h1"]["x"] == "b" and plain["h1"]["y"] == "c"
    assert plain["h1"]["ansible_user"] == "zed" and plain["h1"]["ansible_port"] == 2201
    assert plain["h2"]["y"] == "h2" and plain["h3"]["x"] == "all"


def test_targets_from_a_plain_inventory_do_not_load_ansible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_a: object) -> None:
        raise AssertionError("Ansible's InventoryManager was loaded for a plain inventory")

    monkeypatch.setattr(inv, "_ansible_host_vars", refuse)
    targets = inv.targets_from_inventory(_write(tmp_path, LAB))
    assert [(t.name, t.address, t.port, t.user) for t in targets] == [
        ("gpu01", "127.0.0.11", 22, "gpuadmin"), ("gpu02", "127.0.0.12", 2222, "gpuadmin")]
    assert targets[0].known_hosts == "/x/known_hosts"
    assert targets[0].key_file == "/keys/id_ed25519"


NOT_PLAIN = {
    "a template": LAB.replace("127.0.0.11", "'{{ lookup(\"env\", \"A\") }}'"),
    "a host range": LAB.replace("gpu01:", "gpu[01:02]:"),
    "host:port": LAB.replace("gpu01:", "'gpu01:2200':"),
    "a vault value": LAB.replace("site_var: [1, 2]", "site_var: !vault |\n      $ANSIBLE_VAULT"),
    "an unsafe value": LAB.replace("site_var: [1, 2]", "site_var: !unsafe '{x}'"),
    "a group priority": LAB.replace("site_var: [1, 2]", "ansible_group_priority: 5"),
    "a plugin configuration": "plugin: constructed\nstrict: true\n",
    "an unknown group key": LAB.replace("  children:", "  hostz: {}\n  children:"),
    "not a mapping": "- gpu01\n",
}


@pytest.mark.parametrize("what", sorted(NOT_PLAIN))
def test_anything_else_is_left_to_ansible(tmp_path: Path, what: str) -> None:
    assert plain_inventory.read(_write(tmp_path, NOT_PLAIN[what])) is None


def test_group_vars_beside_it_a_limit_or_an_ini_file_are_left_to_ansible(tmp_path: Path) -> None:
    path = _write(tmp_path, LAB)
    assert plain_inventory.read(path, "gpu01") is None
    assert plain_inventory.read(_write(tmp_path, "[gpu]\ngpu01\n", "hosts.ini")) is None
    (path.parent / "group_vars").mkdir()
    assert plain_inventory.read(path) is None
    # and Ansible's path still reads it
    assert [t.name for t in inv.targets_from_inventory(path)] == ["gpu01", "gpu02"]
