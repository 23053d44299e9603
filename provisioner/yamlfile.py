"""Reading the YAML files users hand to provision (stack manifests, `-e @file`), safely.

* size-bounded: a file over the limit is refused before it is parsed;
* UTF-8 only: other bytes are an error naming the offset, not a UnicodeDecodeError traceback;
* no anchors or aliases (`&a` / `*a`): a nested-alias "billion laughs" document would otherwise
  expand without bound (in memory and in error messages);
* no duplicate keys: YAML keeps the last one silently, so a second `driver:` block would quietly
  replace the first;
* any readable file: /dev/null, a pipe from `<(...)` or a symlink, not only regular files.

Errors are `YamlFileError` (a ValueError) with a message that names the file; callers turn it into
their own exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MiB = 1024 * 1024


class YamlFileError(ValueError):
    """A YAML file that cannot be used; the message names the file and what is wrong."""


def read_text(path: Path, *, limit: int, what: str) -> str:
    """The file's text, at most `limit` bytes, strictly UTF-8."""
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError as exc:
        raise YamlFileError(f"{what} {path}: not found") from exc
    except IsADirectoryError as exc:
        raise YamlFileError(f"{what} {path}: is a directory, not a file") from exc
    except OSError as exc:
        raise YamlFileError(f"{what} {path}: cannot be read ({exc.strerror or exc})") from exc
    if len(data) > limit:
        raise YamlFileError(
            f"{what} {path}: larger than the limit of {limit} bytes; "
            "is this the right file?"
        )
    return decode(data, f"{what} {path}")


def decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(
            f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from exc


def _loader() -> type:
    import yaml  # noqa: PLC0415 - lazy: keep `provision --help` fast

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader without anchors, aliases or duplicate keys."""

        def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401
            event: Any = self.peek_event()  # type: ignore[no-untyped-call]
            anchor = getattr(event, "anchor", None)
            mark: Any = getattr(event, "start_mark", None)
            if isinstance(event, yaml.AliasEvent):
                raise yaml.composer.ComposerError(
                    None, None, f"YAML aliases (*{anchor}) are not allowed here", mark
                )
            if anchor is not None:
                raise yaml.composer.ComposerError(
                    None, None, f"YAML anchors (&{anchor}) are not allowed here", mark
                )
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # noqa: ANN401
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def parse(text: str, where: str) -> Any:  # noqa: ANN401 - YAML documents are untyped
    """Parse one YAML document with the strict loader."""
    import yaml  # noqa: PLC0415

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{where}: not valid YAML: {_short(exc)}") from exc
    except RecursionError as exc:
        raise YamlFileError(f"{where}: nested too deeply") from exc


def load(path: Path, *, limit: int, what: str) -> Any:  # noqa: ANN401
    return parse(read_text(path, limit=limit, what=what), f"{what} {path}")


def _short(exc: Exception, limit: int = 500) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + " ..."


def load_packaged(path: Path) -> Any:  # noqa: ANN401
    """A data file shipped with provision (matrix, support table, role variables), read with
    libyaml's C loader where PyYAML has it (about ten times the pure-Python loader's speed: a
    tenth of a second per run). Its content is ours: tests/unit/test_yamlfile.py reads every
    shipped file with the strict loader too, so an anchor or a duplicate key still fails CI."""
    import yaml  # noqa: PLC0415

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{path}: not valid YAML: {_short(exc)}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlFileError(f"{path}: cannot be read ({exc})") from exc
