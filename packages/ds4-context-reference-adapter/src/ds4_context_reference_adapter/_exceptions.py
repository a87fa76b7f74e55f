"""Errors raised on purpose by the reference adapter.

Every error carries a stable ``code`` (one of ``ERROR_CODES``) and a stable ``reason`` (one of
``ERROR_REASONS``), so a host or the CLI can branch on them without parsing text. Messages name the
file position at most (a 1-based line number); they never contain record contents. Every class is
defined here, is exported by ``ds4_context_reference_adapter`` and reports it as its ``__module__``.

::

    HistoryError (ds4_context_core)
    └── ReferenceHistoryError                 .code, .reason, .line
        ├── ReferenceHistoryReadError         canonical-history-read-failed
        ├── ReferenceHistoryIdentityError     canonical-history-identity-mismatch
        ├── ReferenceHistoryInvalidError      canonical-history-invalid (.issues)
        ├── ReferenceHistoryExistsError       reference-history-exists
        ├── ReferenceHistoryLimitError        reference-history-limit-exceeded
        ├── ReferenceMessageRejectedError     reference-history-message-rejected
        └── ReferenceHistoryWriteError        reference-history-write-failed (.errno)
    Ds4ContextError (ds4_context_core)
    └── ReferenceConfigError(ValueError)      reference-adapter-config-invalid
"""

from __future__ import annotations

from typing import Any, Final

from ds4_context_core import Ds4ContextError, HistoryError

__all__ = [
    "ERROR_CODES",
    "ERROR_REASONS",
    "ReferenceConfigError",
    "ReferenceHistoryError",
    "ReferenceHistoryExistsError",
    "ReferenceHistoryIdentityError",
    "ReferenceHistoryInvalidError",
    "ReferenceHistoryLimitError",
    "ReferenceHistoryReadError",
    "ReferenceHistoryWriteError",
    "ReferenceMessageRejectedError",
]

ERROR_CODES: Final = (
    "canonical-history-identity-mismatch",
    "canonical-history-invalid",
    "canonical-history-read-failed",
    "reference-adapter-config-invalid",
    "reference-history-exists",
    "reference-history-limit-exceeded",
    "reference-history-message-rejected",
    "reference-history-write-failed",
)

ERROR_REASONS: Final = (
    "disk-full",
    "empty-file",
    "file-missing",
    "field-too-long",
    "file-too-large",
    "header-invalid",
    "identifier-invalid",
    "io-error",
    "message-id-duplicate",
    "nesting-too-deep",
    "not-a-regular-file",
    "path-exists",
    "permission-denied",
    "project-root-not-canonical",
    "project-root-untrusted",
    "provenance-mismatch",
    "record-invalid",
    "runtime-id-mismatch",
    "session-id-mismatch",
    "snapshot-invalid",
    "tool-call-duplicate",
    "tool-result-orphaned",
    "too-many-messages",
    "unterminated-record",
    "write-interrupted",
)


class ReferenceHistoryError(HistoryError):
    """Base class. ``reason`` narrows ``code``; ``line`` is the 1-based file line, when one applies."""

    reason: str
    line: int | None

    def __init__(self, code: str, reason: str, message: str, *, line: int | None = None) -> None:
        where = f" (line {line})" if line is not None else ""
        super().__init__(code, f"{reason}: {message}{where}")
        self.reason = reason
        self.line = line


class ReferenceHistoryReadError(ReferenceHistoryError):
    """The file could not be read as a ``ds4-runtime-session-v1`` history; it was left untouched."""

    def __init__(self, reason: str, message: str, *, line: int | None = None) -> None:
        super().__init__("canonical-history-read-failed", reason, message, line=line)


class ReferenceHistoryIdentityError(ReferenceHistoryError):
    """The header names another runtime, session or project root than the one expected."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("canonical-history-identity-mismatch", reason, message)


class ReferenceHistoryInvalidError(ReferenceHistoryError):
    """The records decode, but the history breaks a canonical invariant; ``issues`` lists them."""

    def __init__(
        self, reason: str, message: str, *, line: int | None = None, issues: tuple[Any, ...] = ()
    ) -> None:
        super().__init__("canonical-history-invalid", reason, message, line=line)
        self.issues = issues


class ReferenceHistoryExistsError(ReferenceHistoryError):
    """``create`` found something at the path and refused to overwrite it."""

    def __init__(self, message: str) -> None:
        super().__init__("reference-history-exists", "path-exists", message)


class ReferenceHistoryLimitError(ReferenceHistoryError):
    """An append would take the file over its configured size or message limit; nothing was written."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("reference-history-limit-exceeded", reason, message)


class ReferenceMessageRejectedError(ReferenceHistoryError):
    """A message does not belong in this history (identity, provenance, duplicate id); nothing was written."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("reference-history-message-rejected", reason, message)


class ReferenceHistoryWriteError(ReferenceHistoryError):
    """The operating system refused a write (disk full, permissions); the file holds no partial record."""

    def __init__(self, reason: str, message: str, *, errno: int | None = None) -> None:
        super().__init__("reference-history-write-failed", reason, message)
        self.errno = errno


class ReferenceConfigError(Ds4ContextError, ValueError):
    """A limit or adapter option is out of range."""

    def __init__(self, message: str) -> None:
        super().__init__("reference-adapter-config-invalid", message)


# Report the module users import from (as httpx does), so tracebacks and reprs name a public path.
for _class in (
    ReferenceConfigError,
    ReferenceHistoryError,
    ReferenceHistoryExistsError,
    ReferenceHistoryIdentityError,
    ReferenceHistoryInvalidError,
    ReferenceHistoryLimitError,
    ReferenceHistoryReadError,
    ReferenceHistoryWriteError,
    ReferenceMessageRejectedError,
):
    _class.__module__ = "ds4_context_reference_adapter"
