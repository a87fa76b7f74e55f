"""Type-checked, never run: what interop returns goes into the SDKs' own calls without a cast.

``nox -s typecheck`` runs mypy --strict over ``tests/`` with the real OpenAI and Anthropic SDKs
installed; a return type the SDK does not accept fails it.
"""

from __future__ import annotations

from anthropic import Anthropic
from openai import OpenAI

from ds4_context_core import CanonicalMessage
from ds4_context_core.interop import to_anthropic_messages, to_openai_chat, to_openai_responses


def send_everywhere(history: list[CanonicalMessage]) -> None:
    openai_client = OpenAI(api_key="unused")
    openai_client.chat.completions.create(model="gpt-x", messages=to_openai_chat(history))
    openai_client.responses.create(model="gpt-x", input=to_openai_responses(history))
    payload = to_anthropic_messages(history)
    anthropic_client = Anthropic(api_key="unused")
    anthropic_client.messages.create(model="claude-x", max_tokens=1024, **payload)
    anthropic_client.messages.create(model="claude-x", max_tokens=1024, messages=payload["messages"])
