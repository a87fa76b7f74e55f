"""The /context commands that look at a plan: manifest, included, excluded, explain, preview, restore."""

from __future__ import annotations

from typing import Final

import msgspec

from ds4_context_core import (
    CanonicalMessage,
    TextBlock,
    estimate_message_tokens,
    sha256_hex,
)
from ds4_context_core.planner import ContextPlan, restore
from ds4_context_engine._exceptions import CommandError

from ._results import (
    CompactPreviewResult,
    ExcludedResult,
    ExclusionLine,
    ExplainResult,
    IncludedResult,
    ItemLine,
    ManifestResult,
    RestoredMessage,
    RestoreResult,
)
from ._text import message_text
from ._workspace import ContextWorkspace

# Supplements made from session messages, whose sources `restore` can show.
_SUPPLEMENTS_WITH_SOURCES: Final = frozenset({"summary", "retrieved-history"})

__all__ = [
    "RESTORE_MAX_CHARS",
    "context_compact_preview",
    "context_excluded",
    "context_explain",
    "context_included",
    "context_manifest",
    "context_restore",
]

RESTORE_MAX_CHARS: Final = 4000


def _message_id(workspace: ContextWorkspace, reference: str, plan: ContextPlan | None = None) -> str:
    """Accept a full id, or the bare hex the tables print: a receipt of ``plan``, else an entry id."""
    if ":" in reference:
        return reference
    if plan is not None:
        for record in plan.manifest.receipts:
            if record.receipt_id.rsplit(":", 1)[-1] == reference:
                return record.receipt_id
    return f"{workspace.session.session_id}:{reference}"


def _plan_id(plan: ContextPlan) -> str:
    return "plan:" + sha256_hex(plan.encode())[:16]


def context_manifest(workspace: ContextWorkspace) -> ManifestResult:
    """What the plan includes and leaves out, with the budget it was measured against."""
    plan = workspace.plan()
    manifest = plan.manifest
    model = workspace.model
    assert model is not None
    return ManifestResult(
        plan_id=_plan_id(plan),
        contract_version=manifest.contract_version,
        model=f"{model.provider}:{model.id}",
        context_window=plan.budget.context_window,
        hard_limit=plan.budget.hard_limit,
        history_messages=manifest.history_messages,
        included_messages=manifest.included_messages,
        native_tokens=manifest.native_tokens,
        planned_tokens=manifest.planned_tokens,
        saved_tokens=manifest.saved_tokens,
        shared_prefix_messages=manifest.shared_prefix_messages,
        receipts=len(manifest.receipts),
        fallback=None if manifest.fallback is None else f"{manifest.fallback.mode}:{manifest.fallback.code}",
        manifest=msgspec.to_builtins(manifest),
        fixed_tokens=plan.budget.fixed_tokens,
        fixed_tokens_source=workspace.fixed_tokens_source,
    )


def context_included(workspace: ContextWorkspace) -> IncludedResult:
    plan = workspace.plan()
    items = tuple(
        ItemLine(
            message_id=item.message_id,
            kind=item.kind,
            reason=item.reason,
            tokens=item.tokens,
            priority=item.priority,
        )
        for item in plan.items
    )
    return IncludedResult(
        total_tokens=sum(item.tokens for item in items),
        fixed_tokens=plan.budget.fixed_tokens,
        planned_tokens=plan.manifest.planned_tokens,
        items=items,
    )


def context_excluded(workspace: ContextWorkspace) -> ExcludedResult:
    plan = workspace.plan()
    lines = tuple(
        ExclusionLine(
            reason=exclusion.reason,
            count=exclusion.count,
            tokens=exclusion.tokens,
            first_message_id=exclusion.first_message_id
            or (exclusion.message_ids[0] if exclusion.message_ids else None),
            last_message_id=exclusion.last_message_id
            or (exclusion.message_ids[-1] if exclusion.message_ids else None),
        )
        for exclusion in plan.manifest.exclusions
    )
    return ExcludedResult(total_tokens=sum(line.tokens for line in lines), exclusions=lines)


def context_explain(workspace: ContextWorkspace, reference: str) -> ExplainResult:
    """Why one message is in the plan, replaced by a receipt, trimmed, or left out."""
    plan = workspace.plan()
    message_id = _message_id(workspace, reference)
    summarized_by: str | None = None
    for item in plan.items:
        if item.original_index is None and message_id in item.source_ids:
            # a supplement (the task digest, a summary) written from the message: the message itself is
            # not sent, as restore says too; it is explained below with what left it out
            summarized_by = summarized_by or item.message_id
            continue
        if item.message_id == message_id or message_id in item.source_ids:
            receipt = item.message_id if item.kind == "receipt" else None
            return ExplainResult(
                message_id=message_id,
                in_plan=item.kind != "receipt",
                kind=item.kind,
                reason=item.reason if receipt is None else "replaced by a receipt (restorable)",
                tokens=item.tokens,
                group_id=item.group_id,
                receipt_id=receipt,
            )
    for receipt_record in plan.manifest.receipts:
        if message_id in receipt_record.original_message_ids:
            return ExplainResult(
                message_id=message_id,
                in_plan=False,
                kind="receipt",
                reason="replaced by a receipt (restorable)",
                tokens=None,
                group_id=None,
                receipt_id=receipt_record.receipt_id,
            )
    positions = {message.id: index for index, message in enumerate(workspace.context.messages)}
    if message_id not in positions:
        raise CommandError("message-unknown", "no message with that id on the active branch")
    position = positions[message_id]
    for exclusion in plan.manifest.exclusions:
        first = positions.get(exclusion.first_message_id or "", -1)
        last = positions.get(exclusion.last_message_id or "", -1)
        if message_id in exclusion.message_ids or first <= position <= last:
            return ExplainResult(
                message_id=message_id,
                in_plan=False,
                kind=None,
                reason=exclusion.reason + (f" (summarized in {summarized_by})" if summarized_by else ""),
                tokens=None,
                group_id=None,
                receipt_id=None,
            )
    return ExplainResult(
        message_id=message_id,
        in_plan=False,
        kind=None,
        reason="not selected" + (f" (summarized in {summarized_by})" if summarized_by else ""),
        tokens=None,
        group_id=None,
        receipt_id=None,
    )


