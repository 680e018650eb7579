"""The installed distribution's version, for both programs' build_info metrics and `--version`."""

from __future__ import annotations

from importlib import metadata

__all__ = ["version"]


def version() -> str:
    """`volcano-monitor`'s version from the installed metadata; "unknown" when run from a bare checkout."""
    try:
        return metadata.version("volcano-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"
