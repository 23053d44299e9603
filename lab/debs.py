"""Building blocks of the fake repository: a package description, real ELF .so files, dpkg-deb."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lab import util
from lab.util import run


@dataclass
class Deb:
    """One binary package: control fields, payload files, symlinks and maintainer scripts."""

    name: str
    version: str
    description: str
    arch: str = "amd64"
    section: str = "multiverse/devel"
    source: str | None = None
    depends: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    replaces: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    pre_depends: list[str] = field(default_factory=list)
    recommends: list[str] = field(default_factory=list)
    suggests: list[str] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)
    maintainer: str = "cudatools <cudatools@nvidia.com>"
    long_description: str = "Simulated package of the provision lab; payload is not NVIDIA's."
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)
    conffiles: list[str] = field(default_factory=list)
    ldconfig_trigger: bool = False

    def add_text(self, path: str, text: str, mode: int = 0o644) -> None:
        self.files[path] = (text.encode(), mode)

    def add_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.files[path] = (data, mode)

    @property
    def filename(self) -> str:
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.arch}.deb"

    def control(self) -> str:
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.arch}",
            *([f"Source: {self.source}"] if self.source else []),
            f"Maintainer: {self.maintainer}",
            f"Section: {self.section}",
            "Priority: optional",
        ]
        for key, values in (
            ("Pre-Depends", self.pre_depends),
            ("Depends", self.depends),
            ("Recommends", self.recommends),
            ("Suggests", self.suggests),
            ("Breaks", self.breaks),
            ("Conflicts", self.conflicts),
            ("Replaces", self.replaces),
            ("Provides", self.provides),
        ):
            if values:
                lines.append(f"{key}: {', '.join(values)}")
        lines.append(f"Description: {self.description}")
        lines.append(" " + self.long_description)
        return "\n".join(lines) + "\n"

    def digest(self) -> str:
        """A hash of everything that goes into the .deb (the cache key of a built package)."""
        h = hashlib.sha256(self.control().encode())
        for rel, (data, mode) in sorted(self.files.items()):
            h.update(f"F{rel}\0{mode}\0".encode())
            h.update(hashlib.sha256(data).digest())
        for rel, target in sorted(self.symlinks.items()):
            h.update(f"L{rel}\0{target}\0".encode())
        for name, body in sorted(self.scripts.items()):
            h.update(f"S{name}\0{body}\0".encode())
        h.update(f"C{self.conffiles}T{self.ldconfig_trigger}".encode())
        return h.hexdigest()

    def build_cached(self, outdir: Path, workdir: Path, cache: Path) -> Path:
        """Like build(), but reuse an identical package built before (cache/<digest>.deb)."""
        return util.build_cached(
            self.digest(), self.filename, self.build, outdir=outdir, workdir=workdir, cache=cache
        )

    def build(self, outdir: Path, workdir: Path) -> Path:
        """dpkg-deb --build this package into outdir."""
        root = workdir / f"{self.name}_{self.version}"
        shutil.rmtree(root, ignore_errors=True)
        debian = root / "DEBIAN"
        debian.mkdir(parents=True)
        (debian / "control").write_text(self.control(), encoding="utf-8")
        for rel, (data, mode) in self.files.items():
            dest = root / rel.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            dest.chmod(mode)
        for rel, target in self.symlinks.items():
            dest = root / rel.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(target)
        for name, body in self.scripts.items():
            script = debian / name
            script.write_text(body, encoding="utf-8")
            script.chmod(0o755)
        if self.conffiles:
            (debian / "conffiles").write_text("\n".join(self.conffiles) + "\n", encoding="utf-8")
        if self.ldconfig_trigger:
            (debian / "triggers").write_text("activate-noawait ldconfig\n", encoding="utf-8")
        for d in sorted(root.rglob("*")):
            if d.is_dir() and not d.is_symlink():
                d.chmod(0o755)
        out = outdir / self.filename
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", root, out])
        shutil.rmtree(root)
        return out


def shared_object(cache: Path, soname: str, symbol: str, version: str) -> bytes:
    """A real one-function ELF shared object with the given soname, built once and cached."""
    key = hashlib.sha256(f"{soname}|{symbol}|{version}".encode()).hexdigest()[:16]
    cached = cache / f"{key}.so"
    if not cached.exists():
        # Several processes (pytest-xdist workers) may build the same object at once: every file
        # but the final one is private to this process, and the rename is atomic.
        cache.mkdir(parents=True, exist_ok=True)
        src = cache / f"{key}.{os.getpid()}.c"
        src.write_text(f'const char *{symbol}(void) {{ return "{version}"; }}\n', encoding="utf-8")
        tmp = cache / f"{key}.so.tmp.{os.getpid()}"
        try:
            run(["gcc", "-shared", "-fPIC", "-O2", "-s", f"-Wl,-soname,{soname}", "-o", tmp, src])
            tmp.rename(cached)
        finally:
            src.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)
    return cached.read_bytes()
