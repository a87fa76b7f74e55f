"""Every exception that ds4-context-core raises on purpose.

Each carries a stable ``code`` (kebab-case) that hosts may branch on, and a message that never
contains payloads, prompts or secrets (at most a short, escaped prefix of a bad identifier).
Where a builtin fits, the class also subclasses it, so ``except ValueError`` keeps working::

    Ds4ContextError(Exception)
    ├── HistoryError(ValueError)            canonical history that cannot be used
    │   ├── HistoryDecodeError              bytes/JSON that do not decode into the model
    │   └── HistoryValidationError          a decoded snapshot that breaks an invariant (.issues)
    ├── StableJsonError(ValueError)         a value with no stable JSON form
    ├── PrivacyEnforcementError(RuntimeError)  privacy failed closed; nothing was sent
    ├── AdapterClosedError(RuntimeError)    the adapter was shut down
    ├── ConformanceError(AssertionError)    a conformance report that did not pass (.report)
    ├── MissingExtraError(ImportError)      an optional dependency is not installed (.extra)
    ├── PrivacyPolicyError(ValueError)      a privacy policy that would weaken protection
    ├── CompletionRequestError(ValueError)  a completion request an adapter must not send
    ├── ConformanceTargetError(ValueError)  a ``package.module:factory`` target that cannot be loaded
    ├── ConformanceTransportError(RuntimeError)  the transport failure the kit injects on purpose
    ├── InteropFormatError(ValueError)      a provider-format message that cannot be converted (.path)
    ├── TokenEstimateError(ValueError)      bad calibration samples or a broken injected tokenizer
    ├── PlanRestoreError(LookupError)       ``restore(plan, id)`` for an id the plan's history lacks
    ├── SummaryInputError(TypeError)        ``validate_summary`` given something other than text
    └── AdapterArgumentError(ValueError)    an adapter helper given an argument outside the contract

    HistoryDecodeError also has HistoryRecordError: a record that failed to decode (.line, .path)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdapterArgumentError",
    "AdapterClosedError",
    "CompletionRequestError",
    "ConformanceError",
    "ConformanceTargetError",
    "ConformanceTransportError",
    "Ds4ContextError",
    "HistoryDecodeError",
    "HistoryError",
    "HistoryRecordError",
    "HistoryValidationError",
    "InteropFormatError",
    "MissingExtraError",
    "PlanRestoreError",
    "PrivacyEnforcementError",
    "PrivacyPolicyError",
    "StableJsonError",
    "SummaryInputError",
    "TokenEstimateError",
]


class Ds4ContextError(Exception):
    """Base class. ``code`` is stable across releases; ``str(error)`` is for humans."""

    code: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __str__(self) -> str:
        return f"[{self.code}] {super().__str__()}"


class HistoryError(Ds4ContextError, ValueError):
    """Canonical history could not be used as given."""


class HistoryDecodeError(HistoryError):
    """Input did not decode into the canonical model (bad JSON, wrong types, bad identifiers)."""


class HistoryValidationError(HistoryError):
    """A snapshot broke one or more invariants; ``issues`` lists every one of them."""

    def __init__(self, code: str, message: str, issues: tuple[Any, ...] = ()) -> None:
        super().__init__(code, message)
        self.issues = issues


class StableJsonError(Ds4ContextError, ValueError):
    """A value has no stable JSON representation (unsupported type, key collision)."""


class PrivacyEnforcementError(Ds4ContextError, RuntimeError):
    """Privacy enforcement failed; by contract the payload must not be transmitted."""


class AdapterClosedError(Ds4ContextError, RuntimeError):
    """The adapter was shut down; history reads are rejected."""


class ConformanceError(Ds4ContextError, AssertionError):
    """A runtime-adapter conformance report did not pass; ``report`` holds it."""

    def __init__(self, code: str, message: str, report: Any = None) -> None:
        super().__init__(code, message)
        self.report = report


class MissingExtraError(Ds4ContextError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, extra: str, distribution: str, module: str) -> None:
        message = (
            f"the optional dependency {module!r} is not installed; "
            f'install it with: pip install "{distribution}[{extra}]"'
        )
        super().__init__("optional-dependency-missing", message)
        self.extra = extra
        self.name = module


class PrivacyPolicyError(Ds4ContextError, ValueError):
    """A privacy policy was rejected (for example a remote allow rule naming ``local-only``)."""


class CompletionRequestError(Ds4ContextError, ValueError):
    """A completion request an adapter must not send.

    ``completion-request-invalid``: malformed (bad provider or model id, payload not a mapping, bad
    ``from_plan`` arguments); ``completion-plan-fallback`` / ``completion-plan-blocked``:
    ``CompletionRequest.from_plan`` was given a plan that fell back open (native) or closed (blocked).
    """


class ConformanceTargetError(Ds4ContextError, ValueError):
    """A conformance target ``package.module:factory`` could not be imported or is not a factory."""


class ConformanceTransportError(Ds4ContextError, RuntimeError):
    """The failure the conformance kit injects into the transport on purpose (``conformance-transport``).

    An adapter must turn it into a failed completion result and keep its history unchanged.
    """

    def __init__(self, message: str = "injected conformance transport failure") -> None:
        super().__init__("conformance-transport", message)


class HistoryRecordError(HistoryDecodeError):
    """A JSON or JSONL record that did not decode.

    ``line`` is the 1-based JSONL line (``None`` for a single document); ``path`` is the JSON path of the
    offending value (``$.blocks[0].type``) when known. Neither ever holds content from the record.
    """

    def __init__(self, code: str, message: str, *, line: int | None = None, path: str | None = None) -> None:
        super().__init__(code, message)
        self.line = line
        self.path = path


class InteropFormatError(Ds4ContextError, ValueError):
    """A provider-format message (OpenAI, Anthropic) that cannot be converted; ``path`` locates it."""

    def __init__(self, code: str, message: str, *, path: str | None = None) -> None:
        super().__init__(code, message)
        self.path = path


class TokenEstimateError(Ds4ContextError, ValueError):
    """Token estimation could not proceed: invalid calibration samples or a broken injected tokenizer."""


class PlanRestoreError(Ds4ContextError, LookupError):
    """``restore(plan, message_id)`` was asked for an id that the plan's history does not contain."""


class SummaryInputError(Ds4ContextError, TypeError):
    """:func:`~ds4_context_core.summaries.validate_summary` was given something other than text.

    Codes: ``summary-text-invalid`` (the summary is not a ``str``) and ``summary-source-invalid`` (the
    sources are not a ``str`` or an iterable of ``str``).
    """


class AdapterArgumentError(Ds4ContextError, ValueError):
    """An adapter helper was given an argument outside the contract.

    Codes: ``diagnostics-limit-invalid`` (a ``DiagnosticsBuffer`` limit below 1),
    ``completion-fallback-code-unknown`` (a code outside ``COMPLETION_FALLBACK_CODES``) and
    ``conformance-timeout-invalid`` (a kit ``case_timeout`` that is not a positive, finite number).
    """
