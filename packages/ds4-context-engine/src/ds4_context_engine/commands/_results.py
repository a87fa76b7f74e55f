"""Structured results of the /context commands. Metadata only: ids, counts, sizes, codes and reasons.

The one exception is ``restore``, whose whole purpose is to show the user original content; it is
bounded (``RESTORE_MAX_CHARS`` per message) and is never written to diagnostics or manifests.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ds4_context_engine.store import IndexReport, StorageReport, StoreHealth

__all__ = [
    "AdapterResult",
    "ArtifactLine",
    "ArtifactsResult",
    "CapabilityLine",
    "CommandResult",
    "CompactPreviewResult",
    "CompactionLine",
    "CompactionResult",
    "ConfigResult",
    "ExcludedResult",
    "ExclusionLine",
    "ExplainResult",
    "HealthResult",
    "IncludedResult",
    "IssueCount",
    "ItemLine",
    "ManifestResult",
    "MemoryLine",
    "MemoryResult",
    "MessageTokens",
    "ModelResult",
    "PinLine",
    "PinsResult",
    "PrivacyResult",
    "RebuildIndexResult",
    "RestoreResult",
    "RestoredMessage",
    "RetrievedLine",
    "RetrievedResult",
    "StatusResult",
    "StorageResult",
    "SummariesResult",
    "SummaryLine",
    "TokensResult",
]


class _Result(msgspec.Struct, frozen=True, kw_only=True):
    pass


class IssueCount(_Result, frozen=True):
    code: str
    count: int


class StatusResult(_Result, frozen=True):
    """``/context status``: the session at a glance."""

    session_id: str
    path: str
    cwd: str
    format_version: int
    leaf_id: str | None
    entries: int
    branch_entries: int
    context_messages: int
    estimated_tokens: int
    provider: str | None
    model_id: str | None
    thinking_level: str | None
    compaction_entry_id: str | None
    pins: int
    memory_items: int
    store_mode: str
    issues: tuple[IssueCount, ...]
    command: str = "status"


class CapabilityLine(_Result, frozen=True):
    id: str
    supported: bool
    version: str | None
    reason: str | None
    requested: bool
    enabled: bool

    @property
    def text_line(self) -> str:
        """The one-line form of the text view: ``compaction: supported (pi-session-compact-v1); enabled``."""
        support = f"supported ({self.version})" if self.supported else f"unavailable ({self.reason or '-'})"
        state = "enabled" if self.enabled else "disabled safely" if self.requested else "not requested"
        return f"{self.id}: {support}; {state}"


class AdapterResult(_Result, frozen=True):
    runtime_id: str
    contract_version: str
    enabled: int
    disabled: int
    capabilities: tuple[CapabilityLine, ...]
    diagnostics: tuple[str, ...]
    command: str = "adapter"


class MessageTokens(_Result, frozen=True):
    message_id: str
    role: str
    tokens: int


class TokensResult(_Result, frozen=True):
    estimator: str
    messages: int
    total_tokens: int
    by_role: dict[str, int]
    largest: tuple[MessageTokens, ...]
    context_window: int | None
    planned_tokens: int | None
    command: str = "tokens"


class ItemLine(_Result, frozen=True):
    message_id: str
    kind: str
    reason: str
    tokens: int
    priority: int


class ExclusionLine(_Result, frozen=True):
    reason: str
    count: int
    tokens: int
    first_message_id: str | None
    last_message_id: str | None


class ManifestResult(_Result, frozen=True):
    plan_id: str
    contract_version: str
    model: str
    context_window: int
    hard_limit: int
    history_messages: int
    included_messages: int
    native_tokens: int
    planned_tokens: int
    saved_tokens: int
    shared_prefix_messages: int
    receipts: int
    fallback: str | None
    manifest: dict[str, Any]
    # the system prompt and tools every request carries, budgeted beside the history, and where the
    # figure came from: "explicit" (set by the host), "usage" (measured from the session) or "none"
    fixed_tokens: int = 0
    fixed_tokens_source: str = "none"
    command: str = "manifest"


class ExplainResult(_Result, frozen=True):
    message_id: str
    in_plan: bool
    kind: str | None
    reason: str
    tokens: int | None
    group_id: str | None
    receipt_id: str | None
    command: str = "explain"


class IncludedResult(_Result, frozen=True):
    """``total_tokens`` is what the items weigh; with ``fixed_tokens`` (the system prompt and tools the
    request also carries) it makes ``planned_tokens``, the manifest's and ``plan``'s planned figure."""

    total_tokens: int
    fixed_tokens: int
    planned_tokens: int
    items: tuple[ItemLine, ...]
    command: str = "included"


class ExcludedResult(_Result, frozen=True):
    total_tokens: int
    exclusions: tuple[ExclusionLine, ...]
    command: str = "excluded"


class PinLine(_Result, frozen=True):
    entry_id: str
    label: str | None
    in_context: bool


class PinsResult(_Result, frozen=True):
    """``pins``, ``pin`` and ``unpin`` all answer with the pins after the command."""

    changed_entry_id: str | None
    event_entry_id: str | None
    pins: tuple[PinLine, ...]
    command: str = "pins"


class MemoryLine(_Result, frozen=True):
    item_id: str
    chars: int
    preview: str


class MemoryResult(_Result, frozen=True):
    event_entry_id: str | None
    items: tuple[MemoryLine, ...]
    command: str = "memory"


class PrivacyResult(_Result, frozen=True):
    provider: str
    destination: str
    enabled: bool
    changed: bool
    blocked_blocks: int
    secret_redactions: int
    policy_version: str
    command: str = "privacy"


class ModelResult(_Result, frozen=True):
    provider: str | None
    model_id: str | None
    thinking_level: str | None
    context_window: int | None
    max_tokens: int | None
    source: str
    command: str = "model"


class CompactPreviewResult(_Result, frozen=True):
    """``dry_run`` is always true: a preview never rewrites the session; ``compacts`` says whether the plan
    compacted at all. Every count is the one ``plan`` shows for the same plan, and they add up:
    ``history_messages == kept_messages + receipted_messages + dropped_messages``,
    ``tokens_before - tokens_after == saved_tokens`` (both include ``fixed_tokens``, the system prompt and
    tools; ``tokens_after`` also ``supplement_tokens``)
    and ``trimmed_messages == trimmed_in_plan + trimmed_in_receipts``."""

    dry_run: bool
    compacts: bool
    history_messages: int
    kept_messages: int
    receipted_messages: int
    dropped_messages: int
    tokens_before: int
    tokens_after: int
    fixed_tokens: int
    supplement_tokens: int
    saved_tokens: int
    trimmed_messages: int
    trimmed_in_plan: int
    trimmed_in_receipts: int
    receipts: tuple[str, ...]
    gate_exclusions: dict[str, int]
    receipt_texts: tuple[str, ...]
    command: str = "compact-preview"


class RestoredMessage(_Result, frozen=True):
    message_id: str
    role: str
    text: str
    truncated: bool


class RestoreResult(_Result, frozen=True):
    """``restored_id`` is the full id asked for; ``kind`` is its plan item kind (``receipt``,
    ``trimmed-tool-result``, ``summary``, ...) or ``not-in-plan``; ``receipt_id`` is set for receipts
    only. ``original_tokens`` is what the originals weigh, ``planned_tokens`` what stands for them in the
    plan (0 when nothing does)."""

    restored_id: str
    kind: str
    receipt_id: str | None
    original_tokens: int
    planned_tokens: int
    messages: tuple[RestoredMessage, ...]
    command: str = "restore"


class StorageResult(_Result, frozen=True):
    storage: StorageReport
    command: str = "storage"


class HealthResult(_Result, frozen=True):
    ok: bool
    session_issues: tuple[IssueCount, ...]
    history_issues: tuple[IssueCount, ...]
    store: StoreHealth | None
    command: str = "health"


class RebuildIndexResult(_Result, frozen=True):
    report: IndexReport
    command: str = "rebuild-index"


class ConfigResult(_Result, frozen=True):
    schema: str
    warnings: tuple[str, ...]
    config: dict[str, Any]
    command: str = "config"


class SummaryLine(_Result, frozen=True):
    """One compaction or branch summary in the session file, judged by ``summary-contract-v1``.

    ``problems`` are ``code`` or ``code:Section`` with ``*N`` when it occurs N > 1 times: never text.
    """

    entry_id: str
    kind: str
    on_branch: bool
    chars: int
    tokens_before: int | None
    source_entries: int
    valid: bool
    problems: tuple[str, ...]

    @property
    def text_line(self) -> str:
        """``<entry> <kind> <chars> chars[, <n> tokens before]: valid | invalid (<problems>)``."""
        before = "" if self.tokens_before is None else f", {self.tokens_before} tokens before"
        branch = "" if self.on_branch else " (off the active branch)"
        totals: dict[str, int] = {}
        for label in self.problems:  # 'code', 'code:Section' or either with '*N'
            head, _, count = label.partition("*")
            code = head.partition(":")[0]
            totals[code] = totals.get(code, 0) + (int(count) if count.isdigit() else 1)
        shown = ", ".join(code if count == 1 else f"{code} x{count}" for code, count in totals.items())
        verdict = "valid" if self.valid else f"invalid ({shown})"
        return f"{self.entry_id} {self.kind}{branch}: {self.chars} chars{before}; {verdict}"


class SummariesResult(_Result, frozen=True):
    """``/context summaries``: the session's compaction and branch summaries and their contract check."""

    contract_version: str
    summaries: int
    valid: int
    invalid: int
    entries: tuple[SummaryLine, ...]
    command: str = "summaries"


