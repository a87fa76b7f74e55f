"""Pi session files: read v1-v3 (migrated in memory), follow branches, build the model context, append.

The session file is the canonical history. Nothing here rewrites it: reads never write, and appends add
whole lines at the end.
"""

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
from ._context import (
    BRANCH_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_PREFIX,
    PiContext,
    build_pi_context,
    pi_message_id,
)
from ._convert import canonical_to_pi_message
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
)
from ._reader import (
    DEFAULT_MAX_PI_SESSION_BYTES,
    DEFAULT_MAX_PI_SESSION_ENTRIES,
    KNOWN_PI_ENTRY_TYPES,
    MAX_PI_ISSUES_PER_CODE,
    MAX_PI_JSON_DEPTH,
    PI_ISSUE_CODES,
    PI_SESSION_VERSION,
    PiEntry,
    PiSession,
    PiSessionHeader,
    PiSessionIssue,
    extend_pi_session,
    read_pi_session,
    read_pi_session_bytes,
)
from ._view import PiRevisionCache, PiSessionView, pi_session_revision
from ._writer import (
    LEAF,
    RESERVED_ENTRY_FIELDS,
    append_pi_entries,
    append_pi_entry,
    create_pi_session,
    iso_timestamp,
)

__all__ = [
    "BRANCH_SUMMARY_PREFIX",
    "COMPACTION_SUMMARY_PREFIX",
    "DEFAULT_MAX_PI_SESSION_BYTES",
    "DEFAULT_MAX_PI_SESSION_ENTRIES",
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
    "PI_SESSION_VERSION",
    "RESERVED_ENTRY_FIELDS",
    "UNPIN_CUSTOM_TYPE",
    "PiContext",
    "PiEntry",
    "PiEntryShape",
    "PiIndexBatch",
    "PiIndexCursor",
    "PiIndexEvent",
    "PiIndexRecord",
    "PiRevisionCache",
    "PiSession",
    "PiSessionAdapter",
    "PiSessionHeader",
    "PiSessionIndexer",
    "PiSessionIssue",
    "PiSessionView",
    "append_pi_entries",
    "append_pi_entry",
    "build_pi_context",
    "canonical_to_pi_message",
    "create_pi_session",
    "extend_pi_session",
    "iso_timestamp",
    "pi_index_event",
    "pi_index_record",
    "pi_message_id",
    "pi_session_conformance_factory",
    "pi_session_revision",
    "read_pi_session",
    "read_pi_session_bytes",
]
