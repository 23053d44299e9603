"""Building blocks of the lab's rpm repositories: a package description built with rpmbuild
(Debian's `rpm` package), cached by content like the .debs."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lab import util
from lab.util import clean_env, run


@dataclass
class Rpm:
    """One binary rpm: header fields, payload files, symlinks and scriptlets."""

    name: str
    version: str  # upstream version
    release: str  # e.g. 1.el9
    summary: str
    epoch: str = ""
    arch: str = "x86_64"
    requires: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    obsoletes: list[str] = field(default_factory=list)
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)  # post, preun, postun, pretrans
    config: list[str] = field(default_factory=list)
    description: str = "Simulated package of the provision lab; payload is not NVIDIA's."

    def add_text(self, path: str, text: str, mode: int = 0o644) -> None:
        self.files[path] = (text.encode(), mode)

    def add_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.files[path] = (data, mode)

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.release}.{self.arch}.rpm"

    def spec(self) -> str:
        lines = [
            f"Name: {self.name}",
            f"Version: {self.version}",
            f"Release: {self.release}",
            *([f"Epoch: {self.epoch}"] if self.epoch else []),
            f"Summary: {self.summary}",
            "License: NVIDIA (simulated)",
            f"BuildArch: {self.arch}",
            "AutoReqProv: no",
        ]
        for key, values in (
            ("Requires", self.requires),
            ("Provides", self.provides),
            ("Conflicts", self.conflicts),
            ("Obsoletes", self.obsoletes),
        ):
            lines += [f"{key}: {v}" for v in values]
        lines += [
            "",
            "%description",
            self.description,
            "",
            "%install",
            "cp -a %{_sourcedir}/root/. %{buildroot}/",
        ]
        for name, body in sorted(self.scripts.items()):
            lines += ["", f"%{name}", body.rstrip("\n")]
        lines += ["", "%files"]
        for path, (_, mode) in sorted(self.files.items()):
            prefix = "%config(noreplace) " if path in self.config else ""
            lines.append(f"%attr({mode:04o},root,root) {prefix}{path}")
        lines += sorted(self.symlinks)
        return "\n".join(lines) + "\n"

    def digest(self) -> str:
        h = hashlib.sha256(self.spec().encode())
        for rel, (data, mode) in sorted(self.files.items()):
            h.update(f"F{rel}\0{mode}\0".encode())
            h.update(hashlib.sha256(data).digest())
        for rel, target in sorted(self.symlinks.items()):
            h.update(f"L{rel}\0{target}\0".encode())
        return h.hexdigest()

    def build(self, outdir: Path, workdir: Path) -> Path:
        top = workdir / f"rpm-{self.name}-{self.version}-{self.release}"
        shutil.rmtree(top, ignore_errors=True)
        root = top / "SOURCES" / "root"
        root.mkdir(parents=True)
        for rel, (data, mode) in self.files.items():
            dest = root / rel.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            dest.chmod(mode)
        for rel, target in self.symlinks.items():
            dest = root / rel.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(target)
        spec = top / f"{self.name}.spec"
        spec.write_text(self.spec(), encoding="utf-8")
        out = top / "RPMS"
        run(
            [
                "rpmbuild",
                "-bb",
                "--quiet",
                "--define",
                f"_topdir {top}",
                "--define",
                f"_rpmdir {out}",
                "--define",
                "_build_id_links none",
                "--define",
                "__os_install_post %{nil}",
                "--define",
                "_binary_payload w2.xzdio",
                "--define",
                "debug_package %{nil}",
                "--define",
                "_rpmfilename %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
                spec,
            ],
            env=clean_env(HOME=str(top)),
            timeout=300,
        )
        built = out / self.filename
        final = outdir / self.filename
        shutil.move(built, final)
        shutil.rmtree(top, ignore_errors=True)
        return final

    def build_cached(self, outdir: Path, workdir: Path, cache: Path) -> Path:
        """Like build(), but reuse an identical package built before (cache/<digest>.rpm)."""
        return util.build_cached(
            self.digest(), self.filename, self.build, outdir=outdir, workdir=workdir, cache=cache
        )
