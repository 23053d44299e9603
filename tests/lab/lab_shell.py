"""Shell helpers of the lab repository and personality tests: run a command on a lab host, assert
it succeeded, and enable NVIDIA's repository the way NVIDIA's instructions do."""

from __future__ import annotations

from typing import Any

APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0"


def sh(fleet: Any, host: str, command: str, timeout: float = 300) -> tuple[int, str]:
    """(exit code, stdout + stderr) of command on host."""
    res = fleet.run(host, command, timeout=timeout)
    return res.rc, res.stdout + res.stderr


def ok(fleet: Any, host: str, command: str, timeout: float = 300) -> str:
    """stdout + stderr of command on host, which must exit 0."""
    rc, out = sh(fleet, host, command, timeout)
    assert rc == 0, f"{command}\n{out[-3000:]}"
    return out


def enable_repo(fleet: Any, host: str) -> None:
    """What NVIDIA's instructions do: install cuda-keyring from the repository, apt-get update."""
    ok(
        fleet,
        host,
        'cd /tmp && python3 -c "import urllib.request as u; '
        f"u.urlretrieve('{fleet.keyring_url}', 'cuda-keyring_1.1-1_all.deb')\" && "
        f"{APT} install ./cuda-keyring_1.1-1_all.deb && {APT} update",
    )
