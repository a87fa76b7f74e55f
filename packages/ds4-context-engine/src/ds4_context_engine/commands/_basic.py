"""The /context commands that need no plan: status, tokens, pins, memory, model, store and config."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Final

from ds4_context_core import estimate_message_tokens
from ds4_context_core.config import CONFIG_SCHEMA_ID
from ds4_context_core.history import validate_runtime_history_snapshot
from ds4_context_core.privacy import redact_secrets
from ds4_context_engine._exceptions import CommandError
from ds4_context_engine.store import append_memory_event, append_pin_event, append_unpin_event

from ._results import (
    ConfigResult,
    HealthResult,
    IssueCount,
    MemoryLine,
    MemoryResult,
    MessageTokens,
    ModelResult,
    PinLine,
    PinsResult,
    RebuildIndexResult,
    StatusResult,
    StorageResult,
    TokensResult,
)
from ._workspace import ContextWorkspace

__all__ = [
    "MEMORY_PREVIEW_CHARS",
    "context_config",
    "context_health",
    "context_memory",
    "context_model",
    "context_pin",
    "context_pins",
    "context_rebuild_index",
    "context_status",
    "context_storage",
    "context_tokens",
    "context_unpin",
]

MEMORY_PREVIEW_CHARS: Final = 80
_LARGEST: Final = 10


def _count_codes(codes: Iterable[str]) -> tuple[IssueCount, ...]:
    return tuple(IssueCount(code=code, count=count) for code, count in sorted(Counter(codes).items()))


def _require_store(workspace: ContextWorkspace, command: str) -> None:
    if workspace.store is None:
        raise CommandError("command-needs-store", f"/context {command} needs a derived store")


def context_status(workspace: ContextWorkspace) -> StatusResult:
    """The session at a glance: branch, model, size, pins, issues."""
    session = workspace.session
    context = workspace.context
    pins = len(workspace.pins())
    memory = len(workspace.memory_items())
    store_mode = "none"
    if workspace.store is not None:
        store_mode = workspace.store.health().mode
    return StatusResult(
        session_id=session.session_id,
        path=str(workspace.session_path),
        cwd=session.header.cwd,
        format_version=session.source_version,
        leaf_id=context.leaf_id,
        entries=len(session.entries),
        branch_entries=len(context.branch_entry_ids),
        context_messages=len(context.messages),
        estimated_tokens=sum(estimate_message_tokens(message) for message in context.messages),
        provider=context.provider,
        model_id=context.model_id,
        thinking_level=context.thinking_level,
        compaction_entry_id=context.compaction_entry_id,
        pins=pins,
        memory_items=memory,
        store_mode=store_mode,
        issues=_count_codes(issue.code for issue in (*session.issues, *context.issues)),
    )


def context_tokens(workspace: ContextWorkspace, *, planned_tokens: int | None = None) -> TokensResult:
    """Token estimate (``chars-v1``) of the native context, by role, with the largest messages."""
    by_role: Counter[str] = Counter()
    sized: list[MessageTokens] = []
    for message in workspace.context.messages:
        tokens = estimate_message_tokens(message)
        by_role[message.role] += tokens
        sized.append(MessageTokens(message_id=message.id, role=message.role, tokens=tokens))
    sized.sort(key=lambda item: (-item.tokens, item.message_id))
    return TokensResult(
        estimator="chars-v1",
        messages=len(sized),
        total_tokens=sum(by_role.values()),
        by_role=dict(sorted(by_role.items())),
        largest=tuple(sized[:_LARGEST]),
        context_window=workspace.model.context_window if workspace.model else None,
        planned_tokens=planned_tokens,
    )


def _pins_result(
    workspace: ContextWorkspace, command: str, changed: str | None = None, event: str | None = None
) -> PinsResult:
    in_context = {message.source_entry_id for message in workspace.context.messages}
    pins = tuple(
        PinLine(entry_id=pin.entry_id, label=pin.label, in_context=pin.entry_id in in_context)
        for pin in workspace.pins()
    )
    return PinsResult(command=command, changed_entry_id=changed, event_entry_id=event, pins=pins)


def context_pins(workspace: ContextWorkspace) -> PinsResult:
    return _pins_result(workspace, "pins")


def context_pin(workspace: ContextWorkspace, entry_id: str, *, label: str | None = None) -> PinsResult:
    """Pin an entry: appends a ``custom`` event to the session, then indexes it."""
    if workspace.session.entry(entry_id) is None:
        raise CommandError("pin-target-unknown", "the entry to pin is not in this session")
    event = append_pin_event(workspace.session_path, entry_id, label=label)
    workspace.refresh()
    return _pins_result(workspace, "pin", entry_id, event.id)


def context_unpin(workspace: ContextWorkspace, entry_id: str) -> PinsResult:
    if entry_id not in workspace.pinned_entry_ids():
        raise CommandError("pin-not-found", "that entry is not pinned")
    event = append_unpin_event(workspace.session_path, entry_id)
    workspace.refresh()
    return _pins_result(workspace, "unpin", entry_id, event.id)


def context_memory(
    workspace: ContextWorkspace, *, add: str | None = None, remove: str | None = None
) -> MemoryResult:
    """List memory items; ``add`` or ``remove`` first appends the matching event to the session."""
    event_id: str | None = None
    if add is not None and remove is not None:
        raise CommandError("command-argument-invalid", "give either add or remove, not both")
    if add is not None:
        if not add.strip():
            raise CommandError("memory-text-empty", "a memory item needs text")
        event_id = append_memory_event(workspace.session_path, text=add).id
        workspace.refresh()
    elif remove is not None:
        known = {item.item_id for item in workspace.memory_items()}
        if remove not in known:
            raise CommandError("memory-item-unknown", "no memory item has that id")
        event_id = append_memory_event(workspace.session_path, remove_item_id=remove).id
        workspace.refresh()
    # a preview is shown to the user, never to a provider; secrets in it are still masked
    items = tuple(
        MemoryLine(
            item_id=item.item_id,
            chars=len(item.text),
            preview=redact_secrets(item.text)[0][:MEMORY_PREVIEW_CHARS],
        )
        for item in workspace.memory_items()
    )
    return MemoryResult(event_entry_id=event_id, items=items)


def context_model(workspace: ContextWorkspace) -> ModelResult:
    """The model the session last used, and the descriptor the planner budgets against (if any)."""
    context = workspace.context
    descriptor = workspace.model
    return ModelResult(
        provider=descriptor.provider if descriptor else context.provider,
        model_id=descriptor.id if descriptor else context.model_id,
        thinking_level=context.thinking_level,
        context_window=descriptor.context_window if descriptor else None,
        max_tokens=descriptor.max_tokens if descriptor else None,
        source="configured" if descriptor else "session",
    )


def context_storage(workspace: ContextWorkspace) -> StorageResult:
    _require_store(workspace, "storage")
    assert workspace.store is not None
    workspace.ensure_indexed()
    return StorageResult(storage=workspace.store.storage())


def context_health(workspace: ContextWorkspace) -> HealthResult:
    """Session issues, history validation issues and the store's state. ``ok`` when none is an error."""
    session = workspace.session
    context = workspace.context
    snapshot = workspace.snapshot()
    history_issues = validate_runtime_history_snapshot(snapshot, trusted_project_root=snapshot.project_root)
    store_health = workspace.store.health() if workspace.store is not None else None
    session_errors = any(issue.severity == "error" for issue in (*session.issues, *context.issues))
    return HealthResult(
        ok=not session_errors and not history_issues and (store_health is None or store_health.ok),
        session_issues=_count_codes(issue.code for issue in (*session.issues, *context.issues)),
        history_issues=_count_codes(issue.code for issue in history_issues),
        store=store_health,
    )


def context_rebuild_index(workspace: ContextWorkspace) -> RebuildIndexResult:
    """Delete what the store derived from this session and replay the session file."""
    _require_store(workspace, "rebuild-index")
    assert workspace.store is not None
    report = workspace.store.rebuild_session(workspace.session_path)
    workspace.refresh()
    return RebuildIndexResult(report=report)


def context_config(workspace: ContextWorkspace) -> ConfigResult:
    """The effective configuration (defaults applied) and any warnings from loading it."""
    result = workspace.config_result
    return ConfigResult(
        schema=CONFIG_SCHEMA_ID,
        warnings=tuple(f"{warning.code} {warning.path}".strip() for warning in result.warnings),
        config=workspace.config.model_dump(mode="json"),
    )
