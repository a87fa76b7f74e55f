"""The canonical history model: messages, blocks, provenance, snapshots, groups, model descriptors.

All records are frozen, keyword-only ``msgspec.Struct`` values. On the wire they use the original
camelCase names (``sourceEntryId``, ``toolCallId``), so JSON written by the original TypeScript tools
decodes unchanged. Optional fields that are unset are omitted when encoding, as ``JSON.stringify``
omits ``undefined``; encoding is deterministic, so decode -> encode -> decode -> encode is byte-stable.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import msgspec

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "ArtifactReferenceBlock",
    "CanonicalBlock",
    "CanonicalMessage",
    "FileReferenceBlock",
    "ImageBlock",
    "MessageFlags",
    "MessageRole",
    "ModelCost",
    "ModelDescriptor",
    "OpaqueProviderBlock",
    "Provenance",
    "ProvenanceSource",
    "RuntimeHistorySnapshot",
    "RuntimeToolAtomicGroup",
    "SummaryReferenceBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
]

HISTORY_SCHEMA_VERSION: Final = "runtime-history-v1"

MessageRole: TypeAlias = Literal["system", "user", "assistant", "tool", "custom"]
ProvenanceSource: TypeAlias = Literal["pi-session", "runtime-session"]


class _Block(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="type", omit_defaults=True):
    """Base of the nine block kinds; ``type`` on the wire selects the kind."""


class TextBlock(_Block, frozen=True, tag="text"):
    text: str


class ThinkingBlock(_Block, frozen=True, tag="thinking"):
    thinking: str


class ToolCallBlock(_Block, frozen=True, tag="toolCall"):
    id: str
    name: str
    arguments: dict[str, Any]


class ToolResultBlock(_Block, frozen=True, tag="toolResult"):
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False


class ImageBlock(_Block, frozen=True, tag="image"):
    mime_type: str | None = None
    data: str | None = None


class FileReferenceBlock(_Block, frozen=True, tag="fileReference"):
    path: str


class ArtifactReferenceBlock(_Block, frozen=True, tag="artifactReference"):
    artifact_id: str


class SummaryReferenceBlock(_Block, frozen=True, tag="summaryReference"):
    summary_id: str


class OpaqueProviderBlock(_Block, frozen=True, tag="opaqueProvider"):
    """Provider content we do not model; kept verbatim so nothing is lost."""

    value: Any = None
    original_type: str | None = None


CanonicalBlock: TypeAlias = (
    TextBlock
    | ThinkingBlock
    | ToolCallBlock
    | ToolResultBlock
    | ImageBlock
    | FileReferenceBlock
    | ArtifactReferenceBlock
    | SummaryReferenceBlock
    | OpaqueProviderBlock
)


class Provenance(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Where a canonical message came from in the host's native history."""

    source: ProvenanceSource
    session_id: str
    entry_id: str
    original_role: str | None = None
    runtime_id: str | None = None


class MessageFlags(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Per-message flags. ``atomic`` marks tool calls and results; ``synthetic`` marks content we made."""

    pinned: bool | None = None
    atomic: bool | None = None
    local_only: bool | None = None
    synthetic: bool | None = None


class CanonicalMessage(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One message of canonical history. ``blocks`` is a tuple: messages are immutable values."""

    id: str
    source_entry_id: str
    role: MessageRole
    blocks: tuple[CanonicalBlock, ...]
    created_at: str | int | float | None = None
    provider: str | None = None
    model: str | None = None
    provenance: Provenance
    token_estimate: int | None = None
    flags: MessageFlags = msgspec.field(default_factory=MessageFlags)

    @property
    def tool_call_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message makes, in block order."""
        return tuple(block.id for block in self.blocks if type(block) is ToolCallBlock)

    @property
    def tool_result_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message answers, in block order."""
        return tuple(block.tool_call_id for block in self.blocks if type(block) is ToolResultBlock)


class RuntimeToolAtomicGroup(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A tool call (or parallel batch) with all its results: planned as one unit, never split."""

    id: str
    message_ids: tuple[str, ...]
    tool_call_ids: tuple[str, ...]
    complete: bool


class RuntimeHistorySnapshot(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A read-only projection of a runtime's canonical history (``runtime-history-v1``)."""

    schema_version: str = HISTORY_SCHEMA_VERSION
    runtime_id: str
    session_id: str
    revision: str
    project_root: str
    messages: tuple[CanonicalMessage, ...]
    tool_atomic_groups: tuple[RuntimeToolAtomicGroup, ...]


class ModelCost(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Prices per million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


class ModelDescriptor(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """A provider model's limits: what the planner budgets against."""

    provider: str
    id: str
    context_window: int
    max_tokens: int | None = None
    reasoning: bool | None = None
    input: tuple[str, ...] | None = None
    cost: ModelCost | None = None
