"""Preflight: host keys, auth and the probe against an in-process SSH server; parsing helpers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from sshd_fake import FakeSSHD

from provisioner import ssh_preflight as pf
from provisioner.inventory import Target
from provisioner.stack import load_matrix


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("keys")
    client = paramiko.ECDSAKey.generate()
    client.write_private_key_file(str(d / "id_ecdsa"))
    return {
        "host": paramiko.ECDSAKey.generate(),
        "other_host": paramiko.ECDSAKey.generate(),
        "client": client,
        "client_file": str(d / "id_ecdsa"),
        "stranger": paramiko.ECDSAKey.generate(),
    }


@pytest.fixture
def sshd(keys: dict) -> Iterator[FakeSSHD]:
    server = FakeSSHD(keys["host"], keys["client"])
    yield server
    server.close()


def target(sshd: FakeSSHD, keys: dict, **kw: object) -> Target:
    base: dict[str, object] = {
        "name": "fake",
        "address": "127.0.0.1",
        "port": sshd.port,
        "user": "tester",
        "key_file": keys["client_file"],
    }
    base.update(kw)
    return Target(**base)  # type: ignore[arg-type]


def opts(tmp_path: Path, **kw: object) -> pf.ProbeOptions:
    base: dict[str, object] = {
        "known_hosts": tmp_path / "known_hosts",
        "need_sudo": False,
        "connect_timeout": 5.0,
    }
    base.update(kw)
    return pf.ProbeOptions(**base)  # type: ignore[arg-type]


def test_unknown_host_key_is_refused_with_its_fingerprint(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    r = pf.probe(target(sshd, keys), opts(tmp_path), threading.Lock())
    assert (r.status, r.stage) == ("unreachable", "hostkey")
    assert r.fingerprint == pf.fingerprint(keys["host"].asbytes())
    assert r.fingerprint is not None
    assert r.fingerprint.startswith("SHA256:")
    assert r.fingerprint in r.message
    assert "--accept-new-host-keys" in r.message
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1" in r.message
    assert not (tmp_path / "known_hosts").exists()


def test_accept_new_adds_the_key_then_it_is_known(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    r = pf.probe(target(sshd, keys), opts(tmp_path, accept_new=True), threading.Lock())
    assert r.status == "ok", r.message
    assert r.accepted_key
    line = (tmp_path / "known_hosts").read_text().strip()
    assert line.startswith(f"[127.0.0.1]:{sshd.port} ecdsa-sha2-nistp256 ")
    assert oct((tmp_path / "known_hosts").stat().st_mode & 0o777) == "0o600"
    again = pf.probe(target(sshd, keys), opts(tmp_path), threading.Lock())
    assert again.status == "ok", again.message
    assert not again.accepted_key
    if shutil.which("ssh-keygen"):
        out = subprocess.run(
            ["ssh-keygen", "-lf", str(tmp_path / "known_hosts")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert r.fingerprint in out


def test_changed_host_key_is_never_accepted(sshd: FakeSSHD, keys: dict, tmp_path: Path) -> None:
    other = keys["other_host"]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {other.get_name()} {other.get_base64()}\n")
    r = pf.probe(target(sshd, keys), opts(tmp_path, accept_new=True), threading.Lock())
    assert (r.status, r.stage) == ("unreachable", "hostkey")
    assert "HOST KEY CHANGED" in r.message
    assert r.fingerprint == pf.fingerprint(keys["host"].asbytes())
    assert kh.read_text().count("\n") == 1


def test_inventory_relaxed_checking_accepts_without_writing(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    r = pf.probe(
        target(sshd, keys, strict_host_key_checking="no"), opts(tmp_path), threading.Lock()
    )
    assert r.status == "ok", r.message
    assert not (tmp_path / "known_hosts").exists()


def test_inventory_known_hosts_file_wins(sshd: FakeSSHD, keys: dict, tmp_path: Path) -> None:
    lab_kh = tmp_path / "lab_known_hosts"
    host = keys["host"]
    lab_kh.write_text(f"[127.0.0.1]:{sshd.port} {host.get_name()} {host.get_base64()}\n")
    r = pf.probe(target(sshd, keys, known_hosts=str(lab_kh)), opts(tmp_path), threading.Lock())
    assert r.status == "ok", r.message


def test_wrong_key_fails_authentication(sshd: FakeSSHD, keys: dict, tmp_path: Path) -> None:
    stranger_file = tmp_path / "stranger"
    keys["stranger"].write_private_key_file(str(stranger_file))
    r = pf.probe(
        target(sshd, keys, key_file=str(stranger_file)),
        opts(tmp_path, accept_new=True),
        threading.Lock(),
    )
    assert (r.status, r.stage) == ("unreachable", "auth")
    assert "authentication failed for tester@127.0.0.1" in r.message


def test_silent_server_is_a_connect_failure_not_auth(
    keys: dict, tmp_path: Path, silent_port: tuple[int, list]
) -> None:
    """A port that accepts TCP but never sends an SSH banner (a hung sshd) is `ssh.connect`."""
    t = Target(name="silent", address="127.0.0.1", port=silent_port[0], user="tester",
               key_file=keys["client_file"])
    r = pf.probe(t, opts(tmp_path, connect_timeout=1.5, accept_new=True), threading.Lock())
    assert (r.status, r.stage) == ("unreachable", "connect"), (r.stage, r.message)
    assert "no SSH banner" in r.message


def test_probe_reports_os_kernel_python_gpus_driver(
    sshd: FakeSSHD, keys: dict, tmp_path: Path
) -> None:
    r = pf.probe(target(sshd, keys), opts(tmp_path, accept_new=True), threading.Lock())
    assert r.status == "ok", r.message
    osr = dict(
        line.split("=", 1)
        for line in Path("/etc/os-release").read_text().splitlines()
        if "=" in line
    )
    assert r.os_id == osr["ID"].strip('"')
    assert r.kernel == os.uname().release
    assert r.arch == os.uname().machine
    assert r.python is not None
    assert r.python.startswith("3.")
    assert r.sudo in ("root", "ok", "no")
    assert r.driver_version is None  # no NVIDIA driver on the test machine


def test_sudo_required_marks_the_host_failed(sshd: FakeSSHD, keys: dict, tmp_path: Path) -> None:
    r = pf.probe(
        target(sshd, keys), opts(tmp_path, accept_new=True, need_sudo=True), threading.Lock()
    )
    if r.sudo == "no":
        assert (r.status, r.stage) == ("failed", "sudo")
    else:
        assert r.status == "ok"


def test_run_preflight_parallel_keeps_order(sshd: FakeSSHD, keys: dict, tmp_path: Path) -> None:
    ts = [
        target(sshd, keys, name="a"),
        Target(name="bad", address="no-such-host.invalid"),
        target(sshd, keys, name="c"),
        Target(name="local", address="x", connection="local"),
    ]
    results = pf.run_ssh_preflight(ts, opts(tmp_path, accept_new=True))
    assert [r.host for r in results] == ["a", "bad", "c", "local"]
    assert [r.status for r in results] == ["ok", "unreachable", "ok", "skipped"]
    # the key was accepted once, even though two threads met it
    assert len((tmp_path / "known_hosts").read_text().splitlines()) in (1, 2)


CANNED = """==os
PRETTY_NAME="Ubuntu 22.04.4 LTS"
ID=ubuntu
VERSION_ID="22.04"
==uname
5.15.0-105-generic
x86_64
==python
3.10.12
==sudo
no
==lspci
07:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
0f:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
rc=0
==driver
535.129.03
535.129.03
rc=0
"""


def test_apply_probe_output() -> None:
    r = pf.SshProbeResult(host="h", address="h", port=22)
    pf.apply_probe_output(r, CANNED)
    assert (r.os_id, r.os_version, r.os_name) == ("ubuntu", "22.04", "Ubuntu 22.04.4 LTS")
    assert (r.kernel, r.arch, r.python, r.sudo) == ("5.15.0-105-generic", "x86_64", "3.10.12", "no")
    assert len(r.gpus) == 2
    assert r.driver_version == "535.129.03"
    r2 = pf.SshProbeResult(host="h", address="h", port=22)
    pf.apply_probe_output(r2, "==lspci\nrc=127\n==driver\nrc=9\n")
    assert r2.lspci_available is False
    assert r2.driver_version is None


def test_the_checks_preflight_is_the_connection_part_only() -> None:
    """`provision check` probes the login, OS and sudo; Python, lspci and nvidia-smi are read by
    the check's own probe (host_assess), so they do not run twice per host per night."""
    from provisioner.progress import ssh_preflight_lines  # noqa: PLC0415
    from provisioner.settings import Settings  # noqa: PLC0415

    assert pf.probe_options(Settings(command="check")).inventory is False
    for command in ("run", "validate", "preflight"):
        assert pf.probe_options(Settings(command=command)).inventory is True, command
    assert "lspci" not in pf._CONNECTION_SCRIPT and "nvidia-smi" not in pf._CONNECTION_SCRIPT
    assert "python3" not in pf._CONNECTION_SCRIPT and "sudo -n" in pf._CONNECTION_SCRIPT
    r = pf.SshProbeResult(host="h", address="h", port=22)
    pf.apply_probe_output(r, CANNED, inventory=False)
    assert (r.os_id, r.kernel, r.arch, r.sudo) == ("ubuntu", "5.15.0-105-generic", "x86_64", "no")
    assert (r.python, r.gpus, r.lspci_available, r.driver_version) == (None, [], None, None)
    assert r.scope == "connection" and r.to_dict()["scope"] == "connection"
    (line,) = ssh_preflight_lines([r])
    assert line.startswith("preflight h: ok (Ubuntu 22.04.4 LTS, x86_64, kernel 5.15.0-105")
    assert "GPUs, driver and Python read by the check" in line and "lspci n/a" not in line


