"""Words as SQLite's FTS5 ``unicode61`` tokenizer sees them, for a backend without FTS5 (PostgreSQL).

PostgreSQL's own text parser splits differently (``foo.bar`` is one "host" token, ``trim_tests`` stays
whole, and what counts as a letter depends on the database's locale), so the PostgreSQL store never
lets it parse: the words are found here and handed over as a ready ``tsvector`` literal and a
``tsquery`` of quoted words. A word is a run of letters, digits (Unicode categories L* and N*) and
private-use characters, case-folded and without diacritics, as ``unicode61`` with
``remove_diacritics 1`` (its default) produces.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Final

__all__ = ["excerpt", "fts_words", "tsquery_text", "tsvector_text"]

# PostgreSQL's tsvector limits: positions run to 16,383, a lexeme is under 2 KiB, 256 positions a lexeme.
_MAX_POSITION: Final = 16_383
_MAX_LEXEME_BYTES: Final = 2_046
_MAX_POSITIONS_PER_WORD: Final = 256
_WORD: Final = re.compile(r"[^\W_]+|[\ue000-\uf8ff]+")


def _fold(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def fts_words(text: str) -> list[str]:
    """The folded words of ``text``, in order (what FTS5 ``unicode61`` indexes, near enough)."""
    words = []
    for match in _WORD.finditer(text):
        folded = _fold(match.group())
        if folded:
            words.append(folded)
    return words


def _quoted(word: str) -> str:
    # words hold letters and digits only, but quote as the tsvector grammar asks all the same
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_text(text: str) -> tuple[str, int, frozenset[str]]:
    """A ``tsvector`` literal of ``text``'s words with their positions, how many words it has, and which."""
    positions: dict[str, list[int]] = {}
    count = 0
    for count, word in enumerate(fts_words(text), start=1):
        if len(word.encode("utf-8")) > _MAX_LEXEME_BYTES:
            continue
        kept = positions.setdefault(word, [])
        if len(kept) < _MAX_POSITIONS_PER_WORD:
            kept.append(min(count, _MAX_POSITION))
    literal = " ".join(f"{_quoted(word)}:{','.join(map(str, spots))}" for word, spots in positions.items())
    return literal, count, frozenset(positions)


def tsquery_text(words: Iterable[str], *, match_any: bool) -> str:
    """Every word quoted (so no query syntax), joined by ``&`` (all) or ``|`` (any)."""
    return (" | " if match_any else " & ").join(_quoted(word) for word in words)


def excerpt(text: str, words: frozenset[str], *, tokens: int) -> str:
    """About ``tokens`` words of ``text`` around its first word in ``words``, ``...`` where it was cut."""
    spans = [(match.start(), match.end(), _fold(match.group())) for match in _WORD.finditer(text)]
    if not spans:
        return ""
    first = next((index for index, span in enumerate(spans) if span[2] in words), 0)
    start = max(0, min(first - tokens // 4, len(spans) - tokens))
    end = min(len(spans), start + tokens)
    body = text[spans[start][0] : spans[end - 1][1]]
    prefix = "" if start == 0 else " ... "
    suffix = "" if end == len(spans) else " ... "
    return f"{prefix}{body}{suffix}"
