"""repo.key: the cuda-keyring keyring holds the expected OpenPGP key (fingerprints computed by the
probe's own parser, checked against gpg's)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.provision.gpu.plugins.module_utils import parsers as p
from probe_fakes import FakeHost, judge, role_default, stack

KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
NVIDIA_3BF863CC = "EB693B3035CD5710E231E123A4B469963BF863CC"


@pytest.fixture(scope="module")
def gpg_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, list[str]]:
    """A fresh ed25519 key with an encryption subkey: (binary export, armored export, gpg's own
    fingerprints)."""
    gpg = shutil.which("gpg")
    assert gpg, "gpg is needed (lab/host-packages.txt installs gnupg)"
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = dict(os.environ, GNUPGHOME=str(home))

    def run(*args: str) -> bytes:
        return subprocess.run(
            [gpg, "--batch", "--quiet", "--passphrase", "", *args],
            env=env, check=True, capture_output=True, timeout=60,
        ).stdout

    run("--quick-gen-key", "lab <lab@example.invalid>", "ed25519", "sign", "1d")
    fpr = run("--with-colons", "--list-keys").decode().splitlines()
    primary = next(line.split(":")[9] for line in fpr if line.startswith("fpr:"))
    run("--quick-add-key", primary, "cv25519", "encr", "1d")
    listing = run("--with-colons", "--list-keys").decode().splitlines()
    fingerprints = [line.split(":")[9] for line in listing if line.startswith("fpr:")]
    return run("--export"), run("--armor", "--export"), fingerprints


def test_fingerprints_match_gpg_binary_and_armored(gpg_key: tuple[bytes, bytes, list[str]]) -> None:
    binary, armored, expected = gpg_key
    assert len(expected) == 2  # primary and subkey
    assert p.openpgp_fingerprints(binary) == expected
    assert p.openpgp_fingerprints(armored) == expected


def test_fingerprints_of_garbage_and_truncated_input_are_empty_or_partial(
    gpg_key: tuple[bytes, bytes, list[str]],
) -> None:
    binary, _, expected = gpg_key
    assert p.openpgp_fingerprints(b"") == []
    assert p.openpgp_fingerprints(b"not a key") == []
    assert p.openpgp_fingerprints(binary[:10]) == []
    assert p.openpgp_fingerprints(binary + b"\x00garbage")[:2] == expected


def test_the_default_fingerprint_is_nvidias_3bf863cc() -> None:
    assert role_default("gpu_stack", "gpu_stack_repo_key_fingerprints") == [NVIDIA_3BF863CC]
    # apt's NO_PUBKEY names the long key id, the fingerprint's last 16 hex digits
    assert NVIDIA_3BF863CC.endswith("A4B469963BF863CC")


def test_repo_key_passes_for_the_expected_key_and_fails_for_another(
    gpg_key: tuple[bytes, bytes, list[str]], tmp_path: Path
) -> None:
    binary, _, fingerprints = gpg_key
    host = FakeHost()
    host.files[KEYRING] = ""
    host.bytes[KEYRING] = binary
    mine = stack(**{"repo.key_fingerprints": [fingerprints[0].lower()]})
    check = judge(host, ["repo"], mine)["by_id"]["repo.key"]
    assert check["status"] == "pass", check
    # the default (NVIDIA's key) against this keyring: fail, even in check mode
    for check_mode in (False, True):
        bad = judge(host, ["repo"], stack(), check_mode=check_mode)["by_id"]["repo.key"]
        assert bad["status"] == "fail", bad
        assert fingerprints[0] in bad["actual"] and "not the expected" in bad["message"]
        assert "gpu_stack_repo_key_fingerprints" in bad["remediation"]


def test_repo_key_missing_keyring_is_drift_in_check_mode_and_fail_after_setup() -> None:
    host = FakeHost()
    assert judge(host, ["repo"], check_mode=True)["by_id"]["repo.key"]["status"] == "drift"
    assert judge(host, ["repo"])["by_id"]["repo.key"]["status"] == "fail"
    off = judge(host, ["repo"], stack(**{"repo.key_fingerprints": []}))["by_id"]["repo.key"]
    assert off["status"] == "skip"
