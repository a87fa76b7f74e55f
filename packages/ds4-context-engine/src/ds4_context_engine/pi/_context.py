"""The model context of a Pi session branch, as canonical messages.

Follows what Pi itself sends: walk root -> leaf; the newest compaction on the path contributes its summary
first, then the entries from its ``firstKeptEntryId`` up to it, then everything after it; branch summaries
and custom messages become messages; model and thinking level come from the path. Tool results and bash
executions become the ``tool`` role; images and thinking are kept; blocks we do not model are kept as
``opaqueProvider`` blocks rather than dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Final

import msgspec

from ds4_context_core import (
    CanonicalBlock,
    CanonicalMessage,
    ImageBlock,
    MessageFlags,
    OpaqueProviderBlock,
    Provenance,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

from ._reader import PiEntry, PiSession, PiSessionIssue, memo_mark, seen_by

__all__ = [
    "BRANCH_SUMMARY_PREFIX",
    "COMPACTION_SUMMARY_PREFIX",
    "PiContext",
    "build_pi_context",
    "pi_message_id",
]

COMPACTION_SUMMARY_PREFIX: Final = "Summary of the earlier part of this session (compacted by the host):\n\n"
BRANCH_SUMMARY_PREFIX: Final = "Summary of a branch of this session that was explored and left:\n\n"
_MESSAGE_ROLES: Final = frozenset(
    {"user", "assistant", "toolResult", "bashExecution", "custom", "branchSummary", "compactionSummary"}
)


class PiContext(msgspec.Struct, frozen=True, kw_only=True):
    """What the model sees for one branch, plus where each message came from."""

    session_id: str
    leaf_id: str | None
    messages: tuple[CanonicalMessage, ...]
    branch_entry_ids: tuple[str, ...]
    provider: str | None
    model_id: str | None
    thinking_level: str | None
    compaction_entry_id: str | None
    excluded_entry_ids: tuple[str, ...]
    labels: dict[str, str]
    issues: tuple[PiSessionIssue, ...]


def pi_message_id(session_id: str, entry_id: str) -> str:
    """A Pi message id as the original engine writes it."""
    return f"{session_id}:{entry_id}"


def _block(raw: Any, invalid: list[bool]) -> CanonicalBlock:
    """``raw`` as a block; a block of a kind Pi writes whose fields have other types is kept as an opaque
    block and noted in ``invalid`` (reported once for its entry by the builder)."""
    if isinstance(raw, dict):
        kind = raw.get("type")
        if kind == "text":
            text = raw.get("text")
            if isinstance(text, str):
                return TextBlock(text=text)
            invalid.append(True)
        elif kind == "thinking":
            thinking = raw.get("thinking")
            if isinstance(thinking, str):
                return ThinkingBlock(thinking=thinking)
            invalid.append(True)
        elif kind == "image":
            mime = raw.get("mimeType")
            data = raw.get("data")
            if (mime is not None and not isinstance(mime, str)) or (
                data is not None and not isinstance(data, str)
            ):
                invalid.append(True)
            return ImageBlock(
                mime_type=mime if isinstance(mime, str) else None,
                data=data if isinstance(data, str) else None,
            )
        elif kind == "toolCall":
            call_id, name, arguments = raw.get("id"), raw.get("name"), raw.get("arguments")
            if isinstance(call_id, str) and isinstance(name, str):
                if arguments is not None and not isinstance(arguments, dict):
                    invalid.append(True)
                return ToolCallBlock(
                    id=call_id, name=name, arguments=arguments if isinstance(arguments, dict) else {}
                )
            invalid.append(True)
        return OpaqueProviderBlock(original_type=kind if isinstance(kind, str) else None, value=raw)
    if isinstance(raw, str):
        return TextBlock(text=raw)
    invalid.append(True)
    return OpaqueProviderBlock(value=raw)


def _content_blocks(content: Any, invalid: list[bool]) -> list[CanonicalBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)]
    if isinstance(content, list):
        return [_block(item, invalid) for item in content]
    if content is not None:  # a number or an object: kept, not dropped
        invalid.append(True)
        return [OpaqueProviderBlock(value=content)]
    return []


def _split_result_content(content: Any, invalid: list[bool]) -> tuple[str, list[CanonicalBlock]]:
    """Text of a tool result joined by newlines; images and other blocks kept beside it."""
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    others: list[CanonicalBlock] = []
    if isinstance(content, list):
        for item in content:
            block = _block(item, invalid)
            if type(block) is TextBlock:
                texts.append(block.text)
            else:
                others.append(block)
    elif content is not None:
        invalid.append(True)
        others.append(OpaqueProviderBlock(value=content))
    return "\n".join(texts), others


def _bash_text(message: dict[str, Any]) -> str:
    command = message.get("command")
    output = message.get("output")
    exit_code = message.get("exitCode")
    lines = [f"$ {command if isinstance(command, str) else ''}"]
    if isinstance(output, str) and output:
        lines.append(output)
    if message.get("cancelled") is True:
        lines.append("[command cancelled]")
    elif exit_code is not None:
        lines.append(f"[exit code {exit_code}]")
    if message.get("truncated") is True:
        full = message.get("fullOutputPath")
        lines.append(
            f"[output truncated; full output at {full}]" if isinstance(full, str) else "[output truncated]"
        )
    return "\n".join(lines)


# One flags object per combination, shared by every message (flags are frozen): not one per message.
_FLAGS: Final = {
    (atomic, pinned): MessageFlags(atomic=True if atomic else None, pinned=True if pinned else None)
    for atomic in (False, True)
    for pinned in (False, True)
}
# One string per role name, instead of a decoded copy in the provenance of every message.
_ROLE_NAMES: Final = {name: name for name in _MESSAGE_ROLES}
# The entry types ``_Builder.add`` turns into messages; every other type adds nothing.
_CONVERTED_TYPES: Final = frozenset({"message", "custom_message", "branch_summary"})


class _Builder:
    def __init__(
        self, session: PiSession, pinned: Collection[str], reuse: dict[str, CanonicalMessage] | None = None
    ) -> None:
        self.session_id = session.session_id
        self.pinned = pinned
        self.messages: list[CanonicalMessage] = []
        self.excluded: list[str] = []
        self.issues: list[PiSessionIssue] = []
        # the messages of the context remembered before this build, by entry id (see ``add_reusing``)
        self.reuse = reuse
        # the timestamp of the entry being added (``PiEntry.timestamp`` would decode the line again)
        self.timestamp = ""

    def add_reusing(self, entry: PiEntry) -> None:
        """:meth:`add`, giving back the message the remembered context made of this very entry object.

        A rebuild (another leaf, a compaction, other pins) converts only what that context did not hold.
        A remembered message is this entry's when it names its entry by that entry's own id string
        (``source_entry_id``), which no other entry object shares, and its flags say the same pin state
        (the only input of the conversion besides the entry). No table of every entry's message is kept
        for good: it cost a dict slot per message of every session in view; this one lives for one build.
        """
        if entry.type not in _CONVERTED_TYPES:
            return
        reuse = self.reuse
        if reuse is not None:
            found = reuse.get(entry.id)
            if (
                found is not None
                and found.source_entry_id is entry.id
                and (found.flags.pinned is True) is (entry.id in self.pinned)
            ):
                self.messages.append(found)
                return
        self.add(entry)

    def emit(
        self,
        entry: PiEntry,
        role: str,
        original_role: str,
        blocks: Sequence[CanonicalBlock],
        *,
        created_at: Any = None,
        provider: Any = None,
        model: Any = None,
    ) -> None:
        atomic = any(type(block) is ToolCallBlock or type(block) is ToolResultBlock for block in blocks)
        self.messages.append(
            CanonicalMessage(
                id=pi_message_id(self.session_id, entry.id),
                source_entry_id=entry.id,
                role=role,  # type: ignore[arg-type]
                blocks=tuple(blocks),
                created_at=created_at
                if isinstance(created_at, str | int | float)
                else self.timestamp or None,
                provider=provider if isinstance(provider, str) else None,
                model=model if isinstance(model, str) else None,
                provenance=Provenance(
                    source="pi-session",
                    session_id=self.session_id,
                    entry_id=entry.id,
                    original_role=_ROLE_NAMES.get(original_role, original_role),
                ),
                flags=_FLAGS[atomic, entry.id in self.pinned],
            )
        )

    def add(self, entry: PiEntry) -> None:
        data = entry.data
        timestamp = data.get("timestamp")
        self.timestamp = timestamp if isinstance(timestamp, str) else ""
        invalid: list[bool] = []
        if entry.type == "message":
            self.add_message(entry, data.get("message"), invalid)
        elif entry.type == "custom_message":
            self.emit(entry, "custom", "custom", _content_blocks(data.get("content"), invalid))
        elif entry.type == "branch_summary":
            text = BRANCH_SUMMARY_PREFIX + _text_field(data.get("summary"), invalid)
            self.emit(entry, "user", "branchSummary", [TextBlock(text=text)])
        if invalid:
            self.issues.append(_field_issue(entry))

    def add_message(self, entry: PiEntry, message: Any, invalid: list[bool]) -> None:
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in _MESSAGE_ROLES:  # a list or dict role is not hashable
            self.issues.append(
                PiSessionIssue(
                    code="pi-message-role-unknown",
                    severity="warning",
                    message="a message entry has an unknown role; it is kept in the file but not sent",
                    line=entry.line,
                    entry_id=entry.id,
                )
            )
            self.excluded.append(entry.id)
            return
        timestamp = message.get("timestamp")
        if role == "user":
            blocks = _content_blocks(message.get("content"), invalid)
            self.emit(entry, "user", role, blocks, created_at=timestamp)
        elif role == "assistant":
            self.emit(
                entry,
                "assistant",
                role,
                _content_blocks(message.get("content"), invalid),
                created_at=timestamp,
                provider=message.get("provider"),
                model=message.get("model"),
            )
        elif role == "toolResult":
            text, others = _split_result_content(message.get("content"), invalid)
            result = ToolResultBlock(
                tool_call_id=_text_field(message.get("toolCallId"), invalid),
                tool_name=_text_field(message.get("toolName"), invalid),
                content=text,
                is_error=message.get("isError") is True,
            )
            self.emit(entry, "tool", role, [result, *others], created_at=timestamp)
        elif role == "bashExecution":
            if message.get("excludeFromContext") is True:
                self.excluded.append(entry.id)
                return
            _text_field(message.get("command"), invalid)
            _text_field(message.get("output"), invalid)
            self.emit(entry, "tool", role, [TextBlock(text=_bash_text(message))], created_at=timestamp)
        elif role == "custom":
            blocks = _content_blocks(message.get("content"), invalid)
            self.emit(entry, "custom", role, blocks, created_at=timestamp)
        else:
            prefix = BRANCH_SUMMARY_PREFIX if role == "branchSummary" else COMPACTION_SUMMARY_PREFIX
            text = prefix + _text_field(message.get("summary"), invalid)
            self.emit(entry, "user", role, [TextBlock(text=text)], created_at=timestamp)


def _text_field(value: Any, invalid: list[bool]) -> str:
    """A string field's value; ``""`` when it is missing or (noted in ``invalid``) of another type."""
    if isinstance(value, str):
        return value
    if value is not None:
        invalid.append(True)
    return ""


