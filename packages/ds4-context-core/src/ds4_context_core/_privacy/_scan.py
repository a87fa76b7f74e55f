"""Where the batch screen looks: the candidate positions of every anchor in an ASCII copy of the text.

Two implementations give the same candidates (as sets; a test holds them to it on thousands of texts):

* :func:`candidates_by_search` runs one C-level search per anchor (a regex pass or a ``bytes.find``
  loop), which is what the interpreter does fastest;
* :func:`candidates_by_scan` reads each byte once and looks around the few that may end or open an
  anchor. Interpreted it is some twenty times slower than the searches; compiled by mypyc (the compiled
  wheel) it is a native loop, about 2 ns a byte: 0.8 to 1.1 ms for the real coding payload's 405 KB,
  where the searches take 2.2 ms.

:data:`find_candidates` is the one this build should use. The confirmations (each candidate tried by its
rule, on its own string) are the same code whichever found them (``_walk.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Final

from ds4_context_core._privacy._rules import (
    _BASE64_ALPHABET,
    _BLOB_MIN,
    REVERSED_SIGN,
    SCREEN_FOLD,
    base64_padded_end,
    base64_runs,
)

if TYPE_CHECKING:
    # A native 64-bit integer to mypyc, an int-compatible type to mypy; the interpreter never imports it
    # (annotations are not evaluated here): the scan's counters and positions, without tagged arithmetic.
    from mypy_extensions import i64

# The words before a sign that name a secret (as REVERSED_SIGN reads them, folded: lower case, "-" as
# "_") and the heads of the tokens that end their prefix in "_" or "-" (as _REVERSED_HEADS reads them).
SECRET_NAMES: Final = (
    b"apikey",
    b"api_key",
    b"secretkey",
    b"secret_key",
    b"accesskey",
    b"access_key",
    b"privatekey",
    b"private_key",
    b"authkey",
    b"auth_key",
    b"token",
    b"secret",
    b"password",
    b"passwd",
    b"pwd",
    b"credentials",
    b"credential",
)
TOKEN_HEADS: Final = (
    b"ghp",
    b"xoxp",
    b"gho",
    b"xoxo",
    b"ghu",
    b"ghs",
    b"xoxs",
    b"ghr",
    b"xoxr",
    b"hf",
    b"npm",
    b"github",
    b"xoxb",
    b"sk_live",
    b"rk_live",
    b"sk_test",
    b"rk_test",
    b"glpat",
    b"sk",
    b"xoxa",
)
# The same heads reversed and folded, each choice grouped by its first letter, which the regex engine
# tests before it tries the choice (11 tests at each "_" instead of 18, an eighth off the pass).
REVERSED_HEADS: Final = re.compile(
    rb"_(?:p(?:hg|xox)|o(?:hg|xox)|uhg|s(?:hg|xox)|r(?:hg|xox)|fh|mpn|b(?:uhtig|xox)|evil_k[sr]"
    rb"|t(?:set_k[sr]|aplg)|ks|axox)"
)
# "A" of AKIA, ASIA (AWS) and AIza (Google): a lookahead, so that each "A" is tried ("ASIASIA" holds two).
AWS_GOOGLE_HEADS: Final = re.compile(rb"A(?=KIA|SIA|Iza)")
# A literal needle the regex engine finds faster than ``bytes.find`` here: it scans for its first byte,
# where ``bytes.find`` skips by its last one ("r": common in code).
BEARER_WORD: Final = re.compile(rb"bearer")
_BLANKS: Final = frozenset((b" ", b"\t"))
PRIVATE_KEY_HEAD: Final = b"-----BEGIN "
PRIVATE_KEY_RARE: Final = PRIVATE_KEY_HEAD.index(b"G")
JWT_HEAD: Final = b"eyJ"
JWT_RARE: Final = JWT_HEAD.index(b"J")
# A privacy tag. The literal "[" prefix lets the regex engine skip quickly to candidate positions.
# A tag naming an unknown level (a typo such as ``[ds4:private]``) is still a tag, and is treated as
# ``local-only``: whoever wrote it meant to protect something.
MARKER: Final = re.compile(r"\[(/?)ds4:([a-z0-9_-]{1,32})\]", re.IGNORECASE | re.ASCII)
MARKER_BYTES: Final = re.compile(MARKER.pattern.encode("ascii"), MARKER.flags & ~re.UNICODE)
# A tag opens "[ds4:" or "[/ds4:" in any case: one look at the next byte spares most "[" the regex.
TAG_SECOND: Final = frozenset(b"dD/")  # byte values


class Candidates:
    """Positions in the ASCII copy where a rule may match, by anchor (see :func:`candidates_by_search`)."""

    __slots__ = (
        "aws",
        "bearers",
        "escapes",
        "heads",
        "jwts",
        "private_keys",
        "runs",
        "signs",
        "tags",
        "urls",
    )

    def __init__(self) -> None:
        self.tags: list[int] = []  # each "[" that opens a tag MARKER_BYTES matches
        self.signs: list[int] = []  # each "=" or ":" after a secret's name (spaces and quotes between)
        self.heads: list[int] = []  # the start of each token head that ends in "_" or "-"
        self.jwts: list[int] = []  # the start of each "eyJ"
        self.aws: list[int] = []  # each "A" of "AKIA", "ASIA" or "AIza"
        self.private_keys: list[int] = []  # the start of each "-----BEGIN "
        self.urls: list[int] = []  # for each "@", the "://" that ends at the last "/" before it
        self.bearers: list[int] = []  # the start of each "bearer" (any case) followed by a space or tab
        self.escapes: list[int] = []  # each backslash followed by "u"
        self.runs: list[tuple[int, int]] = []  # base64 runs, as base64_runs finds them


def candidates_by_search(raw: bytes) -> Candidates:
    """The candidates of ``raw`` (``text.encode("ascii", "replace")``), one C-level search per anchor."""
    found = Candidates()
    position = raw.find(b"[")
    while position >= 0:
        second = raw[position + 1] if position + 1 < len(raw) else 0
        if second in TAG_SECOND and MARKER_BYTES.match(raw, position) is not None:
            found.tags.append(position)
        position = raw.find(b"[", position + 1)
    # Anchors that end a word (a sign after a name, the "_" after "ghp") are found in a folded, reversed
    # copy, where that byte comes first and the regex engine skips from one to the next by memchr.
    folded = raw.translate(SCREEN_FOLD)
    backwards = folded[::-1]
    last = len(raw) - 1
    found.signs = [last - match.start() for match in REVERSED_SIGN.finditer(backwards)]
    found.heads = [last - match.end() + 1 for match in REVERSED_HEADS.finditer(backwards)]
    position = raw.find(b"J", JWT_RARE)
    while position >= 0:
        if raw.startswith(JWT_HEAD, position - JWT_RARE):
            found.jwts.append(position - JWT_RARE)
        position = raw.find(b"J", position + 1)
    found.aws = [match.start() for match in AWS_GOOGLE_HEADS.finditer(raw)]
    position = raw.find(b"G", PRIVATE_KEY_RARE)
    while position >= 0:
        if raw.startswith(PRIVATE_KEY_HEAD, position - PRIVATE_KEY_RARE):
            found.private_keys.append(position - PRIVATE_KEY_RARE)
        position = raw.find(b"G", position + 1)
    # A credential URL's "user:password@" holds no "/": its "://" is where the last "/" before an "@" is
    # (both found by memchr, and "@" is rare).
    at = raw.find(b"@")
    while at >= 0:
        position = raw.rfind(b"/", 0, at) - 2
        if position >= 0 and raw.startswith(b"://", position):
            found.urls.append(position)
        at = raw.find(b"@", at + 1)
    for match in BEARER_WORD.finditer(folded):  # "bearer" cannot overlap itself: none is skipped
        position = match.start()
        if folded[position + 6 : position + 7] in _BLANKS:
            found.bearers.append(position)
    position = raw.find(b"\\")
    while position >= 0:
        if raw.startswith(b"\\u", position):
            found.escapes.append(position)
        position = raw.find(b"\\", position + 1)
    found.runs = base64_runs(raw)
    return found


# What each byte is to the scan: bit 0 whether it is in the base64 alphabet, the rest its anchor kind.
_SIGN: Final = 1  # "=" or ":": a secret's name may end right before it
_HEAD: Final = 2  # "_" or "-": a token head may end right before it
_AWS: Final = 3  # "A"
_JWT: Final = 4  # "J"
_PRIVATE_KEY: Final = 5  # "G"
_SLASH: Final = 6  # "/"
_AT: Final = 7  # "@"
_BEARER: Final = 8  # "b" or "B": "bearer" may start here (the rarest of its letters in code)
_TAG: Final = 9  # "["
_ESCAPE: Final = 10  # backslash
_KINDS: Final = {
    **dict.fromkeys(b"=:", _SIGN),
    **dict.fromkeys(b"_-", _HEAD),
    ord("A"): _AWS,
    ord("J"): _JWT,
    ord("G"): _PRIVATE_KEY,
    ord("/"): _SLASH,
    ord("@"): _AT,
    **dict.fromkeys(b"bB", _BEARER),
    ord("["): _TAG,
    ord("\\"): _ESCAPE,
}
_SCAN_TABLE: Final = bytes(_KINDS.get(code, 0) << 1 | (code in _BASE64_ALPHABET) for code in range(256))
# SCREEN_FOLD as this module's own constant: compiled, a read of it is then a native static, not a
# look-up in another module's namespace.
_FOLD: Final = SCREEN_FOLD
# The quotes, spaces and backslashes REVERSED_SIGN allows between a name and its sign.
_BETWEEN: Final = bytes(code in b" \t\"'`\\" for code in range(256))


def _by_last_byte(words: tuple[bytes, ...]) -> tuple[tuple[bytes, ...], ...]:
    """For each byte value, the words that end in it (compared folded, as SCREEN_FOLD folds)."""
    return tuple(tuple(word for word in words if word[-1] == code) for code in range(256))


_NAMES_BY_LAST: Final = _by_last_byte(SECRET_NAMES)
_HEADS_BY_LAST: Final = _by_last_byte(TOKEN_HEADS)


def _last_pairs(words: tuple[bytes, ...]) -> bytes:
    """A table of every two bytes, folded (the first times 256 plus the second): 1 where a word of
    ``words`` ends in them. One look rules out most signs and separators before any word is compared."""
    table = bytearray(256 * 256)
    for word in words:
        table[word[-2] << 8 | word[-1]] = 1
    return bytes(table)


_NAME_PAIRS: Final = _last_pairs(SECRET_NAMES)
_HEAD_PAIRS: Final = _last_pairs(TOKEN_HEADS)


def _may_end(raw: bytes, end: i64, pairs: bytes) -> bool:
    """Whether ``raw[:end]``, folded, ends in two bytes that some word of ``pairs`` ends in."""
    if end < 2:
        return False
    fold = _FOLD
    return pairs[fold[raw[end - 2]] << 8 | fold[raw[end - 1]]] == 1


def _ends_with(raw: bytes, end: i64, word: bytes) -> bool:
    """Whether ``raw[:end]``, folded by SCREEN_FOLD, ends with ``word``."""
    size: i64 = len(word)
    if end < size:
        return False
    fold = _FOLD
    start: i64 = end - size
    offset: i64 = 0
    while offset < size:  # a plain loop: native when compiled (a generator is not)
        if fold[raw[start + offset]] != word[offset]:
            return False
        offset += 1
    return True


def _ending_word(raw: bytes, end: i64, table: tuple[tuple[bytes, ...], ...]) -> i64:
    """The length of the word of ``table`` that ``raw[:end]`` ends with (folded), or 0."""
    if end <= 0:
        return 0
    for word in table[_FOLD[raw[end - 1]]]:
        if _ends_with(raw, end, word):
            return len(word)
    return 0


def _look(found: Candidates, raw: bytes, index: i64, kind: i64) -> None:
    """Add what the byte at ``index``, of anchor kind ``kind``, anchors (if anything) to ``found``."""
    size: i64 = len(raw)
    if kind == _SIGN:
        before: i64 = index
        while before > 0 and _BETWEEN[raw[before - 1]]:
            before -= 1
        if _may_end(raw, before, _NAME_PAIRS) and _ending_word(raw, before, _NAMES_BY_LAST):
            found.signs.append(index)
    elif kind == _HEAD:
        if _may_end(raw, index, _HEAD_PAIRS):
            length: i64 = _ending_word(raw, index, _HEADS_BY_LAST)
            if length:
                found.heads.append(index - length)
    elif kind == _BEARER:  # the scan saw a space or tab six bytes on
        if _ends_with(raw, index + 6, b"bearer"):
            found.bearers.append(index)
    elif kind == _AWS:
        if index + 3 < size:
            second: i64 = raw[index + 1]
            if second in (75, 83) and raw[index + 2] == 73 and raw[index + 3] == 65:
                found.aws.append(index)  # AKIA, ASIA
            elif second == 73 and raw[index + 2] == 122 and raw[index + 3] == 97:
                found.aws.append(index)  # AIza
    elif kind == _JWT:
        if index >= JWT_RARE and raw[index - 1] == 121 and raw[index - 2] == 101:  # "ey"
            found.jwts.append(index - JWT_RARE)
    elif kind == _PRIVATE_KEY:
        start: i64 = index - PRIVATE_KEY_RARE
        if start >= 0 and raw[index - 1] == 69 and raw.startswith(PRIVATE_KEY_HEAD, start):  # "E"
            found.private_keys.append(start)
    elif kind == _TAG:
        if index + 1 < size and raw[index + 1] in TAG_SECOND and MARKER_BYTES.match(raw, index):
            found.tags.append(index)
    elif index + 1 < size and raw[index + 1] == 117:  # _ESCAPE: a backslash before "u"
        found.escapes.append(index)


def candidates_by_scan(raw: bytes) -> Candidates:
    """The candidates of :func:`candidates_by_search`, found in one pass over the bytes of ``raw``.

    Written for the branch predictor as much as for mypyc: the base64 run is a count kept by arithmetic
    (no branch on whether each byte is in the alphabet, which is as good as random in text), and the
    only test at most bytes is whether it anchors anything, which one in fifteen does.
    """
    found = Candidates()
    table = _SCAN_TABLE
    size: i64 = len(raw)
    streak: i64 = 0  # base64 characters in a row right before this byte
    slash: i64 = -1  # the last "/" seen
    index: i64 = 0
    while index < size:
        value: i64 = table[raw[index]]
        alphabet: i64 = value & 1
        if streak >= _BLOB_MIN and not alphabet:  # a long run ends here
            found.runs.append((index - streak, base64_padded_end(raw, index)))
        streak = (streak + 1) * alphabet
        if value > 1:
            kind: i64 = value >> 1
            if kind == _BEARER:  # "b": asked first whether a blank follows the word
                if index + 6 < size:
                    after: i64 = raw[index + 6]
                    if after == 32 or after == 9:  # noqa: PLR1714 (two native compares)
                        _look(found, raw, index, kind)
            elif kind == _SLASH:
                slash = index
            elif kind == _AT:
                position: i64 = slash - 2
                if position >= 0 and raw[position] == 58 and raw[position + 1] == 47:  # "://"
                    found.urls.append(position)
            else:
                _look(found, raw, index, kind)
        index += 1
    if streak >= _BLOB_MIN:
        found.runs.append((size - streak, size))
    return found


# The scan where it is native code, the searches where it would be interpreted bytecode.
COMPILED: Final = not isinstance(candidates_by_scan, FunctionType)
find_candidates: Final[Callable[[bytes], Candidates]] = (
    candidates_by_scan if COMPILED else candidates_by_search
)
