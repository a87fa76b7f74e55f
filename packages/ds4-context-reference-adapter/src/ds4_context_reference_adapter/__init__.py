"""ds4-context-reference-adapter: an append-only JSONL runtime implementing runtime-adapter-v1.

``ReferenceRuntimeAdapter`` projects a ``ds4-runtime-session-v1`` history file (created, appended and
read by the functions below) and sends completions through a host callback behind privacy enforcement.
"""

from ._adapter import (
    ADAPTER_NAME,
    COMPACTION_UNSUPPORTED_REASON,
    CONTINUATION_UNSUPPORTED_REASON,
    EMBEDDING_PORT_VERSION,
    EMBEDDINGS_UNAVAILABLE_REASON,
    LOCAL_KV_UNAVAILABLE_REASON,
    EmbeddingPort,
    ReferenceCompletionTransport,
    ReferenceLocalKvRequest,
    ReferenceRuntimeAdapter,
)
from ._conformance import ReferenceConformanceFactory, conformance_factory
from ._exceptions import (
    ERROR_CODES,
    ERROR_REASONS,
    ReferenceConfigError,
    ReferenceHistoryError,
    ReferenceHistoryExistsError,
    ReferenceHistoryIdentityError,
    ReferenceHistoryInvalidError,
    ReferenceHistoryLimitError,
    ReferenceHistoryReadError,
    ReferenceHistoryWriteError,
    ReferenceMessageRejectedError,
)
from ._jsonl import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_MESSAGES,
    DEFAULT_RUNTIME_ID,
    REFERENCE_HISTORY_FORMAT,
    AppendedRecord,
    ReferenceHistory,
    ReferenceHistoryHeader,
    ReferenceHistoryLimits,
    append_reference_history_message,
    create_reference_history,
    read_reference_history,
    read_reference_history_header,
)
from ._version import __version__

__all__ = [
    "ADAPTER_NAME",
    "COMPACTION_UNSUPPORTED_REASON",
    "CONTINUATION_UNSUPPORTED_REASON",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_RUNTIME_ID",
    "EMBEDDINGS_UNAVAILABLE_REASON",
    "EMBEDDING_PORT_VERSION",
    "ERROR_CODES",
    "ERROR_REASONS",
    "LOCAL_KV_UNAVAILABLE_REASON",
    "REFERENCE_HISTORY_FORMAT",
    "AppendedRecord",
    "EmbeddingPort",
    "ReferenceCompletionTransport",
    "ReferenceConfigError",
    "ReferenceConformanceFactory",
    "ReferenceHistory",
    "ReferenceHistoryError",
    "ReferenceHistoryExistsError",
    "ReferenceHistoryHeader",
    "ReferenceHistoryIdentityError",
    "ReferenceHistoryInvalidError",
    "ReferenceHistoryLimitError",
    "ReferenceHistoryLimits",
    "ReferenceHistoryReadError",
    "ReferenceHistoryWriteError",
    "ReferenceLocalKvRequest",
    "ReferenceMessageRejectedError",
    "ReferenceRuntimeAdapter",
    "__version__",
    "append_reference_history_message",
    "conformance_factory",
    "create_reference_history",
    "read_reference_history",
    "read_reference_history_header",
]
