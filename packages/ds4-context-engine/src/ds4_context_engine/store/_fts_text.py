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
_POSITION_NAMES: Final = tuple(str(position) for position in range(_MAX_POSITION + 1))
_WORD: Final = re.compile(r"[^\W_]+|[\ue000-\uf8ff]+")


def _fold(word: str) -> str:
    if word.isascii():
        return word.lower()
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def fts_words(text: str) -> list[str]:
    """The folded words of ``text``, in order (what FTS5 ``unicode61`` indexes, near enough)."""
    if text.isascii():  # the common case, all in C: no diacritics to remove
        return _WORD.findall(text.lower())
    words = []
    for match in _WORD.finditer(text):
        folded = _fold(match.group())
        if folded:
            words.append(folded)
    return words


def _quoted(word: str) -> str:
    # a word of fts_words holds letters, digits and private-use characters only, never ' or \
    return f"'{word}'"


def tsvector_text(text: str) -> tuple[str, int, frozenset[str]]:
    """A ``tsvector`` literal of ``text``'s words with their positions, how many words it has, and which."""
    words = fts_words(text)
    # positions as ready strings (the literal is built for every entry indexed: its hottest loop)
    positions: dict[str, list[str]] = {}
    names = _POSITION_NAMES
    for position, word in enumerate(words, start=1):
        spots = positions.get(word)
        name = names[position] if position <= _MAX_POSITION else names[_MAX_POSITION]
        if spots is None:
            positions[word] = [name]
        elif len(spots) < _MAX_POSITIONS_PER_WORD and spots[-1] is not name:
            spots.append(name)  # (past the last position, later ones all count as the last one, once)
    literal = " ".join([
        f"'{word}':{','.join(spots)}"
        for word, spots in positions.items()
        if len(word) * 4 <= _MAX_LEXEME_BYTES or len(word.encode("utf-8")) <= _MAX_LEXEME_BYTES
    ])  # fmt: skip
    return literal, len(words), frozenset(positions)


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
