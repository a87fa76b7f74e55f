"""The derived store: disposable state computed from Pi session files (SQLite by default).

Full-text index, pins and memory items (replayed from the session's own ``custom`` entries), plan
manifests, content-addressed artifacts for large tool outputs and token calibration samples. Deleting the
database is always safe: it is rebuilt from the session files.
"""

from ._events import (
    MEMORY_CUSTOM_TYPE,
    PIN_CUSTOM_TYPE,
    UNPIN_CUSTOM_TYPE,
    append_memory_event,
    append_pin_event,
    append_unpin_event,
    replay_session_events,
)
from ._protocol import DerivedStore
from ._records import (
    CalibrationSample,
    IndexReport,
    MemoryItem,
    PinRecord,
    SearchHit,
    StorageReport,
    StoredManifest,
    StoredSummary,
    StoreHealth,
)
from ._schema import MIGRATIONS as _MIGRATIONS
from ._sqlite import (
    ARTIFACT_THRESHOLD_CHARS,
    CALIBRATION_RETENTION,
    CALIBRATION_SOURCE_RETENTION,
    DEFAULT_BUSY_TIMEOUT_SECONDS,
    MANIFEST_RETENTION,
    SUMMARY_RETENTION,
    SqliteDerivedStore,
    open_derived_store,
)

SQLITE_SCHEMA_VERSION = _MIGRATIONS[-1].version
#: sha256("<version>\n<name>\n<sql>") of every migration, in order; pinned by the compatibility golden.
SQLITE_MIGRATION_CHECKSUMS = tuple(migration.checksum for migration in _MIGRATIONS)
SQLITE_MIGRATION_NAMES = tuple(migration.name for migration in _MIGRATIONS)
STORE_EVENT_CODES = (
    "derived-store-corrupt-rebuilt",
    "derived-store-locked",
    "derived-store-rebuilt",
    "derived-store-reopened",
)

__all__ = [
    "ARTIFACT_THRESHOLD_CHARS",
    "CALIBRATION_RETENTION",
    "CALIBRATION_SOURCE_RETENTION",
    "DEFAULT_BUSY_TIMEOUT_SECONDS",
    "MANIFEST_RETENTION",
    "MEMORY_CUSTOM_TYPE",
    "PIN_CUSTOM_TYPE",
    "SQLITE_MIGRATION_CHECKSUMS",
    "SQLITE_MIGRATION_NAMES",
    "SQLITE_SCHEMA_VERSION",
    "STORE_EVENT_CODES",
    "SUMMARY_RETENTION",
    "UNPIN_CUSTOM_TYPE",
    "CalibrationSample",
    "DerivedStore",
    "IndexReport",
    "MemoryItem",
    "PinRecord",
    "SearchHit",
    "SqliteDerivedStore",
    "StorageReport",
    "StoreHealth",
    "StoredManifest",
    "StoredSummary",
    "append_memory_event",
    "append_pin_event",
    "append_unpin_event",
    "open_derived_store",
    "replay_session_events",
]