def _field_issue(entry: PiEntry) -> PiSessionIssue:
    """The one issue of an entry with fields of other types than Pi writes (never their values)."""
    return PiSessionIssue(
        code="pi-message-field-invalid",
        severity="warning",
        message="a message field has another type than Pi writes; it is sent as an opaque block or left out",
        line=entry.line,
        entry_id=entry.id,
    )


# Entry types that extend a context without changing what came before: messages and the settings
# entries whose latest value wins. A compaction (or anything else that rewrites the context) rebuilds it.
_EXTENDING_TYPES: Final = frozenset(
    {"message", "custom_message", "branch_summary", "model_change", "thinking_level_change", "label"}
)
_CONTEXT_KEY: Final = "context"


def _remembered(session: PiSession, pinned: frozenset[str]) -> tuple[PiContext | None, int]:
    """The context last built for the newest entry with these pins, and how many entries it had seen.

    The memo is shared by every session grown from one session, also by two grown from the same one
    with different appends: the context is this session's only when the last entry it saw is this
    session's entry at that place (one entry object is only ever appended after one prefix).
    """
    known = session.context_memo.get(_CONTEXT_KEY)
    if known is None:
        return None, 0
    seen, last, known_pinned, context = known
    if known_pinned != pinned or not seen_by(session, seen, last) or context.issues:
        return None, 0
    return context, seen


