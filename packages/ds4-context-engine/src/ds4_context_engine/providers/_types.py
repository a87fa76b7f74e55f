"""Records the transports add to the core completion path: parsed output and usage observations.

The request, the result, the failure and the fallback codes are the core contract's
(``ds4_context_core.adapter``: ``CompletionRequest``, ``CompletionResult``, ``CompletionFailure``,
``COMPLETION_FALLBACK_CODES``); the shared records are re-exported here for convenience.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ds4_context_core.adapter import (
    FAILURE_KINDS,
    TRANSIENT_FAILURE_KINDS,
    CompletionUsage,
    FailureKind,
    ProviderContinuation,
    ToolDefinition,
)

__all__ = [
    "FAILURE_KINDS",
    "TRANSIENT_FAILURE_KINDS",
    "CompletionOutput",
    "CompletionUsage",
    "FailureKind",
    "OutputToolCall",
    "ProviderContinuation",
    "ToolDefinition",
    "UsageObservation",
]


class UsageObservation(msgspec.Struct, frozen=True, kw_only=True):
    """Our estimate next to the provider's count, for token-estimate calibration."""

    provider: str
    model: str
    estimated_input_tokens: int
    usage: CompletionUsage

    @property
    def calibration_ratio(self) -> float | None:
        """Provider-counted input tokens per estimated token (``plan_context(calibration_ratio=...)``).

        Meaningful when the estimate covers the same input the provider counted: pass
        ``estimated_input_tokens`` on the request when a system prompt or tools add to the messages.
        """
        if self.estimated_input_tokens <= 0 or self.usage.input_tokens <= 0:
            return None
        return self.usage.input_tokens / self.estimated_input_tokens


class OutputToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call of the answer. ``arguments_error`` is set (and ``arguments`` empty) when the model's
    argument text was not a JSON object: the caller answers the call with an error instead of failing
    the whole answer."""

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_error: str | None = None


class CompletionOutput(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    tool_calls: tuple[OutputToolCall, ...] = ()
    stop_reason: str | None = None
    response_id: str | None = None
    model: str | None = None
