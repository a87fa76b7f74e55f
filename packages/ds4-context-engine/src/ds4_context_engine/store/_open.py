"""One entry point for every backend: a ``postgresql://`` URL opens PostgreSQL, anything else SQLite."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ._pg_location import is_store_url
from ._postgres import DEFAULT_PG_POOL_SIZE, open_postgres_store
from ._protocol import DerivedStore
from ._sqlite import DEFAULT_BUSY_TIMEOUT_SECONDS, open_derived_store

__all__ = ["open_store"]


def open_store(
    location: str | os.PathLike[str] | None,
    *,
    trusted_roots: Iterable[str | os.PathLike[str]] | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
    pool_size: int = DEFAULT_PG_POOL_SIZE,
    environ: Mapping[str, str] | None = None,
) -> DerivedStore:
    """The store at ``location``: a ``postgresql://``/``postgres://`` URL (shared, see
    :func:`open_postgres_store`), a SQLite file path (see :func:`open_derived_store`) or ``None``
    (in memory). ``trusted_roots`` and ``busy_timeout`` apply to SQLite, ``pool_size`` and
    ``environ`` (where ``DS4_CONTEXT_STORE_PASSWORD`` is read) to PostgreSQL.
    """
    if isinstance(location, str) and is_store_url(location):
        return open_postgres_store(location, pool_size=pool_size, environ=environ)
    return open_derived_store(location, trusted_roots=trusted_roots, busy_timeout=busy_timeout)