@pytest.mark.parametrize(
    ("os_id", "ver", "arch", "expected"),
    [
        ("ubuntu", "22.04", "x86_64", ("ubuntu2204", "x86_64")),
        ("debian", "12", "x86_64", ("debian12", "x86_64")),
        ("rocky", "9.3", "aarch64", ("rhel9", "sbsa")),
        ("fedora", "40", "x86_64", ("", "x86_64")),
    ],
)
def test_distro_mapping_is_the_probes(os_id: str, ver: str, arch: str, expected: tuple) -> None:
    """The CLI preflight asks the probe's own Platform (plugins/module_utils/platforms.py)."""
    r = pf.SshProbeResult(host="h", address="h", port=22, os_id=os_id, os_version=ver, arch=arch)
    plat = pf.platform_of(r)
    assert (plat.repo_dir, plat.arch_dir) == expected
    assert type(plat).__module__ == "provision_collection_platforms"


def test_the_cli_preflight_refuses_what_the_probe_refuses() -> None:
    """One judgement: EL8 and Debian on aarch64 get the probe's reason, not a second opinion."""
    el8 = pf.SshProbeResult(host="h", address="h", port=22, os_id="rocky", os_version="8.9",
                         os_name="Rocky Linux 8.9", arch="x86_64")
    (w,) = pf.matrix_warnings(el8, [], [], "12.1")
    assert "EL8 is not supported" in w and "ansible/ansible#83357" in w and "preflight.os" in w
    arm = pf.SshProbeResult(host="h", address="h", port=22, os_id="debian", os_version="11",
                         arch="aarch64")
    assert "no Debian repository for aarch64" in pf.matrix_warnings(arm, [], [], "12.1")[0]


