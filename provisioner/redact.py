"""Keeping secrets out of what provision writes: artifacts, reports, history, logs.

Two layers: values under secret-looking keys (`*password*`, `*passwd*`, `*token*`, `*secret*`,
`*_key*` except `*_key_checking/_file/_url/_path`, `ansible_become_pass`, `ansible_ssh_pass`) are
replaced wherever a mapping is written,
and the known secret values themselves (from `-e`, the inventory, `-K`) are scrubbed from any text
(Ansible's stdout, event payloads, the command line artifact). Values shorter than MIN_SCRUB
characters are replaced under their keys but not searched for in free text (they would match
ordinary words).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

MASK = "********"
MIN_SCRUB = 6
_SECRET_NAME = re.compile(r"password|passwd|token|secret|become_pass|ssh_pass|sudo_pass", re.I)
_KEY_NAME = re.compile(r"(^|_)key(_|$)", re.I)  # key, *_key, *_key_*
# `*_key_*` names that hold no secret: a setting, a path or a public key's URL
_PUBLIC_KEY_NAME = re.compile(r"_key_(checking|file|url|path)$", re.I)
_NOT_SECRET = frozenset({"true", "false", "yes", "no", "none", "null"})


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and _secret_name(key)


@functools.lru_cache(maxsize=4096)
def _secret_name(key: str) -> bool:
    """Cached: every key of every event is asked (the same few hundred names, over and over)."""
    if _SECRET_NAME.search(key):
        return True
    return bool(_KEY_NAME.search(key)) and not _PUBLIC_KEY_NAME.search(key)


def redact(value: Any) -> Any:  # noqa: ANN401 - any JSON-like value
    """A copy with the values of secret keys masked, at any depth."""
    if isinstance(value, Mapping):
        return {k: MASK if is_secret_key(k) and v not in (None, "") else redact(v)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def secret_values(value: Any, *, under_secret: bool = False) -> set[str]:  # noqa: ANN401
    """The string values under secret keys (at any depth) worth scrubbing from free text."""
    found: set[str] = set()
    if isinstance(value, Mapping):
        for k, v in value.items():
            found |= secret_values(v, under_secret=under_secret or is_secret_key(k))
    elif isinstance(value, list | tuple):
        for v in value:
            found |= secret_values(v, under_secret=under_secret)
    elif under_secret and isinstance(value, str | int) and not isinstance(value, bool):
        text = str(value)
        if len(text) >= MIN_SCRUB and text.lower() not in _NOT_SECRET:
            found.add(text)
    return found


class Scrubber:
    """Masks known secret values in text and in JSON-like data (in place for mutable data)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        vals = sorted({v for v in values if len(v) >= MIN_SCRUB}, key=len, reverse=True)
        forms = {f for v in vals for f in (v, json.dumps(v)[1:-1])}
        self._re = (
            re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))
            if forms else None
        )

    def text(self, text: str) -> str:
        return self._re.sub(MASK, text) if self._re is not None else text

    def data(self, value: Any) -> Any:  # noqa: ANN401
        """Key-based redaction plus value scrubbing of every string, in place where possible."""
        if isinstance(value, dict):
            for k in list(value):
                v = value[k]
                value[k] = MASK if is_secret_key(k) and v not in (None, "") else self.data(v)
            return value
        if isinstance(value, list):
            for i, v in enumerate(value):
                value[i] = self.data(v)
            return value
        if isinstance(value, str):
            return self.text(value)
        return value

    def file(self, path: Path) -> None:
        """Scrub one artifact file in place (JSON files structurally, others as text)."""
        try:
            raw = path.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return
        new = self.text(raw)
        if raw.lstrip()[:1] in ("{", "["):  # job_events/*.json, and `command` (argv, cwd, env)
            with contextlib.suppress(ValueError):  # not JSON after all: scrubbed as text
                new = json.dumps(self.data(json.loads(raw)))
        if new != raw:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")

    def tree(self, root: Path, *, skip: Collection[Path] = ()) -> None:
        """Scrub every file under `root` (ansible-runner's artifacts of one run) but those in
        `skip` (written from data this scrubber had scrubbed already: the run's job events)."""
        if not root.is_dir():
            return
        for path in sorted(root.rglob("*")):
            if path not in skip and path.is_file() and not path.is_symlink():
                self.file(path)
