"""Pi session files: read v1-v3 (migrated in memory), follow branches, build the model context, append.

The session file is the canonical history. Nothing here rewrites it: reads never write, and appends add
whole lines at the end.
"""

from typing import TYPE_CHECKING

from ds4_context_engine._lazy import lazy_exports

from ._context import (
    BRANCH_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_PREFIX,
    PiContext,
    build_pi_context,
    pi_message_id,
)
from ._convert import canonical_to_pi_message
from ._custom import PiCustomEntry, append_pi_custom_entry, pi_custom_entries, pi_custom_entry
from ._index import (
    MEMORY_CUSTOM_TYPE,
    PIN_CUSTOM_TYPE,
    UNPIN_CUSTOM_TYPE,
    PiEntryShape,
    PiIndexBatch,
    PiIndexCursor,
    PiIndexEvent,
    PiIndexRecord,
    PiSessionIndexer,
    pi_index_event,
    pi_index_record,
    pi_is_tool_output,
)
from ._reader import (
    DEFAULT_MAX_PI_SESSION_BYTES,
    DEFAULT_MAX_PI_SESSION_ENTRIES,
    DEFAULT_MIN_PI_LINE_BYTES,
    KNOWN_PI_ENTRY_TYPES,
    MAX_PI_ISSUES_PER_CODE,
    MAX_PI_JSON_DEPTH,
    PI_ISSUE_CODES,
    PI_SESSION_SMALL_LINES,
    PI_SESSION_VERSION,
    PiEntry,
    PiSession,
    PiSessionHeader,
    PiSessionIssue,
    extend_pi_session,
    read_pi_session,
    read_pi_session_bytes,
)
from ._summaries import PiSummary, PiSummaryKind, pi_entry_texts, pi_summaries, pi_summary
from ._usage import PiReportedUsage, pi_reported_usage, pi_reported_usages
from ._view import PI_VIEW_3X_MIN_LINE_BYTES, PiRevisionCache, PiSessionView, pi_session_revision
from ._writer import (
    LEAF,
    RESERVED_ENTRY_FIELDS,
    append_pi_entries,
    append_pi_entry,
    create_pi_session,
    iso_timestamp,
)

if TYPE_CHECKING:
    from ._adapter import (
        PI_ADAPTER_NAME,
        PI_COMPACTION_CAPABILITY_VERSION,
        PI_CONTINUATION_CAPABILITY_VERSION,
        PI_EMBEDDING_CAPABILITY_VERSION,
        PI_LOCAL_KV_UNSUPPORTED_REASON,
        PI_RUNTIME_ID,
        PiSessionAdapter,
    )
    from ._conformance import PI_CONFORMANCE_FACTORY_NAME, pi_session_conformance_factory

__all__ = [
    "BRANCH_SUMMARY_PREFIX",
    "COMPACTION_SUMMARY_PREFIX",
    "DEFAULT_MAX_PI_SESSION_BYTES",
    "DEFAULT_MAX_PI_SESSION_ENTRIES",
    "DEFAULT_MIN_PI_LINE_BYTES",
    "KNOWN_PI_ENTRY_TYPES",
    "LEAF",
    "MAX_PI_ISSUES_PER_CODE",
    "MAX_PI_JSON_DEPTH",
    "MEMORY_CUSTOM_TYPE",
    "PIN_CUSTOM_TYPE",
    "PI_ADAPTER_NAME",
    "PI_COMPACTION_CAPABILITY_VERSION",
    "PI_CONFORMANCE_FACTORY_NAME",
    "PI_CONTINUATION_CAPABILITY_VERSION",
    "PI_EMBEDDING_CAPABILITY_VERSION",
    "PI_ISSUE_CODES",
    "PI_LOCAL_KV_UNSUPPORTED_REASON",
    "PI_RUNTIME_ID",
    "PI_SESSION_SMALL_LINES",
    "PI_SESSION_VERSION",
    "PI_VIEW_3X_MIN_LINE_BYTES",
    "RESERVED_ENTRY_FIELDS",
    "UNPIN_CUSTOM_TYPE",
    "PiContext",
    "PiCustomEntry",
    "PiEntry",
    "PiEntryShape",
    "PiIndexBatch",
    "PiIndexCursor",
    "PiIndexEvent",
    "PiIndexRecord",
    "PiReportedUsage",
    "PiRevisionCache",
    "PiSession",
    "PiSessionAdapter",
    "PiSessionHeader",
    "PiSessionIndexer",
    "PiSessionIssue",
    "PiSessionView",
    "PiSummary",
    "PiSummaryKind",
    "append_pi_custom_entry",
    "append_pi_entries",
    "append_pi_entry",
    "build_pi_context",
    "canonical_to_pi_message",
    "create_pi_session",
    "extend_pi_session",
    "iso_timestamp",
    "pi_custom_entries",
    "pi_custom_entry",
    "pi_entry_texts",
    "pi_index_event",
    "pi_index_record",
    "pi_is_tool_output",
    "pi_message_id",
    "pi_reported_usage",
    "pi_reported_usages",
    "pi_session_conformance_factory",
    "pi_session_revision",
    "pi_summaries",
    "pi_summary",
    "read_pi_session",
    "read_pi_session_bytes",
]

# The runtime adapter and its conformance factory are imported on first use: reading and planning a
# session (``ds4-context plan``) needs neither core's adapter contract nor the kit's temporary files.
_LAZY_EXPORTS = {
    "PI_ADAPTER_NAME": "_adapter",
    "PI_COMPACTION_CAPABILITY_VERSION": "_adapter",
    "PI_CONTINUATION_CAPABILITY_VERSION": "_adapter",
    "PI_EMBEDDING_CAPABILITY_VERSION": "_adapter",
    "PI_LOCAL_KV_UNSUPPORTED_REASON": "_adapter",
    "PI_RUNTIME_ID": "_adapter",
    "PiSessionAdapter": "_adapter",
    "PI_CONFORMANCE_FACTORY_NAME": "_conformance",
    "pi_session_conformance_factory": "_conformance",
}
__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS, globals())
