"""pydantic-ai integration: ``ModelMessage`` <-> canonical messages, and a planning history processor.

Needs ``pip install "ds4-context-core[pydantic-ai]"``; importing this module works without it, each
function raises :class:`~ds4_context_core.MissingExtraError` naming the extra instead.
"""

from __future__ import annotations

from ds4_context_core._exports import adopt_public_names
from ds4_context_core._interop._pydantic_ai import (
    from_pydantic_ai,
    history_processor,
    plan_pydantic_ai,
    to_pydantic_ai,
)

__all__ = ["from_pydantic_ai", "history_processor", "plan_pydantic_ai", "to_pydantic_ai"]

adopt_public_names(__name__, globals())
