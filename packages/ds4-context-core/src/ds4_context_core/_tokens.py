"""The ``chars-v1`` token estimator.

estimate = ceil(chars / 4) + 8 per message + 4 per block + 1024 per image, where chars counts the text a
provider would see: text, thinking, tool names and stable-JSON arguments, tool result content, reference
paths and ids, and the stable JSON of opaque provider values.
"""

from __future__ import annotations

from typing import Final

from ._model import (
    ArtifactReferenceBlock,
    CanonicalBlock,
    CanonicalMessage,
    FileReferenceBlock,
    ImageBlock,
    OpaqueProviderBlock,
    SummaryReferenceBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ._stable_json import stable_json

__all__ = ["CHARS_V1", "estimate_message_tokens", "estimate_text_tokens"]

CHARS_V1: Final = "chars-v1"
_CHARS_PER_TOKEN: Final = 4
_PER_MESSAGE: Final = 8
_PER_BLOCK: Final = 4
_PER_IMAGE: Final = 1024


def estimate_text_tokens(text: str) -> int:
    """ceil(len(text) / 4)."""
    return -(-len(text) // _CHARS_PER_TOKEN)


def _block_chars(block: CanonicalBlock) -> int:
    match block:
        case TextBlock(text=text):
            return len(text)
        case ThinkingBlock(thinking=thinking):
            return len(thinking)
        case ToolCallBlock(name=name, arguments=arguments):
            return len(name) + len(stable_json(arguments))
        case ToolResultBlock(content=content, tool_name=tool_name):
            return len(content) + len(tool_name)
        case FileReferenceBlock(path=path):
            return len(path)
        case ArtifactReferenceBlock(artifact_id=artifact_id):
            return len(artifact_id)
        case SummaryReferenceBlock(summary_id=summary_id):
            return len(summary_id)
        case OpaqueProviderBlock(value=value):
            return len(stable_json(value))
        case ImageBlock():
            return 0


def estimate_message_tokens(message: CanonicalMessage) -> int:
    """The ``chars-v1`` estimate for one message."""
    chars = 0
    images = 0
    for block in message.blocks:
        if type(block) is ImageBlock:
            images += 1
        else:
            chars += _block_chars(block)
    return (
        -(-chars // _CHARS_PER_TOKEN) + _PER_MESSAGE + _PER_BLOCK * len(message.blocks) + _PER_IMAGE * images
    )