def context_compact_preview(workspace: ContextWorkspace) -> CompactPreviewResult:
    """What compaction does in the plan ``plan`` makes now; nothing in the session changes.

    It is the very plan ``/context manifest`` and ``ds4-context plan`` show (not a separate dry-run plan,
    which would not apply layer 1 first and so cut elsewhere), and every figure is counted as ``plan``
    counts it, so the two agree number for number:

    * ``tokens_before`` is plan's history tokens, ``tokens_after`` its planned tokens (supplements
      included, ``supplement_tokens`` of them) and ``saved_tokens`` the difference; both include
      ``fixed_tokens`` (the system prompt and tools, plan's "fixed overhead"). The compaction
      report's own window usage is not shown: it counts the supplements placed before the cut.
    * ``history_messages = kept_messages + receipted_messages + dropped_messages``: kept are the history
      messages in the plan (verbatim, pinned or trimmed), receipted the originals receipts replaced and
      dropped the messages plan's "left out" table lists (a pin is never dropped).
    * ``trimmed_messages = trimmed_in_plan + trimmed_in_receipts``: the trimmed results still in the plan
      and the trimmed ones a layer-2 receipt then replaced.
    """
    plan = workspace.plan()
    manifest = plan.manifest
    report = manifest.compaction
    receipt_ids = {record.receipt_id for record in manifest.receipts}
    receipt_texts = tuple(
        "\n".join(block.text for block in message.blocks if isinstance(block, TextBlock))
        for message in plan.messages
        if message.id in receipt_ids
    )
    receipted = {source for record in manifest.receipts for source in record.original_message_ids}
    history_items = [item for item in plan.items if item.original_index is not None]
    trimmed_in_plan = sum(1 for item in plan.items if item.kind == "trimmed-tool-result")
    # the report lists at most 64 trimmed ids: those inside receipts are counted, never inferred
    trimmed_ids = () if report is None else report.trimmed_message_ids
    trimmed_in_receipts = sum(1 for message_id in trimmed_ids if message_id in receipted)
    return CompactPreviewResult(
        dry_run=True,
        compacts=report is not None,
        history_messages=manifest.history_messages,
        kept_messages=sum(1 for item in history_items if item.kind != "receipt"),
        receipted_messages=len(receipted),
        dropped_messages=sum(exclusion.count for exclusion in manifest.exclusions),
        tokens_before=manifest.native_tokens,
        tokens_after=manifest.planned_tokens,
        fixed_tokens=plan.budget.fixed_tokens,
        supplement_tokens=sum(item.tokens for item in plan.items if item.original_index is None),
        saved_tokens=manifest.saved_tokens,
        trimmed_messages=trimmed_in_plan + trimmed_in_receipts,
        trimmed_in_plan=trimmed_in_plan,
        trimmed_in_receipts=trimmed_in_receipts,
        receipts=tuple(record.receipt_id for record in manifest.receipts),
        gate_exclusions={} if report is None else {gate.gate: gate.count for gate in report.gate_exclusions},
        receipt_texts=receipt_texts,
    )


def _supplement_sources(
    workspace: ContextWorkspace, plan: ContextPlan, message_id: str
) -> tuple[CanonicalMessage, ...] | None:
    """The session messages a task digest or a retrieved excerpt was made from, or None for other ids."""
    item = next((item for item in plan.items if item.message_id == message_id), None)
    if item is None or item.kind not in _SUPPLEMENTS_WITH_SOURCES:
        return None
    by_id = {message.id: message for message in workspace.context.messages}
    return tuple(by_id[source] for source in item.source_ids if source in by_id)


def context_restore(workspace: ContextWorkspace, reference: str) -> RestoreResult:
    """The originals behind a receipt, a trimmed result or any message (read-only, bounded)."""
    plan = workspace.plan()
    message_id = _message_id(workspace, reference, plan)
    originals: tuple[CanonicalMessage, ...] | None
    try:
        originals = restore(plan, message_id)
    except LookupError as error:
        originals = _supplement_sources(workspace, plan, message_id)
        if originals is None:
            raise CommandError(
                "restore-unknown-id", "the plan knows no receipt or message with that id"
            ) from error
    record = next((r for r in plan.manifest.receipts if r.receipt_id == message_id), None)
    item = next((item for item in plan.items if item.message_id == message_id), None)
    messages = []
    for message in originals:
        text = message_text(message.blocks)
        messages.append(
            RestoredMessage(
                message_id=message.id,
                role=message.role,
                text=text[:RESTORE_MAX_CHARS],
                truncated=len(text) > RESTORE_MAX_CHARS,
            )
        )
    if record is not None:
        kind, planned_tokens, original_tokens = "receipt", record.receipt_tokens, record.original_tokens
    else:
        # a trimmed result, a supplement's sources or any message: what the originals weigh, chars-v1
        kind = item.kind if item is not None else "not-in-plan"
        planned_tokens = item.tokens if item is not None else 0
        original_tokens = sum(estimate_message_tokens(message) for message in originals)
    return RestoreResult(
        restored_id=message_id,
        kind=kind,
        receipt_id=record.receipt_id if record is not None else None,
        original_tokens=original_tokens,
        planned_tokens=planned_tokens,
        messages=tuple(messages),
    )
