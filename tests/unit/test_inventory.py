"""--host parsing, inventory building, -i validation and reading (Ansible's own parser)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import CONTENT

from provisioner import inventory as inv
from provisioner.exitcodes import ExitCode, UsageProblem


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("gpu01", ("gpu01", 22, None)),
        ("admin@gpu01", ("gpu01", 22, "admin")),
        ("gpu01:2222", ("gpu01", 2222, None)),
        ("admin@10.0.0.5:2200", ("10.0.0.5", 2200, "admin")),
        ("[::1]:2222", ("::1", 2222, None)),
        ("gpu-01.example.org", ("gpu-01.example.org", 22, None)),
    ],
)
def test_parse_host(value: str, expected: tuple) -> None:
    t = inv.parse_host(value)
    assert (t.address, t.port, t.user) == expected


def test_parse_host_inline_wins_over_options() -> None:
    t = inv.parse_host("root@h:23", port=2222, user="admin")
    assert (t.port, t.user) == (23, "root")
    t = inv.parse_host("h", port=2222, user="admin")
    assert (t.port, t.user) == (2222, "admin")


@pytest.mark.parametrize("bad", ["", "a b", "h:0", "h:70000", "@h", "h;rm -rf /"])
def test_parse_host_rejects(bad: str) -> None:
    with pytest.raises(UsageProblem) as info:
        inv.parse_host(bad)
    assert info.value.exit_code == ExitCode.USAGE


def test_inventory_from_hosts(tmp_path: Path) -> None:
    targets = inv.targets_from_hosts(
        ["gpu01", "ops@gpu02:2222"],
        port=None,
        user="admin",
        key_file="/k/id",
        connection="paramiko",
    )
    path = inv.write_inventory(targets, tmp_path)
    doc = yaml.safe_load(path.read_text())
    hosts = doc["all"]["children"]["gpu_servers"]["hosts"]
    assert hosts["gpu01"] == {
        "ansible_host": "gpu01",
        "ansible_port": 22,
        "ansible_connection": "paramiko_ssh",
        "ansible_user": "admin",
        "ansible_ssh_private_key_file": "/k/id",
    }
    assert hosts["gpu02"]["ansible_user"] == "ops"
    assert hosts["gpu02"]["ansible_port"] == 2222
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_duplicate_and_missing_hosts() -> None:
    with pytest.raises(UsageProblem, match="given twice"):
        inv.targets_from_hosts(["a", "a:22"])
    with pytest.raises(UsageProblem, match="no hosts"):
        inv.targets_from_hosts([])


def test_inventory_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match="does not exist"):
        inv.check_inventory_path(str(tmp_path / "nope.yml"))
    p = tmp_path / "i.yml"
    p.write_text("all: {}\n")
    assert inv.check_inventory_path(str(p)) == p.resolve()
    assert inv.check_inventory_path(str(p)).is_absolute()


def test_targets_from_inventory_with_limit_and_vars(tmp_path: Path) -> None:
    targets = inv.targets_from_inventory(CONTENT / "inventory.yml", "h-ok,h-unreachable")
    by = {t.name: t for t in targets}
    assert set(by) == {"h-ok", "h-unreachable"}
    assert by["h-ok"].connection == "local"
    assert (by["h-unreachable"].address, by["h-unreachable"].port) == ("127.0.0.1", 1)
    f = tmp_path / "inv.yml"
    f.write_text(
        "all:\n  hosts:\n    g1:\n      ansible_host: 127.0.0.11\n"
        "      ansible_ssh_common_args: '-o UserKnownHostsFile=/lab/known_hosts"
        " -o StrictHostKeyChecking=accept-new'\n"
        "    g2: {ansible_host_key_checking: false}\n"
    )
    by = {t.name: t for t in inv.targets_from_inventory(f, user="admin", connection="paramiko")}
    assert by["g1"].connection == "paramiko_ssh"
    assert by["g1"].known_hosts == "/lab/known_hosts"
    assert by["g1"].strict_host_key_checking == "accept-new"
    assert by["g1"].user == "admin"
    assert by["g2"].strict_host_key_checking == "no"
    with pytest.raises(UsageProblem, match="no hosts"):
        inv.targets_from_inventory(f, "nomatch")


@pytest.mark.parametrize(
    ("args", "known", "strict"),
    [
        ("-o UserKnownHostsFile=/x/kh -o StrictHostKeyChecking=no", "/x/kh", "no"),
        ("-oUserKnownHostsFile=/y -oStrictHostKeyChecking=yes", "/y", None),
        ("-o 'UserKnownHostsFile /z z2'", "/z", None),
        ("-o ControlMaster=auto", None, None),
        (None, None, None),
    ],
)
def test_ssh_option_parsing(args: str | None, known: str | None, strict: str | None) -> None:
    assert inv.known_hosts_from_args(args) == known
    assert inv.strict_checking_from_args(args) == strict
