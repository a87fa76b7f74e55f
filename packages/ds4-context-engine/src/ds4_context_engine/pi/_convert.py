"""Canonical messages written back in Pi's ``AgentMessage`` form (what :mod:`._context` reads them as)."""

from __future__ import annotations

from typing import Any

from ds4_context_core import (
    CanonicalMessage,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = ["canonical_to_pi_message"]


def _content(message: CanonicalMessage) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            content.append({"type": "thinking", "thinking": block.thinking})
        elif isinstance(block, ToolCallBlock):
            content.append(
                {"type": "toolCall", "id": block.id, "name": block.name, "arguments": block.arguments}
            )
        elif isinstance(block, ImageBlock):
            content.append({"type": "image", "data": block.data or "", "mimeType": block.mime_type or ""})
    return content


def canonical_to_pi_message(message: CanonicalMessage) -> dict[str, Any]:
    """The Pi ``AgentMessage`` a canonical user, assistant or tool-result message reads back as."""
    if message.role == "tool":
        results = [block for block in message.blocks if isinstance(block, ToolResultBlock)]
        if len(results) != 1:
            raise ValueError("a tool message must hold exactly one tool result to become a Pi toolResult")
        result = results[0]
        return {
            "role": "toolResult",
            "toolCallId": result.tool_call_id,
            "toolName": result.tool_name,
            "content": [{"type": "text", "text": result.content}],
            "isError": result.is_error,
            "timestamp": 0,
        }
    if message.role == "assistant":
        return {
            "role": "assistant",
            "content": _content(message),
            "api": "unknown",
            "provider": message.provider or "unknown",
            "model": message.model or "unknown",
            "stopReason": "toolUse" if message.tool_call_ids else "stop",
            "timestamp": 0,
        }
    if message.role == "user":
        return {"role": "user", "content": _content(message), "timestamp": 0}
    raise ValueError("only user, assistant and tool messages have a Pi message form")
