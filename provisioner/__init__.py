"""provision: take GPU servers from bare OS to a validated multi-GPU training stack."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`__version__`, read from the installed metadata on first use (PEP 562): importing
    importlib.metadata and scanning the installed distributions took about a third of
    `provision --help`'s start, and of each shell-completion call, which never shows it."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        found = version("provision")
    except PackageNotFoundError:  # pragma: no cover - running from a tree without metadata
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
