"""An exact count of a request's input tokens where the provider offers one, else the calibrated
estimate.

Anthropic counts a Messages request without running it (``POST /v1/messages/count_tokens``): exact, but
a network call, so it is optional. :meth:`AnthropicMessagesTransport.count_tokens` sends the same payload
a completion would (converted the same way, privacy enforced on it right before sending) and never
raises: whatever goes wrong gives the calibrated estimate instead, with a warning code from
``TOKEN_COUNT_WARNING_CODES`` saying why. The estimate is the ``chars-v1`` estimate of the messages
plus the request's fixed overhead (system prompt and tool schemas as sent), times the calibration
ratio passed in, else the model's provider-family prior.
"""

from __future__ import annotations

import math
from typing import Final, Literal

import msgspec

from ds4_context_core import ModelDescriptor, estimate_message_tokens
from ds4_context_core.adapter import CompletionRequest
from ds4_context_core.tokens import calibration_prior, estimate_text_tokens

from ._overhead import request_overhead_tokens
from ._transport import HttpTransport

# what the providers package exports (tests/test_lazy_exports.py); the transports import the rest by name
__all__ = ["TOKEN_COUNT_SOURCES", "TOKEN_COUNT_WARNING_CODES", "TokenCount"]

TOKEN_COUNT_SOURCES: Final = ("count-tokens", "estimate")
TOKEN_COUNT_WARNING_CODES: Final = (
    "token-count-request-invalid",  # the request could not be converted or encoded
    "token-count-privacy-failed",  # privacy enforcement failed closed: nothing was sent
    "token-count-failed",  # the network, a timeout or the provider's status
    "token-count-answer-invalid",  # an answer without a non-negative integer ``input_tokens``
)

TokenCountWarning = Literal[
    "token-count-request-invalid",
    "token-count-privacy-failed",
    "token-count-failed",
    "token-count-answer-invalid",
]


class TokenCount(msgspec.Struct, frozen=True, kw_only=True):
    """A request's input tokens. ``exact`` when the provider counted them; otherwise ``warning`` says
    why not and ``input_tokens`` is the calibrated estimate. Counts and codes only, never content."""

    input_tokens: int
    exact: bool
    source: Literal["count-tokens", "estimate"]
    estimated_tokens: int
    calibration_ratio: float
    warning: TokenCountWarning | None = None
    detail: str | None = None


def _model(request: CompletionRequest) -> ModelDescriptor:
    if request.model_descriptor is not None:
        return request.model_descriptor
    return ModelDescriptor(provider=request.provider, id=request.model, context_window=1)


def _estimate(transport: HttpTransport, request: CompletionRequest) -> int:
    messages = sum(estimate_message_tokens(message) for message in request.messages)
    try:
        fixed = request_overhead_tokens(
            transport, model=_model(request), system=request.system, tools=request.tools
        )
    except Exception:  # a payload the transport cannot build: count the system prompt and tools as JSON
        fixed = estimate_text_tokens(
            msgspec.json.encode([request.system, msgspec.to_builtins(request.tools)]).decode()
        )
    return messages + fixed


def estimated_count(
    transport: HttpTransport,
    request: CompletionRequest,
    *,
    calibration_ratio: float | None = None,
    warning: TokenCountWarning | None = None,
    detail: str | None = None,
) -> TokenCount:
    """The calibrated estimate of ``request``'s input tokens (``exact`` false), with ``warning``."""
    ratio = calibration_ratio
    if ratio is None or not (isinstance(ratio, int | float) and math.isfinite(ratio) and ratio > 0):
        ratio = calibration_prior(_model(request)).ratio
    estimate = _estimate(transport, request)
    return TokenCount(
        input_tokens=math.ceil(estimate * ratio),
        exact=False,
        source="estimate",
        estimated_tokens=estimate,
        calibration_ratio=float(ratio),
        warning=warning,
        detail=detail,
    )
