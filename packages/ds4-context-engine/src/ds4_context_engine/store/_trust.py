"""Trusted-root checks: a path is used only when it resolves (symlinks followed) inside a trusted root."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ds4_context_engine._exceptions import UntrustedPathError
from ds4_context_engine._files import make_private_directories

__all__ = ["ensure_private_directory", "resolve_inside"]


def resolve_inside(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> Path:
    """``path`` fully resolved, if that lies in (or is) one of ``roots`` (also resolved); else raise."""
    resolved = Path(path).expanduser().resolve(strict=False)
    checked = False
    for root in roots:
        checked = True
        try:
            trusted = Path(root).expanduser().resolve(strict=True)
        except OSError:
            continue
        if resolved == trusted or resolved.is_relative_to(trusted):
            return resolved
    if not checked:
        raise UntrustedPathError("trusted-root-missing", "no trusted root is configured")
    raise UntrustedPathError("path-untrusted", "the path resolves outside every trusted root")


def ensure_private_directory(directory: Path) -> None:
    """Create ``directory`` (and parents) with mode 0700; refuse a symlink or a non-directory."""
    if directory.is_symlink():
        raise UntrustedPathError("path-symlink-refused", f"{directory}: a symlinked directory is refused")
    if not directory.exists():
        make_private_directories(directory)
    elif not directory.is_dir():
        raise UntrustedPathError("path-not-directory", f"{directory}: not a directory")