def test_matrix_warnings() -> None:

    distros = load_matrix()["cuda"]["12.1"]["distros"]
    deb = pf.SshProbeResult(
        host="h", address="h", port=22, os_id="debian", os_version="12", arch="x86_64"
    )
    # NVIDIA's debian12 repository starts at CUDA 12.3: the default stack stops there
    assert "publishes no CUDA 12.1 packages" in pf.matrix_warnings(deb, distros, [], "12.1")[0]
    assert pf.matrix_warnings(deb, distros, ["debian12/x86_64"], "12.1") == []
    noble = pf.SshProbeResult(
        host="h", address="h", port=22, os_id="ubuntu", os_version="24.04", arch="x86_64"
    )
    # issue 20 item 4: NVIDIA publishes no CUDA 12.1 for ubuntu2404 either
    assert "publishes no CUDA 12.1 packages" in pf.matrix_warnings(noble, distros, [], "12.1")[0]
    ubu = pf.SshProbeResult(
        host="h", address="h", port=22, os_id="ubuntu", os_version="22.04", arch="x86_64"
    )
    assert pf.matrix_warnings(ubu, distros, [], "12.1") == []
    fed = pf.SshProbeResult(
        host="h", address="h", port=22, os_id="fedora", os_version="40", arch="x86_64"
    )
    assert "unsupported distribution" in pf.matrix_warnings(fed, distros, [], "12.1")[0]


def test_gpu_count_ignores_nvswitch_bridges() -> None:
    r = pf.SshProbeResult(host="h", address="h", port=22)
    nvswitch = "85:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)"
    pf.apply_probe_output(r, CANNED.replace("rc=0\n==driver", nvswitch + "\nrc=0\n==driver", 1))
    assert len(r.gpus) == 3
    assert r.gpu_count == 2


def test_python_range_of_the_torch_wheels() -> None:
    releases = load_matrix()["pytorch"]["cu121"]["releases"]
    r = pf.SshProbeResult(host="h", address="h", port=22, python="3.8.10")
    (w,) = pf.python_warnings(r, "2.5.1", "cu121", releases)
    assert "torch 2.5.1 cu121 wheels need Python 3.9 to 3.12" in w
    assert pf.python_warnings(r, "2.1.0", "cu121", releases) == []
    assert pf.python_warnings(r, "2.13.0", "cpu", releases) == []
    r.python = "3.12.3"
    assert pf.python_warnings(r, "2.5.1", "cu121", releases) == []
    r.python = "3.13.0"
    assert pf.python_warnings(r, "2.5.1", "cu121", releases)


def test_paramiko_is_imported_without_invoke_which_still_imports_later() -> None:
    """The preflight imports paramiko with `invoke` hidden (only paramiko's ssh_config `Match
    exec` uses it, and the preflight reads no ssh_config): asyncio and unittest.mock are not
    loaded by every `provision check`; `import invoke` afterwards works."""
    code = (
        "import sys\n"
        "from provisioner import ssh_preflight\n"
        "p = ssh_preflight.import_paramiko()\n"
        "assert p is sys.modules['paramiko'] and p.config.invoke is None\n"
        "assert 'invoke' not in sys.modules and 'unittest.mock' not in sys.modules\n"
        "import invoke\n"
        "assert sys.modules['invoke'] is invoke\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr
