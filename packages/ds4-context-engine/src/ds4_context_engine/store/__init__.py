"""The derived store: disposable state computed from Pi session files (SQLite by default, or one
PostgreSQL database shared by a fleet of hosts).

Full-text index, pins and memory items (replayed from the session's own ``custom`` entries), plan
manifests, content-addressed artifacts for large tool outputs and token calibration samples. Deleting the
database is always safe: it is rebuilt from the session files.
"""

from typing import TYPE_CHECKING

from ds4_context_engine._lazy import lazy_exports

from ._events import (
    MEMORY_CUSTOM_TYPE,
    PIN_CUSTOM_TYPE,
    UNPIN_CUSTOM_TYPE,
    append_memory_event,
    append_pin_event,
    append_unpin_event,
    replay_session_events,
)
from ._limits import (
    ARTIFACT_THRESHOLD_CHARS,
    CALIBRATION_RETENTION,
    CALIBRATION_SOURCE_RETENTION,
    MANIFEST_RETENTION,
    SUMMARY_RETENTION,
)
from ._pg_location import STORE_PASSWORD_ENV, is_store_url
from ._pg_schema import PG_MIGRATIONS as _PG_MIGRATIONS
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

if TYPE_CHECKING:
    from ._open import open_store
    from ._postgres import DEFAULT_PG_POOL_SIZE, PostgresDerivedStore, open_postgres_store
    from ._sqlite import DEFAULT_BUSY_TIMEOUT_SECONDS, SqliteDerivedStore, open_derived_store

SQLITE_SCHEMA_VERSION = _MIGRATIONS[-1].version
#: sha256("<version>\n<name>\n<sql>") of every migration, in order; pinned by the compatibility golden.
SQLITE_MIGRATION_CHECKSUMS = tuple(migration.checksum for migration in _MIGRATIONS)
SQLITE_MIGRATION_NAMES = tuple(migration.name for migration in _MIGRATIONS)
PG_SCHEMA_VERSION = _PG_MIGRATIONS[-1].version
#: the PostgreSQL migrations: the same numbers and names as SQLite's, their own SQL and checksums
PG_MIGRATION_CHECKSUMS = tuple(migration.checksum for migration in _PG_MIGRATIONS)
PG_MIGRATION_NAMES = tuple(migration.name for migration in _PG_MIGRATIONS)
STORE_EVENT_CODES = (
    "derived-store-corrupt-rebuilt",
    "derived-store-locked",
    "derived-store-rebuilt",
    "derived-store-reconnected",
    "derived-store-reopened",
)

__all__ = [
    "ARTIFACT_THRESHOLD_CHARS",
    "CALIBRATION_RETENTION",
    "CALIBRATION_SOURCE_RETENTION",
    "DEFAULT_BUSY_TIMEOUT_SECONDS",
    "DEFAULT_PG_POOL_SIZE",
    "MANIFEST_RETENTION",
    "MEMORY_CUSTOM_TYPE",
    "PG_MIGRATION_CHECKSUMS",
    "PG_MIGRATION_NAMES",
    "PG_SCHEMA_VERSION",
    "PIN_CUSTOM_TYPE",
    "SQLITE_MIGRATION_CHECKSUMS",
    "SQLITE_MIGRATION_NAMES",
    "SQLITE_SCHEMA_VERSION",
    "STORE_EVENT_CODES",
    "STORE_PASSWORD_ENV",
    "SUMMARY_RETENTION",
    "UNPIN_CUSTOM_TYPE",
    "CalibrationSample",
    "DerivedStore",
    "IndexReport",
    "MemoryItem",
    "PinRecord",
    "PostgresDerivedStore",
    "SearchHit",
    "SqliteDerivedStore",
    "StorageReport",
    "StoreHealth",
    "StoredManifest",
    "StoredSummary",
    "append_memory_event",
    "append_pin_event",
    "append_unpin_event",
    "is_store_url",
    "open_derived_store",
    "open_postgres_store",
    "open_store",
    "replay_session_events",
]

# The backends are imported on first use: a command planning with ``--no-store`` (or reading only the
# records and limits above) does not pay for sqlite3, the PostgreSQL store and their full-text helpers.
_LAZY_EXPORTS = {
    "open_store": "_open",
    "DEFAULT_PG_POOL_SIZE": "_postgres",
    "PostgresDerivedStore": "_postgres",
    "open_postgres_store": "_postgres",
    "DEFAULT_BUSY_TIMEOUT_SECONDS": "_sqlite",
    "SqliteDerivedStore": "_sqlite",
    "open_derived_store": "_sqlite",
}
__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS, globals())
