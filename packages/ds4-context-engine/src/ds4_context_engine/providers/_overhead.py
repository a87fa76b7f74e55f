"""The fixed overhead of a request: what its system prompt and tool schemas add to what is sent.

The planner budgets history against ``window - reserve - margin``, less ``fixed_tokens``: the part of
every request that is not history. Counting it as zero lets a plan filled to the hard limit pass the
window by the size of the system prompt and the tools (often thousands of tokens for a coding agent's
tool set). This measures it from the payload the transport really builds, in its own wire format
(Anthropic's top-level ``system`` and ``tools`` with their ``input_schema``, Chat's system message and
``function`` tools, Responses' ``instructions``), as the ``chars-v1`` estimate of the payload with them
minus the payload without them, in the same units as the planner's estimates of messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ds4_context_core import ModelDescriptor
from ds4_context_core.adapter import CompletionRequest, ToolDefinition
from ds4_context_core.tokens import estimate_text_tokens

from ._transport import HttpTransport

__all__ = ["request_overhead_tokens"]


def _payload_tokens(
    transport: HttpTransport, model: ModelDescriptor, system: str | None, tools: Sequence[ToolDefinition]
) -> int:
    request = CompletionRequest.from_messages((), model=model, system=system, tools=tuple(tools))
    return estimate_text_tokens(msgspec.json.encode(transport.build_payload(request)).decode())


def request_overhead_tokens(
    transport: HttpTransport,
    *,
    model: ModelDescriptor,
    system: str | None = None,
    tools: Sequence[ToolDefinition] = (),
) -> int:
    """The estimated tokens ``system`` and ``tools`` add to every request ``transport`` sends for
    ``model``: pass it to the planner as ``fixed_tokens``. Zero when there are neither."""
    if not system and not tools:
        return 0
    bare = _payload_tokens(transport, model, None, ())
    return max(0, _payload_tokens(transport, model, system, tools) - bare)
