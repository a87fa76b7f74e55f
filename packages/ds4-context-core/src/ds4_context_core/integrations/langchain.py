"""LangChain integration: ``BaseMessage`` <-> canonical messages, and a planned ``trim_messages``.

Needs ``pip install "ds4-context-core[langchain]"``; importing this module works without it, each
function raises :class:`~ds4_context_core.MissingExtraError` naming the extra instead.
"""

from __future__ import annotations

from ds4_context_core._exports import adopt_public_names
from ds4_context_core._interop._langchain import (
    LangChainPlan,
    from_langchain,
    plan_langchain,
    planning_middleware,
    to_langchain,
    trim_langchain,
)

__all__ = [
    "LangChainPlan",
    "from_langchain",
    "plan_langchain",
    "planning_middleware",
    "to_langchain",
    "trim_langchain",
]

adopt_public_names(__name__, globals())
