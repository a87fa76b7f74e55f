"""The /context views of what stands in for history: summaries, compactions, retrieved items, artifacts.

Each returns metadata only (ids, kinds, sizes, counts, codes). The text of a summary is judged by core's
``summary-contract-v1`` here and never leaves this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from ds4_context_core.summaries import SUMMARY_CONTRACT_VERSION, SummaryValidation, validate_summary
from ds4_context_engine._exceptions import CommandError
from ds4_context_engine.pi import (
    PiEntry,
    PiSession,
    PiSummary,
    pi_entry_texts,
    pi_is_tool_output,
    pi_summaries,
)
from ds4_context_engine.store import ARTIFACT_THRESHOLD_CHARS

from ._planned import context_compact_preview
from ._results import (
    ArtifactLine,
    ArtifactsResult,
    CompactionLine,
    CompactionResult,
    RetrievedLine,
    RetrievedResult,
    SummariesResult,
    SummaryLine,
)
from ._workspace import ContextWorkspace

__all__ = ["context_artifacts", "context_compaction", "context_retrieved", "context_summaries"]

_NO_MODEL: Final = "no model: pass --model provider:model --window N to see whether a plan would compact"


class _Texts:
    """Entry texts, extracted once per entry however many summaries share it."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, ...]] = {}

    def __call__(self, entry: PiEntry) -> tuple[str, ...]:
        texts = self._cache.get(entry.id)
        if texts is None:
            texts = self._cache[entry.id] = pi_entry_texts(entry)
        return texts


def _path_before(session: PiSession, entry: PiEntry) -> tuple[PiEntry, ...]:
    """The entries from the root up to (not including) ``entry``."""
    if entry.parent_id is None or session.entry(entry.parent_id) is None:
        return ()
    return session.branch(entry.parent_id)[0]


def _summary_sources(session: PiSession, summary: PiSummary) -> tuple[PiEntry, ...]:
    """What a summary was made from: the branch before it and, for a branch summary, the branch it left."""
    path = _path_before(session, summary.entry)
    from_id = summary.from_id
    if from_id is None or session.entry(from_id) is None:
        return path
    seen = {item.id for item in path}
    left = tuple(item for item in session.branch(from_id)[0] if item.id not in seen)
    return path + left


def _problem_labels(verdict: SummaryValidation) -> tuple[str, ...]:
    labels = []
    for problem in verdict.problems:
        label = problem.code if problem.section is None else f"{problem.code}:{problem.section}"
        labels.append(label if problem.count == 1 else f"{label}*{problem.count}")
    return tuple(labels)


def context_summaries(workspace: ContextWorkspace) -> SummariesResult:
    """Every compaction and branch summary in the session file, checked against ``summary-contract-v1``.

    Each is validated against the text of the entries that came before it on its branch (and, for a
    branch summary, of the branch it summarises). Only codes, section names and counts are reported.
    """
    session = workspace.session
    on_branch = frozenset(workspace.context.branch_entry_ids)
    texts = _Texts()
    lines: list[SummaryLine] = []
    for summary in pi_summaries(session):
        sources = _summary_sources(session, summary)
        verdict = validate_summary(summary.text, (part for source in sources for part in texts(source)))
        lines.append(
            SummaryLine(
                entry_id=summary.entry.id,
                kind=summary.kind,
                on_branch=summary.entry.id in on_branch,
                chars=len(summary.text),
                tokens_before=summary.tokens_before,
                source_entries=len(sources),
                valid=verdict.valid,
                problems=_problem_labels(verdict),
            )
        )
    valid = sum(line.valid for line in lines)
    return SummariesResult(
        contract_version=SUMMARY_CONTRACT_VERSION,
        summaries=len(lines),
        valid=valid,
        invalid=len(lines) - valid,
        entries=tuple(lines),
    )


def _compaction_line(
    session: PiSession, compaction: PiSummary, *, on_branch: bool, applied: bool
) -> CompactionLine:
    path = _path_before(session, compaction.entry)
    first_kept_id = compaction.first_kept_entry_id
    position = next((index for index, item in enumerate(path) if item.id == first_kept_id), None)
    return CompactionLine(
        entry_id=compaction.entry.id,
        on_branch=on_branch,
        applied=applied,
        first_kept_entry_id=first_kept_id,
        first_kept_found=position is not None,
        cut_entries=len(path) if position is None else position,
        kept_entries=0 if position is None else len(path) - position,
        tokens_before=compaction.tokens_before,
        summary_chars=len(compaction.text),
    )


