"""lab/prereqs.py (`make host-packages`): installs the missing host packages as root, prints the
command otherwise. apt-get, dpkg-query and systemctl are fakes on PATH that keep a log."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO

from lab import prereqs

FAKE_DPKG_QUERY = r"""#!/bin/sh
# -W -f=FORMAT PKG...: "PKG ii " per installed package; -L PKG: the files of PKG
if [ "$1" = "-L" ]; then
  [ "$2" = prometheus ] && printf '/usr/bin/promtool\n/lib/systemd/system/prometheus.service\n'
  exit 0
fi
shift 2
rc=0
for p in "$@"; do
  if grep -qx "$p" "$FAKE_DPKG_DB"; then echo "$p ii "
  else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi
done
exit $rc
"""

FAKE_APT_GET = r"""#!/bin/sh
echo "apt-get $*" >> "$FAKE_LOG"
if [ -x "$FAKE_POLICY" ]; then "$FAKE_POLICY"; echo "policy-rc.d exit $?" >> "$FAKE_LOG"; fi
[ -n "$FAKE_APT_FAIL" ] && exit 100
if [ "$1" = install ]; then
  for a in "$@"; do case "$a" in install|-*) ;; *) echo "$a" >> "$FAKE_DPKG_DB";; esac; done
fi
exit 0
"""

FAKE_SYSTEMCTL = r"""#!/bin/sh
echo "systemctl $*" >> "$FAKE_LOG"
"""

ALL = prereqs.wanted(
    prereqs.parse_list(prereqs.LIST_FILE.read_text(encoding="utf-8")), "test", "debian:12"
)


def write_exec(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


class Fakes:
    def __init__(self, root: Path, installed: list[str]) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.db = root / "dpkg-db"
        self.db.write_text("".join(f"{p}\n" for p in installed), encoding="utf-8")
        self.log = root / "log"
        self.policy = root / "policy-rc.d"
        write_exec(self.bin / "dpkg-query", FAKE_DPKG_QUERY)
        write_exec(self.bin / "apt-get", FAKE_APT_GET)
        write_exec(self.bin / "systemctl", FAKE_SYSTEMCTL)
        for name in ("debian12", "ubuntu2204"):
            osid, ver = {"debian12": ("debian", "12"), "ubuntu2204": ("ubuntu", "22.04")}[name]
            (root / name).write_text(f'ID={osid}\nVERSION_ID="{ver}"\n', encoding="utf-8")

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "FAKE_DPKG_DB": str(self.db),
            "FAKE_LOG": str(self.log),
            "FAKE_POLICY": str(self.policy),
        }

    def log_lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fakes:
    installed = [e.name for e in ALL if e.name not in ("debootstrap", "prometheus")]
    f = Fakes(tmp_path, installed)
    for key, value in f.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(prereqs, "POLICY_RC_D", f.policy)
    return f


def test_the_list_parses_and_names_what_the_lab_and_tests_need() -> None:
    demo = {e.name for e in prereqs.wanted(prereqs.parse_list(
        prereqs.LIST_FILE.read_text(encoding="utf-8")), "demo", "debian:12")}
    assert {"debootstrap", "systemd-container", "apt-utils", "dpkg-dev", "gnupg", "gcc",
            "openssh-client", "make", "python3-venv"} <= demo
    assert not {"prometheus", "vagrant"} & demo
    assert {"prometheus", "vagrant"} <= {e.name for e in ALL}
    assert [e.name for e in ALL if e.no_start] == ["prometheus"]
    with pytest.raises(ValueError, match="unknown attribute"):
        prereqs.parse_list("foo demo sometimes\n")


def test_root_installs_only_the_missing_packages(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = prereqs.main(["--for", "test", "--os-release", str(fakes.root / "debian12")], euid=0)
    assert rc == 0
    assert fakes.log_lines() == [
        "apt-get update -qq",
        "policy-rc.d exit 101",
        "apt-get install -y -qq --no-install-recommends debootstrap prometheus",
        "policy-rc.d exit 101",
        "systemctl disable --quiet "
        + ("--now " if Path("/run/systemd/system").is_dir() else "")
        + "prometheus.service",
    ]
    assert not fakes.policy.exists(), "the temporary policy-rc.d must be removed"
    assert "apt-get install -y --no-install-recommends debootstrap prometheus" in (
        capsys.readouterr().out
    )
    # everything is there now: a second run changes nothing
    before = fakes.log_lines()
    assert prereqs.main(["--for", "test", "--os-release", str(fakes.root / "debian12")],
                        euid=0) == 0
    assert fakes.log_lines() == before
    assert f"all {len(ALL)} host packages are installed" in capsys.readouterr().out


def test_an_existing_policy_rc_d_is_left_alone(fakes: Fakes) -> None:
    write_exec(fakes.policy, "#!/bin/sh\nexit 104\n")
    assert prereqs.main(["--for", "demo", "--os-release", str(fakes.root / "debian12")],
                        euid=0) == 0
    assert "policy-rc.d exit 104" in fakes.log_lines()
    assert fakes.policy.read_text(encoding="utf-8") == "#!/bin/sh\nexit 104\n"
    assert "apt-get install -y -qq --no-install-recommends debootstrap" in fakes.log_lines()
    assert not any("systemctl" in line for line in fakes.log_lines())  # no no-start package


def test_demo_installs_the_lab_set_and_ubuntu_2204_gets_python311(fakes: Fakes) -> None:
    fakes.db.write_text("", encoding="utf-8")
    assert prereqs.main(["--for", "demo", "--os-release", str(fakes.root / "ubuntu2204")],
                        euid=0) == 0
    install = next(line for line in fakes.log_lines() if " install " in line).split()
    assert "python3.11-venv" in install and "debootstrap" in install
    assert "prometheus" not in install and "vagrant" not in install
    fakes.db.write_text("", encoding="utf-8")
    fakes.log.unlink()
    assert prereqs.main(["--for", "demo", "--os-release", str(fakes.root / "debian12")],
                        euid=0) == 0
    assert "python3.11-venv" not in next(line for line in fakes.log_lines() if " install " in line)


def test_a_failing_apt_get_is_a_setup_error(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_APT_FAIL", "1")
    assert prereqs.main(["--os-release", str(fakes.root / "debian12")], euid=0) == 4
    assert not fakes.policy.exists()


def test_not_root_prints_the_command_and_exits_4(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = prereqs.main(["--for", "test", "--os-release", str(fakes.root / "debian12")], euid=1000)
    assert rc == 4
    err = capsys.readouterr().err
    assert (
        "sudo apt-get update && sudo apt-get install -y --no-install-recommends "
        "debootstrap prometheus\n" in err
    )
    assert "make host-packages-test" in err
    assert fakes.log_lines() == [], "nothing may be installed without root"


def test_no_apt_prints_the_command_and_exits_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert prereqs.main(["--for", "demo"], euid=0) == 4
    err = capsys.readouterr().err
    assert "has no apt/dpkg" in err
    assert "apt-get install -y --no-install-recommends make python3-venv" in err


@pytest.fixture
def world_readable_fakes() -> Iterator[Fakes]:
    """Fakes in a directory another user can read (pytest's tmp_path is private to root)."""
    root = Path(tempfile.mkdtemp(prefix="prereqs-"))
    root.chmod(0o755)
    try:
        f = Fakes(root, ["make"])
        f.log.touch()
        f.log.chmod(0o666)
        yield f
    finally:
        shutil.rmtree(root)


def test_the_script_runs_standalone_under_the_system_python_as_a_user(
    world_readable_fakes: Fakes,
) -> None:
    """What `make host-packages` runs: the file itself, before .venv exists, not as root."""
    f = world_readable_fakes
    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    cmd = [python, str(REPO / "lab" / "prereqs.py"), "--os-release", str(f.root / "debian12")]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv to drop to another user")
        if not REPO.stat().st_mode & stat.S_IXOTH:
            pytest.skip(f"{REPO} is not readable by other users")
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    proc = subprocess.run(
        cmd, env=f.env(), capture_output=True, text=True, check=False, cwd="/"
    )
    assert proc.returncode == 4, proc.stderr
    assert "sudo apt-get install -y --no-install-recommends python3-venv" in proc.stderr
    assert "make host-packages" in proc.stderr
    assert f.log_lines() == []


def test_make_demo_and_test_run_the_prerequisite_step_first() -> None:
    for target, purpose in (("demo", "demo"), ("test", "test")):
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        out = subprocess.run(
            ["make", "--no-print-directory", "-n", target], cwd=REPO, capture_output=True,
            text=True, check=True, env=env,
        ).stdout.splitlines()
        assert out[0] == f"python3 lab/prereqs.py --for {purpose}", out
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 lab/prereqs.py --for test" in ci
    assert "apt-get install -y -qq --no-install-recommends \\" not in ci  # one list, not two
