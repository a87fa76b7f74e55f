"""Typed events of a streamed answer, and what every stream assembler does with the SSE events.

A streaming call reports text and tool-call deltas to a callback as they arrive and ends with the same
``CompletionResult`` a non-streaming call returns: an assembler turns the provider's events into the
non-streaming answer shape, which the transport's ordinary ``parse_response`` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

import msgspec

from ds4_context_core.adapter import CompletionFailure, CompletionUsage, FailureKind
from ds4_context_engine._exceptions import StreamCallbackError, StreamFailureError

from ._safe_codes import ERROR_TYPE_PATTERN
from ._sse import SseEvent

# What the providers package exports (its lazy map names the same; tests/test_lazy_exports.py). The
# assembler and the delivery helpers are the transports' own: they import them by name.
__all__ = ["StreamCallback", "StreamEvent", "TextDelta", "ToolCallDelta", "UsageReport"]


class TextDelta(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text-delta"):
    """More answer text."""

    text: str


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="tool-call-delta"):
    """Part of tool call ``index``: its ``id`` and ``name`` when first seen, then argument JSON text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class UsageReport(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="usage"):
    """The provider's token counts, once the stream has ended."""

    usage: CompletionUsage


StreamEvent: TypeAlias = TextDelta | ToolCallDelta | UsageReport
StreamCallback: TypeAlias = Callable[[StreamEvent], None]


class StreamAssembler(Protocol):
    """One provider's stream: events in, deltas out, the whole answer at the end."""

    @property
    def done(self) -> bool:
        """True once the provider's final event arrived; a stream that ends before is a cut."""
        ...

    def feed(self, event: SseEvent) -> list[StreamEvent]:
        """The deltas in ``event``; raises on a malformed event, StreamFailureError on a reported error."""
        ...

    def final_body(self) -> Any:
        """The answer in the provider's non-streaming shape (JSON builtins)."""
        ...


def stream_error(error_type: object, *, transient: bool = True) -> StreamFailureError:
    """A failure for an error event, naming only a short error type."""
    name = error_type if isinstance(error_type, str) and ERROR_TYPE_PATTERN.fullmatch(error_type) else "error"
    kind: FailureKind = "server-error" if transient else "invalid-response"
    return StreamFailureError(CompletionFailure(kind=kind, reason=f"the stream reported an error ({name})"))


def deliver(events: list[SseEvent], assembler: StreamAssembler, on_event: StreamCallback) -> bool:
    """Hand the deltas of ``events`` to ``on_event``; True once the provider's final event arrived."""
    for sse in events:
        try:
            deltas = assembler.feed(sse)
        except StreamFailureError:
            raise
        except Exception as error:
            failure = CompletionFailure(
                kind="invalid-response",
                reason=f"a stream event did not have the expected shape ({type(error).__name__})",
                http_status=200,
            )
            raise StreamFailureError(failure) from None
        for delta in deltas:
            try:
                on_event(delta)
            except Exception as error:
                raise StreamCallbackError from error
        if assembler.done:
            return True
    return False


def callback_failure(error: BaseException) -> CompletionFailure:
    return CompletionFailure(kind="client-error", reason=f"the event callback raised {type(error).__name__}")