def context_compaction(workspace: ContextWorkspace) -> CompactionResult:
    """The session's compaction entries and what each cut; with a model, whether a plan would compact now.

    ``applied_entry_id`` is the compaction the active branch's context starts from (the newest on it).
    The plan part is ``/context compact-preview`` (the plan's compaction) summed up; without a model it
    says so.
    """
    session = workspace.session
    context = workspace.context
    on_branch = frozenset(context.branch_entry_ids)
    lines = tuple(
        _compaction_line(
            session,
            summary,
            on_branch=summary.entry.id in on_branch,
            applied=summary.entry.id == context.compaction_entry_id,
        )
        for summary in pi_summaries(session)
        if summary.kind == "compaction"
    )
    model = workspace.model
    if model is None:
        return CompactionResult(
            applied_entry_id=context.compaction_entry_id,
            compactions=lines,
            model=None,
            plan=_NO_MODEL,
            would_compact=None,
            plan_tokens_before=None,
            plan_tokens_after=None,
            trimmed_messages=None,
            receipts=None,
            dropped_messages=None,
        )
    preview = context_compact_preview(workspace)
    dropped = preview.dropped_messages
    # a plan may leave out an incomplete tool call without compacting: that is not a compaction
    would = preview.compacts and (preview.trimmed_messages > 0 or bool(preview.receipts) or dropped > 0)
    return CompactionResult(
        applied_entry_id=context.compaction_entry_id,
        compactions=lines,
        model=f"{model.provider}:{model.id}",
        plan="would compact now" if would else "would not compact now: nothing to trim, receipt or drop",
        would_compact=would,
        plan_tokens_before=preview.tokens_before,
        plan_tokens_after=preview.tokens_after,
        trimmed_messages=preview.trimmed_messages,
        receipts=len(preview.receipts),
        dropped_messages=dropped,
    )


def context_retrieved(workspace: ContextWorkspace) -> RetrievedResult:
    """The plan's retrieved-history items: source entries, tokens, score and reason (needs a model)."""
    plan = workspace.plan()
    prefix = f"{workspace.session.session_id}:"
    items = tuple(
        RetrievedLine(
            item_id=item.message_id,
            source_entry_ids=tuple(source.removeprefix(prefix) for source in item.source_ids),
            tokens=item.tokens,
            score=item.score,
            reason=item.reason,
        )
        for item in plan.items
        if item.kind == "retrieved-history"
    )
    return RetrievedResult(
        store=workspace.store is not None,
        retrieval_hits=workspace.retrieval_hits,
        total_tokens=sum(item.tokens for item in items),
        items=items,
    )


def _artifact_entries(session: PiSession) -> Iterator[PiEntry]:
    """The entries the store may keep artifacts of: tool outputs (large ones are stored apart)."""
    return (entry for entry in session.entries if pi_is_tool_output(entry))


def context_artifacts(workspace: ContextWorkspace) -> ArtifactsResult:
    """The large tool outputs the derived store keeps for this session: entry, sha256 id and size."""
    store = workspace.store
    if store is None:
        raise CommandError("command-needs-store", "/context artifacts needs a derived store")
    lookup: Callable[[str, str], tuple[str, ...]] | None = getattr(store, "artifacts_for_entry", None)
    if lookup is None:
        raise CommandError("command-needs-store", "this derived store does not list artifacts by entry")
    workspace.ensure_indexed()
    session = workspace.session
    on_branch = frozenset(workspace.context.branch_entry_ids)
    sizes: dict[str, int] = {}
    lines: list[ArtifactLine] = []
    for entry in _artifact_entries(session):
        for artifact_id in lookup(session.session_id, entry.id):
            if artifact_id not in sizes:
                content = store.get_artifact(artifact_id)
                sizes[artifact_id] = 0 if content is None else len(content)
            lines.append(
                ArtifactLine(
                    entry_id=entry.id,
                    artifact_id=artifact_id,
                    size_bytes=sizes[artifact_id],
                    on_branch=entry.id in on_branch,
                )
            )
    storage = store.storage()
    return ArtifactsResult(
        threshold_chars=ARTIFACT_THRESHOLD_CHARS,
        total_bytes=sum(sizes.values()),
        artifacts=tuple(lines),
        store_artifacts=storage.artifacts,
        store_artifact_bytes=storage.artifact_bytes,
    )
