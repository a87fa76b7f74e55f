"""Records shared by every transport: requests, usage, failures and results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import msgspec

from ds4_context_core import CanonicalMessage, ModelDescriptor

if TYPE_CHECKING:
    from ds4_context_core.planner import ContextPlan

__all__ = [
    "FAILURE_KINDS",
    "FALLBACK_CODES",
    "TRANSIENT_FAILURE_KINDS",
    "CompletionOutput",
    "CompletionUsage",
    "FailureKind",
    "OutputToolCall",
    "ProviderContinuation",
    "ToolDefinition",
    "TransportFailure",
    "TransportRequest",
    "TransportResult",
    "UsageObservation",
]

FAILURE_KINDS: Final = (
    "authentication",
    "client-error",
    "connection-error",
    "invalid-request",
    "invalid-response",
    "privacy-enforcement-failed",
    "rate-limited",
    "server-error",
    "timeout",
)
# Only these are worth another attempt: the same request may succeed a moment later.
TRANSIENT_FAILURE_KINDS: Final = ("connection-error", "rate-limited", "server-error", "timeout")
FALLBACK_CODES: Final = ("invalid-request", "privacy-enforcement-failed", "transport-failed")

FailureKind: TypeAlias = Literal[
    "authentication",
    "client-error",
    "connection-error",
    "invalid-request",
    "invalid-response",
    "privacy-enforcement-failed",
    "rate-limited",
    "server-error",
    "timeout",
]


class ToolDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A tool offered to the model: name, description and JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})


class ProviderContinuation(msgspec.Struct, frozen=True, kw_only=True):
    """Proof of what a provider has stored after a call, so the next call may send only what is new.

    ``prefix_hash`` covers the canonical messages that were sent, ``reply_hash`` the answer the provider
    stored after them, and ``settings_hash`` the model, system prompt, tools and privacy policy. A later
    request continues from ``response_id`` only if all three still match; otherwise it replays in full.
    """

    provider: str
    model: str
    response_id: str
    prefix_count: int
    prefix_hash: str
    reply_hash: str
    settings_hash: str


class TransportRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a transport sends: provider-facing canonical messages (a plan's output) and model limits.

    ``stable_prefix_count`` is how many leading messages the plan promises to keep byte-identical on the
    next call; Anthropic cache breakpoints go there. ``system`` is the host's system prompt.
    ``continuation`` is the one a previous :class:`TransportResult` returned (OpenAI Responses only).
    """

    messages: tuple[CanonicalMessage, ...]
    model: ModelDescriptor
    system: str | None = None
    tools: tuple[ToolDefinition, ...] = ()
    max_output_tokens: int | None = None
    temperature: float | None = None
    stable_prefix_count: int = 0
    estimated_input_tokens: int | None = None
    continuation: ProviderContinuation | None = None

    @classmethod
    def from_plan(
        cls,
        plan: ContextPlan,
        *,
        model: ModelDescriptor,
        system: str | None = None,
        tools: tuple[ToolDefinition, ...] = (),
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        continuation: ProviderContinuation | None = None,
    ) -> TransportRequest:
        """A request for a plan's provider-facing messages.

        The prefix the plan shares with the previous plan is the stable prefix: it was byte-identical last
        time, so it is where a prompt-cache breakpoint is most likely to hit.
        """
        return cls(
            messages=plan.messages,
            model=model,
            system=system,
            tools=tools,
            max_output_tokens=max_output_tokens,
            temperature=temperature,
            stable_prefix_count=plan.manifest.shared_prefix_messages,
            continuation=continuation,
        )


class CompletionUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts as the provider reported them (cache counts are 0 when not reported)."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


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
    id: str
    name: str
    arguments: dict[str, Any]


class CompletionOutput(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    tool_calls: tuple[OutputToolCall, ...] = ()
    stop_reason: str | None = None
    response_id: str | None = None
    model: str | None = None


class TransportFailure(msgspec.Struct, frozen=True, kw_only=True):
    """Why an attempt failed: metadata only, never a response body or request payload."""

    kind: FailureKind
    reason: str
    http_status: int | None = None
    retry_after_ms: int | None = None

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT_FAILURE_KINDS


class TransportResult(msgspec.Struct, frozen=True, kw_only=True):
    """``completed`` with output and usage, or ``fallback`` with a code: a transport never raises.

    Fallback codes: ``transport-failed`` (retryable when the failure is transient),
    ``privacy-enforcement-failed`` and ``invalid-request`` (never retryable; nothing was sent).
    """

    status: Literal["completed", "fallback"]
    provider: str
    model: str
    output: CompletionOutput | None = None
    usage: CompletionUsage | None = None
    code: str | None = None
    retryable: bool = False
    failure: TransportFailure | None = None
    continued_from: str | None = None
    continuation: ProviderContinuation | None = None
    elapsed_ms: float = 0.0