def _reusable(session: PiSession) -> dict[str, CanonicalMessage] | None:
    """The messages of the context remembered in the session's memo, by entry id, for one rebuild.

    Any remembered context will do (another session's grown from the same one too): a message is only
    reused for the entry object it was made from (``_Builder.add_reusing``). An entry an issue names
    is left out: its conversion reported something, so it is converted again to report it again.
    """
    known = session.context_memo.get(_CONTEXT_KEY)
    if known is None:
        return None
    context: PiContext = known[3]
    named = {issue.entry_id for issue in context.issues}
    return {
        message.source_entry_id: message
        for message in context.messages
        if message.source_entry_id is not None and message.source_entry_id not in named
    }


def _remember(session: PiSession, pinned: frozenset[str], context: PiContext) -> None:
    session.context_memo[_CONTEXT_KEY] = (*memo_mark(session), pinned, context)


def _extend(
    session: PiSession, context: PiContext, new: Sequence[PiEntry], pinned: frozenset[str]
) -> PiContext | None:
    """``context`` grown by ``new`` (entries appended after it), or ``None`` when they do not simply
    continue its branch (another branch, a compaction, an entry of another type)."""
    parent = context.leaf_id
    for entry in new:
        if entry.type not in _EXTENDING_TYPES or entry.parent_id != parent:
            return None
        parent = entry.id
    builder = _Builder(session, pinned)
    provider, model_id, thinking = context.provider, context.model_id, context.thinking_level
    labels: dict[str, str] | None = context.labels
    for entry in new:
        data = entry.data
        if entry.type == "model_change":
            if isinstance(data.get("provider"), str) and isinstance(data.get("modelId"), str):
                provider, model_id = data["provider"], data["modelId"]
        elif entry.type == "thinking_level_change":
            if isinstance(data.get("thinkingLevel"), str):
                thinking = data["thinkingLevel"]
        elif entry.type == "label":
            labels = None  # labels may name any entry: read them again
        elif entry.type == "message":
            message = data.get("message")
            if (
                isinstance(message, dict)
                and message.get("role") == "assistant"
                and isinstance(message.get("provider"), str)
                and isinstance(message.get("model"), str)
            ):
                provider, model_id = message["provider"], message["model"]
        builder.add_reusing(entry)
    return PiContext(
        session_id=context.session_id,
        leaf_id=parent,
        messages=context.messages + tuple(builder.messages),
        branch_entry_ids=context.branch_entry_ids + tuple(entry.id for entry in new),
        provider=provider,
        model_id=model_id,
        thinking_level=thinking,
        compaction_entry_id=context.compaction_entry_id,
        excluded_entry_ids=context.excluded_entry_ids + tuple(builder.excluded),
        labels=dict(labels) if labels is not None else session.labels(),
        issues=tuple(builder.issues),
    )


