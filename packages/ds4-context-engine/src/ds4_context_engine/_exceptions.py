"""Exceptions the engine raises on purpose (Pi sessions, derived store, commands, trusted paths).

Every class carries a stable kebab-case ``code`` and subclasses ``ds4_context_core.Ds4ContextError`` plus
the builtin that fits, so ``except ValueError`` or ``except PermissionError`` keep working. Messages name
files and codes, never payloads, prompts or secrets::

    Ds4ContextError
    ├── PiSessionError(HistoryError -> ValueError)   a Pi session file that cannot be used
    ├── PiSessionWriteError(OSError)                 an append or create that was refused
    ├── UntrustedPathError(PermissionError)          a path outside the configured trusted roots
    ├── DerivedStoreError(RuntimeError)              the derived store could not do what was asked
    └── CommandError(ValueError)                     a /context command with bad arguments
"""

from __future__ import annotations

from ds4_context_core import Ds4ContextError, HistoryError

__all__ = [
    "CommandError",
    "DerivedStoreError",
    "PiSessionError",
    "PiSessionWriteError",
    "UntrustedPathError",
]


class PiSessionError(HistoryError):
    """A Pi session file could not be read (missing header, unsupported version, too large)."""


class PiSessionWriteError(Ds4ContextError, OSError):
    """Creating or appending to a Pi session was refused; the file was left as it was."""


class UntrustedPathError(Ds4ContextError, PermissionError):
    """A path (or the cwd a session names) resolves outside every trusted root."""


class DerivedStoreError(Ds4ContextError, RuntimeError):
    """The derived store failed in a way a rebuild could not hide."""


class CommandError(Ds4ContextError, ValueError):
    """A /context command was called with an unknown name or invalid arguments."""