class CompactionLine(_Result, frozen=True):
    """One compaction entry: where it cut (``first_kept_entry_id``) and how much it left behind."""

    entry_id: str
    on_branch: bool
    applied: bool
    first_kept_entry_id: str | None
    first_kept_found: bool
    cut_entries: int
    kept_entries: int
    tokens_before: int | None
    summary_chars: int


class CompactionResult(_Result, frozen=True):
    """``/context compaction``: the session's compactions, and whether a plan would compact now."""

    applied_entry_id: str | None
    compactions: tuple[CompactionLine, ...]
    model: str | None
    plan: str
    would_compact: bool | None
    plan_tokens_before: int | None
    plan_tokens_after: int | None
    trimmed_messages: int | None
    receipts: int | None
    dropped_messages: int | None
    command: str = "compaction"


class RetrievedLine(_Result, frozen=True):
    """One retrieved-history item of the plan: which entry it came from, its size and why."""

    item_id: str
    source_entry_ids: tuple[str, ...]
    tokens: int
    score: float | None
    reason: str


class RetrievedResult(_Result, frozen=True):
    """``/context retrieved``: the retrieved-history supplements of the current plan (metadata only)."""

    store: bool
    retrieval_hits: int
    total_tokens: int
    items: tuple[RetrievedLine, ...]
    command: str = "retrieved"


class ArtifactLine(_Result, frozen=True):
    """One large tool output the store keeps for this session: entry, sha256 id and size in bytes."""

    entry_id: str
    artifact_id: str
    size_bytes: int
    on_branch: bool


class ArtifactsResult(_Result, frozen=True):
    """``/context artifacts``: this session's content-addressed tool outputs in the derived store."""

    threshold_chars: int
    total_bytes: int
    artifacts: tuple[ArtifactLine, ...]
    store_artifacts: int
    store_artifact_bytes: int
    command: str = "artifacts"


CommandResult = (
    AdapterResult
    | ArtifactsResult
    | CompactionResult
    | CompactPreviewResult
    | ConfigResult
    | ExcludedResult
    | ExplainResult
    | HealthResult
    | IncludedResult
    | ManifestResult
    | MemoryResult
    | ModelResult
    | PinsResult
    | PrivacyResult
    | RebuildIndexResult
    | RestoreResult
    | RetrievedResult
    | StatusResult
    | SummariesResult
    | StorageResult
    | TokensResult
)
