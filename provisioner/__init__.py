"""provision: take GPU servers from bare OS to a validated multi-GPU training stack."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("provision")
except PackageNotFoundError:  # pragma: no cover - running from a tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
