"""First-party integrations with agent frameworks, each behind an optional extra.

* :mod:`ds4_context_core.integrations.langchain`: ``pip install "ds4-context-core[langchain]"``
* :mod:`ds4_context_core.integrations.pydantic_ai`: ``pip install "ds4-context-core[pydantic-ai]"``
* :mod:`ds4_context_core.integrations.openai_agents`: ``pip install "ds4-context-core[openai-agents]"``
"""

__all__: list[str] = []
