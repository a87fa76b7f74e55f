"""ds4-context-reference-adapter: an append-only JSONL runtime implementing runtime-adapter-v1.

The ``ds4-runtime-session-v1`` history file (create, append, bounded read) and the errors it raises.
"""

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
)
from ._version import __version__

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_RUNTIME_ID",
    "ERROR_CODES",
    "ERROR_REASONS",
    "REFERENCE_HISTORY_FORMAT",
    "AppendedRecord",
    "ReferenceConfigError",
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
    "ReferenceMessageRejectedError",
    "__version__",
    "append_reference_history_message",
    "create_reference_history",
    "read_reference_history",
]
