"""``search(..., excerpts=False)`` and SQLite's rank-then-excerpt query, on a long generated session.

SQLite's search used to build FTS5's ``snippet()`` for every matching entry before ranking and cutting
to the limit; it now ranks and cuts first, then builds excerpts for the kept entries only. These tests
hold it to the old single statement (ids, order, ranks and excerpts), and hold ``excerpts=False`` to the
same ids, order and ranks with empty excerpts, on both backends.
"""

from __future__ import annotations

import json
import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from ds4_context_engine.store import open_store
from ds4_context_engine.store._sqlite import _fts_query

SESSION_ID = "6a0e3f7c-1d2b-4c5e-8f9a-0b1c2d3e4f5a"
# a small vocabulary, so that common words match most entries and bm25 ties are frequent
VOCABULARY = (
    "parser", "lexer", "token", "trim", "semicolon", "refactor", "build", "failing", "test", "cache",
    "index", "retry", "timeout", "socket", "schema", "migration", "manifest", "artifact", "deploy",
    "rollback", "config", "quantize", "logging", "branch",
)  # fmt: skip
RARE = ("zeppelin", "quokka", "obsidian")
MESSAGES = 1500

# FTS5's old search statement, as it was before snippet() moved after the LIMIT; rowid breaks bm25 ties
# as the new query does (the old one left the order of equal ranks to the sorter)
_OLD_SEARCH = (
    "SELECT entry_key, bm25(entries_fts), snippet(entries_fts, 2, '', '', ' ... ', 16) "
    "FROM entries_fts WHERE entries_fts MATCH ? AND session_id = ? ORDER BY bm25(entries_fts), rowid LIMIT ?"
)


@pytest.fixture
def long_session(tmp_path) -> Path:
    """A session of user and assistant messages of 5-120 words, a few of them holding rare words."""
    rng = random.Random(21)
    lines = [
        json.dumps({"type": "session", "version": 3, "id": SESSION_ID,
                    "timestamp": "2026-01-01T00:00:00.000Z", "cwd": str(tmp_path)})
    ]  # fmt: skip
    parent = None
    for number in range(MESSAGES):
        words = [rng.choice(VOCABULARY) for _ in range(rng.randint(5, 120))]
        if number % 97 == 0:
            words.insert(rng.randrange(len(words)), rng.choice(RARE))
        role = "user" if number % 2 == 0 else "assistant"
        text = " ".join(words)
        content = text if role == "user" else [{"type": "text", "text": text}]
        lines.append(
            json.dumps({"type": "message", "id": f"{number:08x}", "parentId": parent,
                        "timestamp": "2026-01-01T00:00:01.000Z",
                        "message": {"role": role, "content": content, "timestamp": number}})
        )  # fmt: skip
        parent = f"{number:08x}"
    path = tmp_path / "sessions" / "long.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _queries() -> list[tuple[str, str, int]]:
    rng = random.Random(5)
    queries = [(" ".join(rng.sample(VOCABULARY, 3)), "any", 8) for _ in range(12)]
    queries += [(" ".join(rng.sample(VOCABULARY, 2)), "all", 10) for _ in range(6)]
    queries += [("zeppelin quokka", "any", 50), ("obsidian", "all", 3), ("trim", "any", 100)]
    return queries


def test_sqlite_search_matches_the_old_statement_on_a_long_session(tmp_path, long_session):
    location = tmp_path / "state" / "derived.sqlite3"
    with closing(open_store(location)) as store:
        _compare_with_old_statement(store, location, long_session)


def _compare_with_old_statement(store: Any, location: Path, long_session: Path) -> None:
    assert store.index_file(long_session).entries_indexed == MESSAGES
    prefix = len(SESSION_ID) + 1
    with closing(sqlite3.connect(location)) as connection:
        for query, match, limit in _queries():
            expression = _fts_query(query, " OR " if match == "any" else " ")
            old = [
                (key[prefix:], rank, excerpt)
                for key, rank, excerpt in connection.execute(
                    _OLD_SEARCH, (expression, SESSION_ID, limit)
                ).fetchall()
            ]
            new = [
                (hit.entry_id, hit.rank, hit.excerpt)
                for hit in store.search(SESSION_ID, query, limit=limit, match=match)  # type: ignore[arg-type]
            ]
            assert new == old, query
            assert old, query


def test_search_without_excerpts_keeps_ids_order_and_ranks(store, long_session):
    assert store.index_file(long_session).entries_indexed == MESSAGES
    found = 0
    for query, match, limit in _queries():
        full = store.search(SESSION_ID, query, limit=limit, match=match)
        bare = store.search(SESSION_ID, query, limit=limit, match=match, excerpts=False)
        assert [(hit.entry_id, hit.rank) for hit in bare] == [(hit.entry_id, hit.rank) for hit in full], query
        assert all(hit.excerpt == "" and hit.session_id == SESSION_ID for hit in bare)
        assert all(hit.excerpt for hit in full), query
        found += len(full)
    rare = store.search(SESSION_ID, "zeppelin quokka obsidian", limit=100, match="any", excerpts=False)
    assert len(rare) == len(range(0, MESSAGES, 97))
    assert found > 0
