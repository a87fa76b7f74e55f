"""First-party integrations with agent frameworks, each behind an optional extra.

* :mod:`ds4_context_core.integrations.langchain`: ``pip install "ds4-context-core[langchain]"``
"""

__all__: list[str] = []
