"""The canonical history model: messages, blocks, provenance, snapshots, groups, model descriptors.

All records are frozen, keyword-only ``msgspec.Struct`` values. On the wire they use the original
camelCase names (``sourceEntryId``, ``toolCallId``), so JSON written by the original TypeScript tools
decodes unchanged. Optional fields that are unset are omitted when encoding, as ``JSON.stringify``
omits ``undefined``; encoding is deterministic, so decode -> encode -> decode -> encode is byte-stable.

Length limits are declared on the types (``Identifier``, ``BoundedText``) so that decoding enforces them
in C at no measurable cost; constructing a record in Python does not check them (validation does).

Messages, blocks, provenance and flags are created with ``gc=False``: a 100,000-message history is
hundreds of thousands of objects, and keeping them out of the cycle collector makes decoding about
twice as fast. These records cannot form reference cycles by themselves; the one way to make one is
to put a message inside its own tool-call ``arguments`` or opaque ``value``, which would only leak it.

A message shares what most messages of a history repeat, as it is made (decoded or built): an unset or
common flags value is one object for all, the provenance's entry id is the source entry id when they are
equal, and the session id, runtime id, provider, model and tool names are taken from a small table of
recent values.
A message with one short text block is about 400 bytes of objects instead of 620 (docs/core/history.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec
from msgspec.structs import force_setattr

__all__ = [
    "HISTORY_MAX_IDENTIFIER_CHARS",
    "HISTORY_MAX_PATH_CHARS",
    "HISTORY_MAX_TEXT_CHARS",
    "HISTORY_SCHEMA_VERSION",
    "ArtifactReferenceBlock",
    "BoundedText",
    "CanonicalBlock",
    "CanonicalMessage",
    "FileReferenceBlock",
    "Identifier",
    "ImageBlock",
    "MessageFlags",
    "MessageRole",
    "ModelCost",
    "ModelDescriptor",
    "OpaqueProviderBlock",
    "ProjectPath",
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
HISTORY_MAX_IDENTIFIER_CHARS: Final = 512
HISTORY_MAX_TEXT_CHARS: Final = 16 * 1024 * 1024
HISTORY_MAX_PATH_CHARS: Final = 4096

Identifier: TypeAlias = Annotated[str, msgspec.Meta(max_length=HISTORY_MAX_IDENTIFIER_CHARS)]
BoundedText: TypeAlias = Annotated[str, msgspec.Meta(max_length=HISTORY_MAX_TEXT_CHARS)]
ProjectPath: TypeAlias = Annotated[str, msgspec.Meta(max_length=HISTORY_MAX_PATH_CHARS)]

MessageRole: TypeAlias = Literal["system", "user", "assistant", "tool", "custom"]
ProvenanceSource: TypeAlias = Literal["pi-session", "runtime-session"]


# Equal flags values are one object (at most 3**4 exist: every field is unset, True or False).
_SHARED_FLAGS: dict[MessageFlags, MessageFlags] = {}
# Recent session ids, runtime ids, providers, models and tool names: a history repeats a handful of
# them in every message. Bounded (cleared when full), so distinct hostile values cost nothing but sharing.
_SHARED_NAMES: dict[str, str] = {}
_SHARED_NAMES_MAX: Final = 64


def _share_name(value: str) -> None:
    """Remember ``value`` as the string later equal ones are replaced by."""
    if len(_SHARED_NAMES) >= _SHARED_NAMES_MAX:
        _SHARED_NAMES.clear()
    _SHARED_NAMES[value] = value


def _shared_name(value: str) -> str:
    found = _SHARED_NAMES.get(value)
    if found is not None:
        return found
    _share_name(value)
    return value


def _share_field(owner: msgspec.Struct, field: str, value: object) -> None:
    """Replace ``owner.field`` (a frozen struct's) by the shared string equal to it, if one is known."""
    if type(value) is str:
        shared = _shared_name(value)
        if shared is not value:
            force_setattr(owner, field, shared)


class _Block(
    msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel", tag_field="type", omit_defaults=True
):
    """Base of the nine block kinds; ``type`` on the wire selects the kind."""


class TextBlock(_Block, frozen=True, tag="text"):
    text: BoundedText


class ThinkingBlock(_Block, frozen=True, tag="thinking"):
    thinking: BoundedText


class ToolCallBlock(_Block, frozen=True, tag="toolCall"):
    id: Identifier
    name: Identifier
    arguments: dict[str, Any]

    def __post_init__(self) -> None:
        _share_field(self, "name", self.name)  # a handful of tool names recur in every history


class ToolResultBlock(_Block, frozen=True, tag="toolResult", omit_defaults=False):
    """``isError`` is always written, as the original writes it, so its files re-encode byte for byte."""

    tool_call_id: Identifier
    tool_name: Identifier
    content: BoundedText
    is_error: bool = False

    def __post_init__(self) -> None:
        _share_field(self, "tool_name", self.tool_name)


class ImageBlock(_Block, frozen=True, tag="image"):
    mime_type: Identifier | None = None
    data: BoundedText | None = None


class FileReferenceBlock(_Block, frozen=True, tag="fileReference"):
    path: ProjectPath


class ArtifactReferenceBlock(_Block, frozen=True, tag="artifactReference"):
    artifact_id: Identifier


class SummaryReferenceBlock(_Block, frozen=True, tag="summaryReference"):
    summary_id: Identifier


class OpaqueProviderBlock(_Block, frozen=True, tag="opaqueProvider"):
    """Provider content we do not model; kept verbatim so nothing is lost."""

    value: Any = None
    original_type: Identifier | None = None


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


class Provenance(msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Where a canonical message came from in the host's native history."""

    source: ProvenanceSource
    session_id: Identifier
    entry_id: Identifier
    original_role: Identifier | None = None
    runtime_id: Identifier | None = None


class MessageFlags(msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Per-message flags. ``atomic`` marks tool calls and results; ``synthetic`` marks content we made."""

    pinned: bool | None = None
    atomic: bool | None = None
    local_only: bool | None = None
    synthetic: bool | None = None


class CanonicalMessage(
    msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel", omit_defaults=True
):
    """One message of canonical history. ``blocks`` is a tuple: messages are immutable values."""

    id: Identifier
    source_entry_id: Identifier
    role: MessageRole
    blocks: tuple[CanonicalBlock, ...]
    created_at: Identifier | int | float | None = None
    provider: Identifier | None = None
    model: Identifier | None = None
    provenance: Provenance
    token_estimate: int | None = None
    flags: MessageFlags = msgspec.field(default_factory=MessageFlags)

    def __post_init__(self) -> None:
        # Called by msgspec for every message decoded or built. Each replacement is an equal value (a
        # string or a frozen flags object), so nothing but identity changes. A message built in Python
        # is not type-checked (validation reports that), so only values of the declared types are shared.
        # Written for speed: it runs once per message (a replacement is made only when it changes).
        flags = self.flags
        if type(flags) is MessageFlags:
            try:
                shared = _SHARED_FLAGS.setdefault(flags, flags)
            except TypeError:  # a field holding an unhashable value
                shared = flags
            if shared is not flags:
                force_setattr(self, "flags", shared)
        provenance = self.provenance
        if type(provenance) is Provenance:
            entry_id = self.source_entry_id
            value: str | None = provenance.entry_id
            if value is not entry_id and value == entry_id and type(entry_id) is str:
                force_setattr(provenance, "entry_id", entry_id)
            _share_field(provenance, "session_id", provenance.session_id)
            _share_field(provenance, "runtime_id", provenance.runtime_id)
        _share_field(self, "provider", self.provider)
        _share_field(self, "model", self.model)

    @property
    def tool_call_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message makes, in block order."""
        return tuple(block.id for block in self.blocks if type(block) is ToolCallBlock)

    @property
    def tool_result_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls this message answers, in block order."""
        return tuple(block.tool_call_id for block in self.blocks if type(block) is ToolResultBlock)


class RuntimeToolAtomicGroup(msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel"):
    """A tool call (or parallel batch) with all its results: planned as one unit, never split."""

    id: Identifier
    message_ids: tuple[Identifier, ...]
    tool_call_ids: tuple[Identifier, ...]
    complete: bool


class RuntimeHistorySnapshot(msgspec.Struct, frozen=True, kw_only=True, rename="camel", weakref=True):
    """A read-only projection of a runtime's canonical history (``runtime-history-v1``)."""

    schema_version: Identifier = HISTORY_SCHEMA_VERSION
    runtime_id: Identifier
    session_id: Identifier
    revision: Identifier
    project_root: ProjectPath
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
