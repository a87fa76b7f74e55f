"""Private directories: every level this process creates is 0700, not only the last one."""

from __future__ import annotations

from pathlib import Path

__all__ = ["make_private_directories"]


def make_private_directories(directory: Path) -> None:
    """Create ``directory`` and each missing parent with mode 0700.

    ``Path.mkdir(parents=True)`` gives the mode to the last level only; the parents it makes follow the
    umask (0755 with the usual 022). A level that another process makes at the same moment is left as
    that process made it.
    """
    missing: list[Path] = []
    current = directory
    while not current.exists() and not current.is_symlink() and current.parent != current:
        missing.append(current)
        current = current.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:
            continue
        level.chmod(0o700)  # mkdir's mode passes through the umask too