def build_pi_context(
    session: PiSession, leaf_id: str | None = None, *, pinned_entry_ids: Collection[str] = ()
) -> PiContext:
    """The model context of the branch ending at ``leaf_id`` (default: the newest entry).

    The last context built for the newest entry (and pin set) is remembered in the session's memo; when
    the session has only appended entries that continue that branch, only they are converted.
    """
    pinned = frozenset(pinned_entry_ids)
    if leaf_id is not None:  # only the newest branch grows; one remembered context, not one per leaf
        return _build_pi_context(session, leaf_id, pinned)
    previous, seen = _remembered(session, pinned)
    if previous is not None:
        new = session.entries[seen:]
        grown = _extend(session, previous, new, pinned) if new else previous
        if grown is not None:
            _remember(session, pinned, grown)
            return grown
    context = _build_pi_context(session, None, pinned)
    _remember(session, pinned, context)
    return context


def _branch_settings(
    path: Sequence[PiEntry], provider: str | None, model_id: str | None, thinking: str | None
) -> tuple[str | None, str | None, str | None, int | None]:
    """The model and thinking level the branch ends with (the header's when it sets none) and where its
    last compaction is.

    The latest of each setting wins, so the branch is read from its end: a message is decoded only until
    the newest one naming its model is found (the builder decodes each one again), not all of them.
    """
    compaction_index: int | None = None
    model_found = thinking_found = False
    for index in range(len(path) - 1, -1, -1):
        entry = path[index]
        if entry.type == "compaction":
            if compaction_index is None:
                compaction_index = index
        elif entry.type == "message":
            if model_found:
                continue
            message = entry.data.get("message")
            if (
                isinstance(message, dict)
                and message.get("role") == "assistant"
                and isinstance(message.get("provider"), str)
                and isinstance(message.get("model"), str)
            ):
                provider, model_id = message["provider"], message["model"]
                model_found = True
        elif entry.type == "model_change":
            if model_found:
                continue
            data = entry.data
            if isinstance(data.get("provider"), str) and isinstance(data.get("modelId"), str):
                provider, model_id = data["provider"], data["modelId"]
                model_found = True
        elif entry.type == "thinking_level_change":
            if thinking_found:
                continue
            data = entry.data
            if isinstance(data.get("thinkingLevel"), str):
                thinking = data["thinkingLevel"]
                thinking_found = True
    return provider, model_id, thinking, compaction_index


