"""Adapter diagnostics: metadata-only records and a bounded newest-N buffer.

A diagnostic says *what* happened (a stable code, a severity, a short fixed message), never *with what*:
no prompt, history, payload, credential, cache handle or provider output belongs in one. The buffer
also cuts messages to a fixed length and drops control characters, so a careless caller cannot make a
diagnostic unbounded.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Final, Literal, TypeAlias

import msgspec

from ds4_context_core._exceptions import AdapterArgumentError

__all__ = [
    "ADAPTER_DIAGNOSTICS_LIMIT",
    "ADAPTER_DIAGNOSTIC_CODES",
    "ADAPTER_DIAGNOSTIC_MESSAGE_MAX_CHARS",
    "DIAGNOSTIC_SEVERITIES",
    "AdapterDiagnostic",
    "DiagnosticSeverity",
    "DiagnosticsBuffer",
]

DiagnosticSeverity: TypeAlias = Literal["info", "warning", "error"]

DIAGNOSTIC_SEVERITIES: Final = ("info", "warning", "error")
ADAPTER_DIAGNOSTIC_CODES: Final = (
    "canonical-history-read-failed",
    "canonical-history-identity-mismatch",
    "canonical-history-invalid",
    "derived-state-rebuilt",
    "privacy-enforcement-failed",
    "completion-request-invalid",
    "completion-transport-failed",
    "local-kv-replay-failed",
    "local-kv-shutdown-failed",
    "adapter-closed",
)
ADAPTER_DIAGNOSTICS_LIMIT: Final = 100
ADAPTER_DIAGNOSTIC_MESSAGE_MAX_CHARS: Final = 240


class AdapterDiagnostic(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One metadata-only diagnostic. ``capability`` names the capability it concerns, if any."""

    code: str
    severity: DiagnosticSeverity
    message: str
    capability: str | None = None


def _bounded(text: str, limit: int) -> str:
    collapsed = " ".join(str(text).split())
    if not collapsed.isprintable():
        collapsed = "".join(char for char in collapsed if char.isprintable())
    return collapsed[:limit]


class DiagnosticsBuffer:
    """The newest ``limit`` diagnostics, oldest first. Safe to share between threads.

    ``limit`` must be an int >= 1, else :class:`~ds4_context_core.AdapterArgumentError`
    (``diagnostics-limit-invalid``, also a ``ValueError``).

    ``record`` bounds the message; it does not (cannot) know what a prompt looks like, so pass fixed
    text and codes only.
    """

    def __init__(self, limit: int = ADAPTER_DIAGNOSTICS_LIMIT) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise AdapterArgumentError(
                "diagnostics-limit-invalid", "a diagnostics buffer needs room for at least one entry"
            )
        self._entries: deque[AdapterDiagnostic] = deque(maxlen=limit)
        self._lock = threading.Lock()
        self._limit = limit

    @property
    def limit(self) -> int:
        """How many diagnostics are kept."""
        return self._limit

    def record(
        self,
        code: str,
        message: str,
        *,
        severity: DiagnosticSeverity = "warning",
        capability: str | None = None,
    ) -> AdapterDiagnostic:
        """Append a diagnostic built from a code and a short fixed message; return it."""
        diagnostic = AdapterDiagnostic(
            code=_bounded(code, 64),
            severity=severity if severity in DIAGNOSTIC_SEVERITIES else "error",
            message=_bounded(message, ADAPTER_DIAGNOSTIC_MESSAGE_MAX_CHARS),
            capability=None if capability is None else _bounded(capability, 64),
        )
        self.add(diagnostic)
        return diagnostic

    def add(self, diagnostic: AdapterDiagnostic) -> None:
        """Append an existing diagnostic (for example one from capability negotiation)."""
        with self._lock:
            self._entries.append(diagnostic)

    def extend(self, diagnostics: tuple[AdapterDiagnostic, ...] | list[AdapterDiagnostic]) -> None:
        """Append several diagnostics in order."""
        with self._lock:
            self._entries.extend(diagnostics)

    def snapshot(self) -> tuple[AdapterDiagnostic, ...]:
        """The kept diagnostics, oldest first."""
        with self._lock:
            return tuple(self._entries)

    def codes(self) -> tuple[str, ...]:
        """Just the codes, oldest first."""
        return tuple(diagnostic.code for diagnostic in self.snapshot())

    def clear(self) -> None:
        """Forget every diagnostic."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
