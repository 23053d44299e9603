"""Read a plain YAML inventory without loading Ansible (about 0.3 s of CPU saved per run).

Only an inventory whose meaning needs none of Ansible's machinery qualifies: one YAML file in the
format of Ansible's `yaml` inventory plugin (groups with `vars`, `hosts`, `children`), no template
(`{{` / `{%`), no YAML tag (`!vault`, `!unsafe`), no host range (`gpu[01:08]`) or `host:port` name,
no `ansible_group_priority`, no `group_vars/` or `host_vars/` beside it, no `--limit`. Anything else
returns None and the caller uses Ansible's InventoryManager as before.

The variables are merged as Ansible merges them (ansible/inventory/helpers.py sort_groups and
get_group_vars; ansible/vars/manager.py): the groups a host belongs to, with their ancestors, from
the lowest depth up (`all` first), same depth by name, each replacing the keys before it; the
host's own variables last. tests/unit/test_plain_inventory.py compares the result with
InventoryManager's on the inventory shapes it accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_TEMPLATE = re.compile(r"\{\{|\{%|\{#")
_TAG = re.compile(r"(^|[\s:\[,-])!(?!=)")  # a YAML tag (!vault, !unsafe, !!str ...)
_PLAIN_HOST = re.compile(r"^[A-Za-z0-9_.-]+$")  # no range [01:08], no host:port, no IPv6 literal
_SECTIONS = frozenset({"vars", "hosts", "children"})


class NotPlain(Exception):
    """The inventory needs Ansible's own parser."""


@dataclass
class _Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    depth: int = 0


class _Reader:
    def __init__(self) -> None:
        self.groups: dict[str, _Group] = {"all": _Group("all"), "ungrouped": _Group("ungrouped")}
        self._link("all", "ungrouped")
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.host_groups: dict[str, list[str]] = {}

    def _group(self, name: object) -> _Group:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise NotPlain(f"group name {name!r}")
        return self.groups.setdefault(name, _Group(name))

    def _link(self, parent: str, child: str) -> None:
        p, c = self.groups[parent], self.groups[child]
        if child in p.children:
            return
        if child == parent or parent in self._descendants(child):
            raise NotPlain(f"group loop {parent} -> {child}")
        p.children.append(child)
        c.parents.append(parent)
        self._deepen(c, p.depth + 1)

    def _deepen(self, g: _Group, depth: int) -> None:
        if depth > g.depth:
            g.depth = depth
            for kid in g.children:
                self._deepen(self.groups[kid], depth + 1)

    def _walk(self, name: str, edge: str) -> set[str]:
        """Every group reachable from `name` along `edge` ("children" or "parents")."""
        out: set[str] = set()
        todo = [name]
        while todo:
            for other in getattr(self.groups[todo.pop()], edge):
                if other not in out:
                    out.add(other)
                    todo.append(other)
        return out

    def _descendants(self, name: str) -> set[str]:
        return self._walk(name, "children")

    def ancestors(self, name: str) -> set[str]:
        return self._walk(name, "parents")

    def group(self, name: object, data: object) -> str:
        g = self._group(name)
        if data is None:
            return g.name
        if not isinstance(data, dict):
            raise NotPlain(f"group {g.name}: not a mapping")
        for key, value in data.items():
            if key not in _SECTIONS or not isinstance(value, dict | None):
                raise NotPlain(f"group {g.name}: key {key!r}")  # Ansible warns and skips it
            if value is None:
                continue
            if key == "vars":
                if "ansible_group_priority" in value:
                    raise NotPlain("ansible_group_priority")
                g.vars.update(value)
            elif key == "children":
                for sub, sub_data in value.items():
                    self._link(g.name, self.group(sub, sub_data))
            else:
                for host, hv in value.items():
                    self.host(g.name, host, hv)
        return g.name

    def host(self, group: str, name: object, hv: object) -> None:
        if not isinstance(name, str) or not _PLAIN_HOST.match(name):
            raise NotPlain(f"host name {name!r}")
        if not isinstance(hv, dict | None):
            raise NotPlain(f"host {name}: variables are not a mapping")
        self.host_vars.setdefault(name, {}).update(hv or {})
        groups = self.host_groups.setdefault(name, [])
        if group not in groups:
            groups.append(group)
            self.groups[group].hosts.append(name)

    def finish(self) -> None:
        # Ansible's reconcile (ansible/inventory/data.py): every group without an ancestor becomes
        # a child of `all` (in the order the groups were met), and a host in no group but `all`
        # is in `ungrouped`
        for g in list(self.groups.values()):
            if g.name != "all" and not self.ancestors(g.name):
                self._link("all", g.name)
        for name, groups in self.host_groups.items():
            if groups == ["all"]:
                groups.append("ungrouped")
                self.groups["ungrouped"].hosts.append(name)

    def ordered_hosts(self) -> list[str]:
        """Group `all`'s hosts in Ansible's order: `all` itself, then its descendants level by
        level (Ansible walks a level as a set: where a level holds several groups with children,
        its order there is not defined, and neither is this one's)."""
        out: list[str] = []
        seen_groups = {"all"}
        level = ["all"]
        order = ["all"]
        while level:
            nxt: list[str] = []
            for g in level:
                for kid in self.groups[g].children:
                    if kid not in seen_groups:
                        seen_groups.add(kid)
                        nxt.append(kid)
                        order.append(kid)
            level = nxt
        for g in order:
            for h in self.groups[g].hosts:
                if h not in out:
                    out.append(h)
        return out

    def variables(self, host: str) -> dict[str, Any]:
        names: set[str] = set()
        for name in self.host_groups[host]:
            names.add(name)
            names |= self.ancestors(name)
        merged: dict[str, Any] = {}
        for g in sorted((self.groups[n] for n in names), key=lambda g: (g.depth, g.name)):
            merged.update(g.vars)
        merged.update(self.host_vars[host])
        merged["inventory_hostname"] = host
        return merged


def _load(path: Path) -> object:
    """The YAML document, or None where Ansible's loader could read it differently."""
    if (path.parent / "group_vars").exists() or (path.parent / "host_vars").exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if _TEMPLATE.search(text) or _TAG.search(text):
        return None
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except yaml.YAMLError:
        return None


def read(path: Path, limit: str | None = None) -> dict[str, dict[str, Any]] | None:
    """{host: variables} in Ansible's order, or None when the inventory is not plain."""
    if limit or not path.is_file() or path.suffix not in (".yml", ".yaml"):
        return None
    data = _load(path)
    if not isinstance(data, dict) or not data or "plugin" in data:
        return None
    reader = _Reader()
    try:
        for name, group_data in data.items():
            reader.group(name, group_data)
        reader.finish()
    except NotPlain:
        return None
    return {h: reader.variables(h) for h in reader.ordered_hosts()}