def _build_pi_context(session: PiSession, leaf_id: str | None, pinned: frozenset[str]) -> PiContext:
    path, branch_issues = session.branch(leaf_id)
    extra = session.header.extra
    provider = extra.get("provider") if isinstance(extra.get("provider"), str) else None
    model_id = extra.get("modelId") if isinstance(extra.get("modelId"), str) else None
    thinking = extra.get("thinkingLevel") if isinstance(extra.get("thinkingLevel"), str) else None
    provider, model_id, thinking, compaction_index = _branch_settings(path, provider, model_id, thinking)

    builder = _Builder(session, pinned, _reusable(session))
    builder.issues.extend(branch_issues)
    compaction_id: str | None = None
    if compaction_index is None:
        for entry in path:
            builder.add_reusing(entry)
    else:
        compaction = path[compaction_index]
        compaction_id = compaction.id
        compaction_data = compaction.data  # decoded once
        invalid: list[bool] = []
        summary = _text_field(compaction_data.get("summary"), invalid)
        builder.emit(
            compaction, "user", "compactionSummary", [TextBlock(text=COMPACTION_SUMMARY_PREFIX + summary)]
        )
        if invalid:
            builder.issues.append(_field_issue(compaction))
        first_kept = compaction_data.get("firstKeptEntryId")
        kept = False
        for entry in path[:compaction_index]:
            kept = kept or entry.id == first_kept
            if kept:
                builder.add_reusing(entry)
        if not kept and first_kept is not None:
            builder.issues.append(
                PiSessionIssue(
                    code="pi-compaction-first-kept-missing",
                    severity="warning",
                    message="a compaction names a first kept entry that is not on this branch",
                    line=compaction.line,
                    entry_id=compaction.id,
                )
            )
        for entry in path[compaction_index + 1 :]:
            builder.add_reusing(entry)

    # The path is dropped before the message tuple is made, and the message list right after it: a build
    # peaks 10 bytes a message above what it keeps instead of 18 (a sequence of 8 bytes a message less).
    leaf = path[-1].id if path else None
    branch_entry_ids = tuple(entry.id for entry in path)
    del path
    messages = tuple(builder.messages)
    builder.messages = []
    return PiContext(
        session_id=session.session_id,
        leaf_id=leaf,
        messages=messages,
        branch_entry_ids=branch_entry_ids,
        provider=provider,
        model_id=model_id,
        thinking_level=thinking,
        compaction_entry_id=compaction_id,
        excluded_entry_ids=tuple(builder.excluded),
        labels=session.labels(),
        issues=tuple(builder.issues),
    )
