"""OpenAI Agents SDK integration: a model input filter that plans every model call of a run.

Needs ``pip install "ds4-context-core[openai-agents]"``; importing this module works without it,
:func:`model_input_filter` raises :class:`~ds4_context_core.MissingExtraError` naming the extra instead.
"""

from __future__ import annotations

from ds4_context_core._exports import adopt_public_names
from ds4_context_core._interop._openai_agents import model_input_filter, plan_agent_input

__all__ = ["model_input_filter", "plan_agent_input"]

adopt_public_names(__name__, globals())
