"""Provider message formats <-> canonical messages, on plain dicts (no provider SDK is imported).

* OpenAI Chat Completions ``messages``: ``from_openai_chat`` / ``to_openai_chat``
* OpenAI Responses input items: ``from_openai_responses`` / ``to_openai_responses``
* Anthropic Messages payloads: ``from_anthropic_messages`` / ``to_anthropic_messages``

Tool call/result linkage survives every direction: results point at their call ids, parallel calls
stay in one assistant message. Parts we do not model are kept whole as ``OpaqueProviderBlock`` values
(``original_type="<format>:<type>"``) and written back by the same format, so a round trip is lossless.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._interop._anthropic import AnthropicPayload, from_anthropic_messages, to_anthropic_messages
from ._interop._common import INTEROP_ERROR_CODES, INTEROP_FORMATS, RAW_ARGUMENTS_KEY
from ._interop._openai import from_openai_chat, from_openai_responses, to_openai_chat, to_openai_responses

__all__ = [
    "INTEROP_ERROR_CODES",
    "INTEROP_FORMATS",
    "RAW_ARGUMENTS_KEY",
    "AnthropicPayload",
    "from_anthropic_messages",
    "from_openai_chat",
    "from_openai_responses",
    "to_anthropic_messages",
    "to_openai_chat",
    "to_openai_responses",
]

adopt_public_names(__name__, globals())
