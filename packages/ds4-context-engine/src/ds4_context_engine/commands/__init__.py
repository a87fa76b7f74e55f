"""The ``/context`` commands: plain functions over a :class:`ContextWorkspace` returning msgspec results.

Render a result with :func:`render_text` (a host's slash command), :func:`render_rich` (the CLI) or
:func:`render_json`; or run a typed command line with :func:`run_context_command_text`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ds4_context_engine._lazy import lazy_exports

from ._basic import (
    MEMORY_PREVIEW_CHARS,
    context_config,
    context_health,
    context_memory,
    context_model,
    context_pin,
    context_pins,
    context_rebuild_index,
    context_status,
    context_storage,
    context_tokens,
    context_unpin,
)
from ._demo import DEMO_MODEL_ID, DEMO_PROVIDER, DEMO_SESSION_ID, write_demo_session
from ._digest import (
    CUT_SUPPLEMENT_PASSES,
    TASK_DIGEST_ID,
    TASK_DIGEST_MAX_CHARS,
    SettledPlan,
    plan_with_cut_supplements,
    settle_cut_supplements,
    task_digest,
)
from ._llm_summary import SUMMARY_TIMEOUT_S, summarize_cut
from ._planned import (
    RESTORE_MAX_CHARS,
    context_compact_preview,
    context_excluded,
    context_explain,
    context_included,
    context_manifest,
    context_restore,
)
from ._render import render_json, render_rich, render_text
from ._results import (
    AdapterResult,
    ArtifactLine,
    ArtifactsResult,
    CapabilityLine,
    CommandResult,
    CompactionLine,
    CompactionResult,
    CompactPreviewResult,
    ConfigResult,
    ExcludedResult,
    ExclusionLine,
    ExplainResult,
    HealthResult,
    IncludedResult,
    IssueCount,
    ItemLine,
    ManifestResult,
    MemoryLine,
    MemoryResult,
    MessageTokens,
    ModelResult,
    PinLine,
    PinsResult,
    PrivacyResult,
    RebuildIndexResult,
    RestoredMessage,
    RestoreResult,
    RetrievedLine,
    RetrievedResult,
    StatusResult,
    StorageResult,
    SummariesResult,
    SummaryLine,
    TokensResult,
)
from ._retrieval import (
    RETRIEVAL_HITS_DEFAULT,
    RETRIEVED_TEXT_MAX_CHARS,
    retrieval_candidates,
    retrieval_query_terms,
    retrieve_history,
    retrieved_supplements,
)
from ._workspace import DEFAULT_STORE_ENV, ContextWorkspace, default_store_location, default_store_path

if TYPE_CHECKING:
    from ._dispatch import CONTEXT_COMMANDS, run_context_command, run_context_command_text
    from ._restore_tool import (
        RESTORE_TOOL_CODES,
        RESTORE_TOOL_MAX_CHARS,
        RESTORE_TOOL_NAME,
        RestoreToolOutput,
        handle_restore_tool_call,
        offer_restore_tool,
        restore_tool_definition,
    )
    from ._runtime import context_adapter, context_privacy
    from ._views import context_artifacts, context_compaction, context_retrieved, context_summaries

__all__ = [
    "CONTEXT_COMMANDS",
    "CUT_SUPPLEMENT_PASSES",
    "DEFAULT_STORE_ENV",
    "DEMO_MODEL_ID",
    "DEMO_PROVIDER",
    "DEMO_SESSION_ID",
    "MEMORY_PREVIEW_CHARS",
    "RESTORE_MAX_CHARS",
    "RESTORE_TOOL_CODES",
    "RESTORE_TOOL_MAX_CHARS",
    "RESTORE_TOOL_NAME",
    "RETRIEVAL_HITS_DEFAULT",
    "RETRIEVED_TEXT_MAX_CHARS",
    "SUMMARY_TIMEOUT_S",
    "TASK_DIGEST_ID",
    "TASK_DIGEST_MAX_CHARS",
    "AdapterResult",
    "ArtifactLine",
    "ArtifactsResult",
    "CapabilityLine",
    "CommandResult",
    "CompactPreviewResult",
    "CompactionLine",
    "CompactionResult",
    "ConfigResult",
    "ContextWorkspace",
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
    "RestoreToolOutput",
    "RestoredMessage",
    "RetrievedLine",
    "RetrievedResult",
    "SettledPlan",
    "StatusResult",
    "StorageResult",
    "SummariesResult",
    "SummaryLine",
    "TokensResult",
    "context_adapter",
    "context_artifacts",
    "context_compact_preview",
    "context_compaction",
    "context_config",
    "context_excluded",
    "context_explain",
    "context_health",
    "context_included",
    "context_manifest",
    "context_memory",
    "context_model",
    "context_pin",
    "context_pins",
    "context_privacy",
    "context_rebuild_index",
    "context_restore",
    "context_retrieved",
    "context_status",
    "context_storage",
    "context_summaries",
    "context_tokens",
    "context_unpin",
    "default_store_location",
    "default_store_path",
    "handle_restore_tool_call",
    "offer_restore_tool",
    "plan_with_cut_supplements",
    "render_json",
    "render_rich",
    "render_text",
    "restore_tool_definition",
    "retrieval_candidates",
    "retrieval_query_terms",
    "retrieve_history",
    "retrieved_supplements",
    "run_context_command",
    "run_context_command_text",
    "settle_cut_supplements",
    "summarize_cut",
    "task_digest",
    "write_demo_session",
]

# Imported on first use: the adapter and privacy views load core's adapter contract, the dispatcher loads
# every command, and a plan from the CLI needs neither.
_LAZY_EXPORTS = {
    "CONTEXT_COMMANDS": "_dispatch",
    "run_context_command": "_dispatch",
    "run_context_command_text": "_dispatch",
    "context_adapter": "_runtime",
    "context_privacy": "_runtime",
    "context_artifacts": "_views",
    "context_compaction": "_views",
    "context_retrieved": "_views",
    "context_summaries": "_views",
    # The restore tool's spec is core's adapter ToolDefinition: loaded when a host offers the tool.
    **dict.fromkeys(
        (
            "RESTORE_TOOL_CODES",
            "RESTORE_TOOL_MAX_CHARS",
            "RESTORE_TOOL_NAME",
            "RestoreToolOutput",
            "handle_restore_tool_call",
            "offer_restore_tool",
            "restore_tool_definition",
        ),
        "_restore_tool",
    ),
}

__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS, globals())
