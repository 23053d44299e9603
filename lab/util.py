"""Helpers shared by the lab modules: errors, subprocess calls, file locks, the lab directory."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

DEFAULT_LAB_DIR = Path("/var/tmp/provision-lab")  # noqa: S108 - root-owned, documented default


class LabError(RuntimeError):
    """The lab could not do what was asked (build, boot, command)."""


class LabUnavailable(LabError):
    """This machine cannot run the lab (not root, no systemd-nspawn, no overlayfs, ...)."""


def lab_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The lab directory: explicit > $PROVISION_LAB_DIR > /var/tmp/provision-lab."""
    if explicit is not None:
        return Path(explicit).resolve()
    env = os.environ.get("PROVISION_LAB_DIR")
    return Path(env).resolve() if env else DEFAULT_LAB_DIR


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input_text: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output, raise LabError (with stderr) when it fails."""
    args = [str(c) for c in cmd]
    try:
        proc = subprocess.run(
            args,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timed out after {timeout}s: {' '.join(args)}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise LabError(f"command failed (rc {proc.returncode}): {' '.join(args)}\n{tail}")
    return proc


def clean_env(**extra: str) -> dict[str, str]:
    """A minimal environment for build tools (no PIP_*, no venv leakage)."""
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LC_ALL": "C.UTF-8",
    }
    env.update(extra)
    return env


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created if missing), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below `path`, deepest first (from /proc/self/mountinfo)."""
    root = str(path.resolve())
    found: list[Path] = []
    with Path("/proc/self/mountinfo").open(encoding="utf-8") as fh:
        for line in fh:
            mnt = line.split()[4].encode().decode("unicode_escape")
            if mnt == root or mnt.startswith(root + "/"):
                found.append(Path(mnt))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def unmount_all(path: Path) -> None:
    """Unmount everything at or below `path`, deepest first; lazy unmount as a last resort."""
    for _ in range(5):
        mounts = mounts_under(path)
        if not mounts:
            return
        for mnt in mounts:
            if subprocess.run(["umount", str(mnt)], capture_output=True, check=False).returncode:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)
    if mounts_under(path):
        raise LabError(f"could not unmount everything under {path}")


def remove_tree(path: Path) -> None:
    """rm -rf that refuses to cross into mounted file systems."""
    if not path.exists():
        return
    unmount_all(path)
    shutil.rmtree(path, ignore_errors=True)


def build_cached(
    digest: str,
    filename: str,
    build: Callable[[Path, Path], Path],
    *,
    outdir: Path,
    workdir: Path,
    cache: Path,
) -> Path:
    """A package file in outdir built by build(tmpdir, workdir), or an identical one built before
    (cache/<digest[:2]>/<digest><suffix>, linked or copied); the cache is filled atomically."""
    cached = cache / digest[:2] / f"{digest}{Path(filename).suffix}"
    out = outdir / filename
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmpdir = workdir / f"c-{digest[:16]}"
        tmpdir.mkdir(parents=True, exist_ok=True)
        built = build(tmpdir, workdir)
        tmp = cached.with_suffix(f".tmp.{os.getpid()}")
        shutil.move(built, tmp)
        tmp.rename(cached)
        shutil.rmtree(tmpdir, ignore_errors=True)
    try:
        os.link(cached, out)
    except OSError:
        shutil.copy2(cached, out)
    return out
