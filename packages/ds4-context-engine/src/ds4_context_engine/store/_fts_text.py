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
import struct
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable
from typing import Final

__all__ = ["excerpt", "fts_words", "tsquery_text", "tsvector_binary", "tsvector_text"]

# PostgreSQL's tsvector limits: a lexeme is under 2 KiB and holds at most 256 positions.
_MAX_LEXEME_BYTES: Final = 2_046
_MAX_POSITIONS_PER_WORD: Final = 256
# A word's positions in its entry's tsvector are 1..tf, not where it stands: only their count is ever
# read (bm25's tf, ts_rank's frequencies), no query asks for a phrase or a distance, and a run per count
# is one ready string where the true positions cost a Python step per word (the literal is built for
# every entry indexed: its hottest loop).
_RUNS: Final = tuple(",".join(map(str, range(1, count + 1))) for count in range(_MAX_POSITIONS_PER_WORD + 1))
# the same in PostgreSQL's binary tsvector format (its tsvectorsend/tsvectorrecv): per lexeme, after
# its UTF-8 bytes and a NUL, a uint16 count of positions and each position as a uint16 (weight D: 0)
_BINARY_RUNS: Final = tuple(
    struct.pack(f">H{count}H", count, *range(1, count + 1)) for count in range(_MAX_POSITIONS_PER_WORD + 1)
)
_WORD: Final = re.compile(r"[^\W_]+|[\ue000-\uf8ff]+")
# ASCII letters and digits folded to lower case, everything else a space: for ASCII text the same words
# as ``_WORD`` finds (``[^\W_]`` is ``[A-Za-z0-9]`` there), split in C by ``str.translate`` and ``split``
_ASCII_WORDS: Final = str.maketrans({
    code: chr(code).lower() if chr(code).isalnum() else " " for code in range(128)
})  # fmt: skip


def _fold(word: str) -> str:
    if word.isascii():
        return word.lower()
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def fts_words(text: str) -> list[str]:
    """The folded words of ``text``, in order (what FTS5 ``unicode61`` indexes, near enough)."""
    if text.isascii():  # the common case, all in C: no diacritics to remove
        return text.translate(_ASCII_WORDS).split()
    words = []
    for match in _WORD.finditer(text):
        folded = _fold(match.group())
        if folded:
            words.append(folded)
    return words


def _quoted(word: str) -> str:
    # a word of fts_words holds letters, digits and private-use characters only, never ' or \
    return f"'{word}'"


def _counted(text: str) -> tuple[list[str], Counter[str]]:
    words = fts_words(text)
    return words, Counter(words)


def _fits(word: str) -> bool:
    return len(word) * 4 <= _MAX_LEXEME_BYTES or len(word.encode("utf-8")) <= _MAX_LEXEME_BYTES


def tsvector_text(text: str) -> tuple[str, int, Collection[str]]:
    """A ``tsvector`` literal of ``text``'s words, each with its count as positions 1..tf (at most
    256, PostgreSQL's limit), how many words ``text`` has, and which distinct ones."""
    words, counts = _counted(text)
    runs = _RUNS
    cap = _MAX_POSITIONS_PER_WORD
    items: Iterable[tuple[str, int]] = counts.items()
    if max(map(len, counts), default=0) * 4 > _MAX_LEXEME_BYTES:  # a word may be too long for a lexeme
        items = [(word, count) for word, count in items if _fits(word)]
    literal = " ".join([f"'{word}':{runs[count] if count <= cap else runs[cap]}" for word, count in items])
    return literal, len(words), counts.keys()


class _Lexemes(dict[tuple[str, int], bytes]):
    """(word, count) -> its lexeme in the binary format, built the first time the pair is seen: a
    session's entries share most of their (word, count) pairs, so a lexeme costs a dict lookup in C."""

    def __missing__(self, key: tuple[str, int]) -> bytes:
        word, count = key
        value = word.encode("utf-8") + b"\0" + _BINARY_RUNS[min(count, _MAX_POSITIONS_PER_WORD)]
        if len(self) >= _LEXEME_CACHE:  # a bound on memory, for text of a very large vocabulary
            self.clear()
        self[key] = value
        return value


_LEXEME_CACHE: Final = 1 << 16
_LEXEMES: Final = _Lexemes()


def tsvector_binary(text: str) -> tuple[bytes, int, Collection[str]]:
    """:func:`tsvector_text` in PostgreSQL's binary format, for ``COPY ... (FORMAT BINARY)``: the server
    reads it without parsing text, a third of what the literal costs it. The lexemes go in byte order
    (a ``str`` sorts by code point, which is UTF-8's byte order), the order the server keeps them in,
    so it need not sort them."""
    words = fts_words(text)
    # sorted before they are counted, so the counts (a dict keeps its keys' first order) come out in
    # byte order without sorting the (word, count) pairs
    words.sort()
    counts = Counter(words)
    items: Collection[tuple[str, int]] = counts.items()
    # a word may be too long for a lexeme (an ASCII word is never longer than its text, which spares the
    # look at every word's length; folding may lengthen the words of other text)
    short_ascii = len(text) <= _MAX_LEXEME_BYTES and text.isascii()
    if not short_ascii and max(map(len, counts), default=0) * 4 > _MAX_LEXEME_BYTES:
        items = [(word, count) for word, count in items if _fits(word)]
    document = len(items).to_bytes(4, "big") + b"".join(map(_LEXEMES.__getitem__, items))
    return document, len(words), counts.keys()


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
