"""The repository models: lab/repos/*.yml read, templates instantiated, every fact with its source.

A model file describes one repository directory (an NVIDIA CUDA repository such as
ubuntu2204/x86_64, or the slice of a distribution archive the roles need). `load(name)` returns a
`RepoModel` whose `packages` are concrete (placeholders filled in); `facts()` lists what is marked
unconfirmed (U) or partly confirmed (P). The builders (lab/repo.py, lab/rpms.py) turn packages into
.deb/.rpm files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

MODEL_DIR = Path(__file__).resolve().parent / "repos"
TEMPLATE_DIR = MODEL_DIR / "templates"
CONFIDENCE = ("C", "P", "U")
RELATION_FIELDS = (
    "requires",
    "pre_depends",
    "depends",
    "recommends",
    "suggests",
    "provides",
    "conflicts",
    "replaces",
    "breaks",
    "obsoletes",
)
# {NAME} is a placeholder; {{NAME}} is a literal {NAME} (udev's ENV{{SYSTEMD_WANTS}})
_PLACEHOLDER = re.compile(r"\{\{([A-Z][A-Z_]*)\}\}|\{([A-Z][A-Z_]*)\}")
_MARK = re.compile(r"\s*\[(U|P)\]\s*$")


class ModelError(ValueError):
    """A model file is malformed (unknown placeholder, missing source, ...)."""


@dataclass(frozen=True)
class Fact:
    """One statement of a model that is not fully confirmed."""

    model: str
    subject: str  # package name, unit, set id
    what: str  # "package", "relation", "unit", "instances", ...
    confidence: str
    detail: str
    source: tuple[str, ...] = ()


@dataclass
class Package:
    """One concrete binary package of a model."""

    name: str
    version: str
    arch: str = "amd64"
    section: str = "misc"
    component: str = "main"
    relations: dict[str, list[str]] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)
    conffiles: list[str] = field(default_factory=list)
    payload: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)
    source: list[str] = field(default_factory=list)
    confidence: str = "U"
    note: str = ""
    set_id: str = ""
    marked: list[tuple[str, str, str]] = field(default_factory=list)  # (field, relation, conf)

    def key(self) -> tuple[str, str, str]:
        return (self.name, self.version, self.arch)


@dataclass
class RepoModel:
    """A repository model: its header fields and its concrete packages."""

    name: str  # file stem, e.g. "ubuntu2204-x86_64"
    data: dict[str, Any]
    packages: list[Package]
    sets: list[dict[str, Any]]

    @property
    def kind(self) -> str:
        return str(self.data["kind"])

    @property
    def repo(self) -> str:
        return str(self.data["repo"])

    @property
    def units(self) -> dict[str, dict[str, Any]]:
        units = self.data.get("units") or {}
        assert isinstance(units, dict)
        return units

    def package(self, name: str, version: str | None = None) -> Package:
        found = [p for p in self.packages if p.name == name and version in (None, p.version)]
        if not found:
            raise KeyError(f"{self.name}: no package {name} {version or ''}".rstrip())
        return found[-1]

    def names(self) -> set[str]:
        return {p.name for p in self.packages}


def global_variables() -> dict[str, str]:
    """Placeholders every model may use: the kernel the lab runs on (hosts share it)."""
    kernel = os.uname().release
    numeric = re.match(r"[0-9]+(\.[0-9]+)*", kernel)
    head, _, tail = kernel.partition("-")
    return {
        "KERNEL": kernel,
        "KVER": f"{numeric.group(0) if numeric else '0'}-1",
        # rpm versions hold one '-' at most: 6.18.44-fc-v1147 -> 6.18.44-fc_v1147
        "KERNEL_EVR": f"{head}-{tail.replace('-', '_')}" if tail else head,
    }


def _fill(value: Any, variables: dict[str, str], where: str, strict: bool = True) -> Any:  # noqa: ANN401
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            if m.group(1):
                return "{" + m.group(1) + "}"
            key = m.group(2)
            if key in variables:
                return variables[key]
            if strict:
                raise ModelError(f"{where}: unknown placeholder {{{key}}}")
            return m.group(0)

        return _PLACEHOLDER.sub(sub, value)
    if isinstance(value, list):
        return [_fill(v, variables, where, strict) for v in value]
    if isinstance(value, dict):
        return {
            _fill(k, variables, where, strict): _fill(v, variables, where, strict)
            for k, v in value.items()
        }
    return value


def _as_list(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


@cache
def _read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not a mapping")
    return data


def _template(name: str) -> dict[str, Any]:
    path = TEMPLATE_DIR / f"{name}.yml"
    if not path.exists():
        raise ModelError(f"unknown template {name!r} ({path})")
    return _read_yaml(path)


def _package(
    model: str,
    spec: dict[str, Any],
    defaults: dict[str, Any],
    set_spec: dict[str, Any],
    variables: dict[str, str],
) -> Package:
    merged: dict[str, Any] = {}
    merged.update({k: v for k, v in defaults.items() if k in ("section", "arch")})
    merged.update(spec)
    where = f"{model}:{set_spec.get('id', '?')}:{spec.get('name', '?')}"
    strict = {k: v for k, v in merged.items() if k not in ("source", "note", "confidence")}
    filled = _fill(strict, variables, where)
    source = _as_list(spec.get("source") or defaults.get("source") or set_spec.get("source"))
    confidence = str(
        spec.get("confidence") or defaults.get("confidence") or set_spec.get("confidence") or ""
    )
    if not source:
        raise ModelError(f"{where}: no source")
    if confidence not in CONFIDENCE:
        raise ModelError(f"{where}: confidence must be one of {CONFIDENCE}, not {confidence!r}")
    pkg = Package(
        name=filled["name"],
        version=str(filled["version"]),
        arch=str(filled.get("arch", "amd64")),
        section=str(filled.get("section", "misc")),
        component=str(set_spec.get("component", "main")),
        files=dict(filled.get("files") or {}),
        links={str(k): str(v) for k, v in (filled.get("links") or {}).items()},
        scripts={str(k): str(v) for k, v in (filled.get("scripts") or {}).items()},
        conffiles=_as_list(filled.get("conffiles")) + _as_list(filled.get("config")),
        payload=dict(filled.get("payload") or {}),
        variables=dict(variables),
        source=[_fill(s, variables, where, strict=False) for s in source],
        confidence=confidence,
        note=str(spec.get("note") or ""),
        set_id=str(set_spec.get("id", "")),
    )
    for rel in RELATION_FIELDS:
        values = []
        for raw in _as_list(filled.get(rel)):
            mark = _MARK.search(raw)
            entry = raw[: mark.start()] if mark else raw
            if mark:
                pkg.marked.append((rel, entry, mark.group(1)))
            values.append(entry)
        if values:
            pkg.relations[rel] = values
    for path, spec_file in pkg.files.items():
        if isinstance(spec_file, str) and _MARK.search(spec_file):
            raise ModelError(f"{where}: confidence marks are for relations only ({path})")
    return pkg


def load(name: str, variables: dict[str, str] | None = None) -> RepoModel:
    """The model lab/repos/<name>.yml with its templates instantiated."""
    path = MODEL_DIR / f"{name}.yml"
    if not path.exists():
        raise ModelError(f"no repository model {name!r} in {MODEL_DIR}")
    data = _read_yaml(path)
    for key in ("kind", "repo", "sets"):
        if key not in data:
            raise ModelError(f"{path}: missing {key!r}")
    base_vars = dict(global_variables())
    base_vars.update(variables or {})
    packages: list[Package] = []
    for set_spec in data["sets"]:
        if "template" in set_spec:
            tpl = _template(set_spec["template"])
            specs = tpl["packages"]
            defaults = dict(tpl.get("defaults") or {})
        else:
            specs = set_spec["packages"]
            defaults = {}
        if not set_spec.get("source") or set_spec.get("confidence") not in CONFIDENCE:
            raise ModelError(f"{path}: set {set_spec.get('id')!r} needs source and confidence")
        for instance in set_spec.get("instances") or [{}]:
            variables_i = dict(base_vars)
            variables_i.update({str(k): str(v) for k, v in instance.items()})
            for spec in specs:
                packages.append(_package(name, spec, defaults, set_spec, variables_i))
    _check(name, data, packages)
    return RepoModel(name=name, data=data, packages=packages, sets=list(data["sets"]))


def _check(name: str, data: dict[str, Any], packages: list[Package]) -> None:
    seen: set[tuple[str, str, str]] = set()
    for pkg in packages:
        if pkg.key() in seen:
            raise ModelError(f"{name}: {pkg.name} {pkg.version} defined twice")
        seen.add(pkg.key())
    units = data.get("units") or {}
    for unit_name, unit in units.items():
        if not unit.get("source") or unit.get("confidence") not in CONFIDENCE:
            raise ModelError(f"{name}: unit {unit_name!r} needs source and confidence")
    for pkg in packages:
        for target, spec in pkg.files.items():
            if isinstance(spec, dict) and "unit" in spec and spec["unit"] not in units:
                raise ModelError(f"{name}: {pkg.name} {target}: unknown unit {spec['unit']}")


def model_names() -> list[str]:
    return sorted(p.stem for p in MODEL_DIR.glob("*.yml"))


def facts(model: RepoModel, levels: tuple[str, ...] = ("U",)) -> list[Fact]:
    """Statements of the model at the given confidence levels (per package, relation, unit,
    set)."""
    out: list[Fact] = []
    name = model.name
    for set_spec in model.sets:
        if set_spec.get("confidence") in levels:
            out.append(
                Fact(
                    name,
                    str(set_spec.get("id")),
                    "instances",
                    str(set_spec["confidence"]),
                    "which versions exist: "
                    + ", ".join(
                        "/".join(f"{k}={v}" for k, v in i.items())
                        for i in (set_spec.get("instances") or [{}])
                    ),
                    tuple(_as_list(set_spec.get("source"))),
                )
            )
    seen: set[tuple[str, str, str]] = set()
    for pkg in model.packages:
        # one fact per package name and set (not per instance)
        generic = _generic_name(pkg)
        if pkg.confidence in levels and (pkg.set_id, generic, "pkg") not in seen:
            seen.add((pkg.set_id, generic, "pkg"))
            out.append(Fact(name, generic, "package", pkg.confidence, pkg.note, tuple(pkg.source)))
        for rel_field, rel, conf in pkg.marked:
            key = (pkg.set_id, generic, f"{rel_field}:{_generic(pkg, rel)}")
            if conf in levels and key not in seen:
                seen.add(key)
                out.append(
                    Fact(name, generic, rel_field, conf, _generic(pkg, rel), tuple(pkg.source))
                )
    for unit_name, unit in model.units.items():
        if unit.get("confidence") in levels:
            out.append(
                Fact(
                    name,
                    unit_name,
                    "unit",
                    str(unit["confidence"]),
                    str(unit.get("note", "")),
                    tuple(_as_list(unit.get("source"))),
                )
            )
    for block_name in ("keyring", "release"):
        block = model.data.get(block_name) or {}
        if block.get("confidence") in levels:
            out.append(
                Fact(
                    name,
                    block_name,
                    block_name,
                    str(block["confidence"]),
                    str(block.get("note", "")),
                    tuple(_as_list(block.get("source"))),
                )
            )
    return out


def _generic(pkg: Package, text: str) -> str:
    """Put placeholders back (535.129.03 -> {V}): facts read per template, not per version."""
    keys = ("KERNEL", "KVER", "VER", "PKG", "NVCC", "CUDART", "TV", "T", "V", "B")
    pairs = [(pkg.variables[k], k) for k in keys if len(pkg.variables.get(k, "")) > 1]
    for value, key in sorted(pairs, key=lambda p: -len(p[0])):
        text = text.replace(value, "{" + key + "}")
    return text


def _generic_name(pkg: Package) -> str:
    return _generic(pkg, pkg.name)
