"""A message's blocks as readable text, for restore and for retrieved history."""

from __future__ import annotations

from ds4_context_core import (
    CanonicalBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    stable_json,
)


def message_text(blocks: tuple[CanonicalBlock, ...], *, thinking: bool = True) -> str:
    """Text, thinking (unless ``thinking=False``), tool calls with their arguments and tool results."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            if thinking:
                parts.append(f"[thinking] {block.thinking}")
        elif isinstance(block, ToolCallBlock):
            parts.append(f"[call {block.name}] {stable_json(block.arguments)}")
        elif isinstance(block, ToolResultBlock):
            parts.append(f"[result {block.tool_name}] {block.content}")
    return "\n".join(parts)
