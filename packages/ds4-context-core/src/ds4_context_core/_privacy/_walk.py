"""The privacy hot path: one copying walk over a payload, the batch screen, and the per-string rules.

This module is private and self-contained (``_privacy`` holds the public API and imports from here). It is
written for mypyc as well as for the interpreter: the walk is a class with typed attributes whose methods
call each other, and module constants are ``Final``. The pure wheel runs this file as it is; the compiled
wheel (the default on Linux x86_64, ``docs/install.md``) ships the same file compiled by mypyc next to it,
and Python imports the compiled one. Only the batch screen takes a different form in each (see
``_NATIVE_SCREEN``); behaviour is identical either way, and core's tests run against both.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from itertools import accumulate, compress, repeat
from operator import or_
from types import FunctionType
from typing import Any, Final

import msgspec

from ds4_context_core._exceptions import PrivacyEnforcementError

PRIVACY_CLASSIFICATIONS: Final = ("normal", "internal", "sensitive", "local-only")
PRIVACY_CONTENT_KEYS: Final = (
    "content",
    "messages",
    "input",
    "system",
    "tools",
    "text",
    "thinking",
    "arguments",
    "description",
    "prompt",
    "parts",
    "instructions",
    "metadata",
    "context",
    "contents",
    "toolConfig",
    "systemInstruction",
)
PRIVACY_STRUCTURAL_KEYS: Final = ("role", "type", "id", "name", "model", "api", "toolCallId", "stopReason")
PRIVACY_MAX_DEPTH: Final = 128

_CREDENTIAL_PLACEHOLDER: Final = "[DS4 REDACTED CREDENTIAL]"
_PRIVATE_KEY_PLACEHOLDER: Final = "[DS4 REDACTED PRIVATE KEY]"
_TOKEN_PLACEHOLDER: Final = "[DS4 REDACTED TOKEN]"  # noqa: S105 (a placeholder, not a secret)
_SECRET_PLACEHOLDER: Final = "[DS4 REDACTED SECRET]"  # noqa: S105 (a placeholder, not a secret)
_BINARY_PLACEHOLDER: Final = "[DS4 binary content excluded by privacy policy]"

_RANK: Final = {level: rank for rank, level in enumerate(PRIVACY_CLASSIFICATIONS)}
# key -> whether its value is content (True) or structure (False); other keys inherit from the parent.
_KEY_KIND: Final[dict[str, bool]] = {
    **dict.fromkeys(PRIVACY_STRUCTURAL_KEYS, False),
    **dict.fromkeys(PRIVACY_CONTENT_KEYS, True),
}
_CLEAN_KEY: Final = 2  # in a walk's own copy of _KEY_KIND: inherits, and sanitizing leaves it as it is

# The literal "[" prefix lets the regex engine skip quickly to candidate positions.
# A tag naming an unknown level (a typo such as ``[ds4:private]``) is still a tag, and is treated as
# ``local-only``: whoever wrote it meant to protect something.
_MARKER: Final = re.compile(r"\[(/?)ds4:([a-z0-9_-]{1,32})\]", re.IGNORECASE | re.ASCII)
_UNKNOWN_LEVEL_RANK: Final = len(PRIVACY_CLASSIFICATIONS) - 1

# One regex per secret family, each gated by a cheap substring test on the lower-cased text, so clean
# text costs a few substring searches. Case-insensitivity is ASCII-only (re.ASCII), so the lower-cased
# substring screens can never miss what a rule matches (no Kelvin-sign "K" matching "key").
_PEM: Final = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.DOTALL
)
_BEARER: Final = re.compile(r"(bearer)\s+(?!\[DS4 )[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE | re.ASCII)
# A credential starts where no letter or digit precedes it. That test sits after each branch's first
# character (the look-behind then spans it), so the regex engine can skip ahead to an "s", "g" or "A".
_CREDENTIAL: Final = re.compile(
    r"s(?<![A-Za-z0-9]s)k-(?:ant-[A-Za-z0-9_-]{8,}|[A-Za-z0-9_-]{16,})"
    r"|g(?<![A-Za-z0-9]g)h[pousr]_[A-Za-z0-9]{20,}"
    r"|A(?<![A-Za-z0-9]A)KIA[0-9A-Z]{16}"
)
_GITHUB_PREFIX: Final = re.compile(r"gh[pousr]_")
_KEY_VALUE: Final = re.compile(
    r"(api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|password)"
    r"([\"']?\s*[=:]\s*[\"']?)(?!\[DS4 )[^\s\"',;}\]]+",
    re.IGNORECASE | re.ASCII,
)


def _segments(text: str) -> list[tuple[str, int]] | None:
    """Split ``text`` on marker tags into ``(span, level rank)`` pairs; None when it has no tags."""
    tags: list[tuple[int, int, bool, int]] = []  # start, end, is_close, rank
    for match in _MARKER.finditer(text):
        start = match.start()
        backslashes = 0
        while backslashes < start and text[start - backslashes - 1] == "\\":
            backslashes += 1
        if backslashes % 2:  # an odd run escapes the bracket; an even run is escaped backslashes
            continue
        rank = _RANK.get(match.group(2).lower(), _UNKNOWN_LEVEL_RANK)
        tags.append((start, match.end(), bool(match.group(1)), rank))
    if not tags:
        return None

    # Pass 1: balance. Only a leading opening tag may stay open.
    open_tags: list[tuple[int, int]] = []  # (rank, tag index)
    balanced = True
    for index, (_start, _end, is_close, rank) in enumerate(tags):
        if not is_close:
            open_tags.append((rank, index))
        elif open_tags and open_tags[-1][0] == rank:
            open_tags.pop()
        else:
            balanced = False
    if open_tags:
        leading = tags[0][2] is False and not text[: tags[0][0]].strip()
        if not (leading and len(open_tags) == 1 and open_tags[0][1] == 0):
            balanced = False
    floor = 0 if balanced else max(tag[3] for tag in tags)

    # Pass 2: levels. A span's level is the highest of the floor and every tag open around it.
    segments: list[tuple[str, int]] = []
    stack: list[int] = []
    position = 0
    for start, end, is_close, rank in tags:
        if start > position:
            segments.append((text[position:start], max(floor, max(stack, default=0))))
        if not is_close:
            stack.append(rank)
        elif stack and stack[-1] == rank:
            stack.pop()
        position = end
    if position < len(text):
        segments.append((text[position:], max(floor, max(stack, default=0))))
    return segments


# The words every key of the key=value rule ends with (api_key, access_token, ...), what may stand between
# such a word and its "=" or ":" (an optional quote, then spaces), and how long that gap is looked at.
_KEY_WORDS: Final = ("key", "token", "secret", "password")
_KEY_GAP_CODES: Final = frozenset(map(ord, " \t\n\r\f\v\"'"))
_KEY_GAP_MAX: Final = 4  # a longer gap before a "=" or ":" counts without looking for the word
_KEY_TRIES: Final = 8
# ``| 32`` lower-cases an ASCII letter's code and maps no other character onto a letter, so comparing codes
# that way is the rules' own ASCII-only case-insensitive test.
_KEY_WORD_BY_LAST: Final = {ord(word[-1]): word for word in _KEY_WORDS}


def _key_before(text: str, position: int) -> bool:
    """Whether the key=value rule may match with its "=" or ":" at ``position`` of ``text``.

    That needs a key word and a gap of quotes and spaces right before it. It may answer yes needlessly (a
    gap of :data:`_KEY_GAP_MAX` or more), never no wrongly.
    """
    end = position
    while end and position - end < _KEY_GAP_MAX and ord(text[end - 1]) in _KEY_GAP_CODES:
        end -= 1
    if position - end == _KEY_GAP_MAX:
        return True
    # Each key word ends in its own letter: most signs are ruled out by that one character.
    word = _KEY_WORD_BY_LAST.get(ord(text[end - 1]) | 32) if end else None
    return word is not None and end >= len(word) and text[end - len(word) : end].lower() == word


def _has_key_assignment(text: str, lowered: str) -> bool:
    """Whether the key=value rule may match ``text`` (also given lower-cased): a key word, then "=" or ":"."""
    if not ("key" in lowered or "token" in lowered or "secret" in lowered or "password" in lowered):
        return False
    tries = _KEY_TRIES  # past this many "=" or ":" without a key word before them, just run the rule
    for sign in "=:":
        position = text.find(sign)
        while position >= 0:
            if not tries or _key_before(text, position):
                return True
            tries -= 1
            position = text.find(sign, position + 1)
    return False


def redact_text(text: str) -> tuple[str, int]:
    """Replace private keys, API credentials, bearer tokens and ``password=...`` values; return the count."""
    # Each rule runs only when the text holds what every match of it needs. The tests read the text as
    # given: no replacement can create what they look for (placeholders hold no "=", ":", "sk-", ...).
    lowered = text.lower()
    pem = "-----BEGIN " in text
    bearer = "bearer" in lowered
    credential = "sk-" in text or "AKIA" in text or ("_" in text and _GITHUB_PREFIX.search(text) is not None)
    assignment = ("=" in text or ":" in text) and _has_key_assignment(text, lowered)
    total = 0
    if pem:
        text, found = _PEM.subn(_PRIVATE_KEY_PLACEHOLDER, text)
        total += found
    if bearer:
        text, found = _BEARER.subn(rf"\1 {_TOKEN_PLACEHOLDER}", text)
        total += found
    if credential:
        text, found = _CREDENTIAL.subn(_CREDENTIAL_PLACEHOLDER, text)
        total += found
    if assignment:
        text, found = _KEY_VALUE.subn(rf"\1\2{_SECRET_PLACEHOLDER}", text)
        total += found
    return text, total


class _Counts:
    __slots__ = ("blocked", "changed", "redactions")

    def __init__(self) -> None:
        self.blocked = 0
        self.redactions = 0
        self.changed = False


def _blocked_placeholder(rank: int) -> str:
    return f"[DS4 {PRIVACY_CLASSIFICATIONS[rank]} content excluded by privacy policy]"


def _sanitize(text: str, allowed_ranks: frozenset[int] | None, redact: bool, counts: _Counts) -> str:
    segments = _segments(text) if "[" in text else None
    if segments is None:
        result = text
    else:
        parts: list[str] = []
        blocked_rank = -1  # rank of the placeholder being merged, -1 when none is open
        for span, rank in segments:
            if allowed_ranks is None or rank in allowed_ranks:
                if blocked_rank >= 0:
                    parts.append(_blocked_placeholder(blocked_rank))
                    counts.blocked += 1
                    blocked_rank = -1
                parts.append(span)
            else:
                blocked_rank = max(blocked_rank, rank)
        if blocked_rank >= 0:
            parts.append(_blocked_placeholder(blocked_rank))
            counts.blocked += 1
        result = "".join(parts)
        counts.changed = True  # tags were removed at the very least
    if redact:
        result, found = redact_text(result)
        if found:
            counts.redactions += found
            counts.changed = True
    return result


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | float):
        return repr(key)
    raise PrivacyEnforcementError(
        "privacy-unsupported-value", "payload has an object key of unsupported type"
    )


# The batch screen. Every rule needs one of a few characters that `str.find` locates with memchr, far
# faster than any multi-character search: a marker needs "[", a PEM block and "sk-" need "-", a GitHub
# token needs "_", an AWS key needs "K", a "password=..." pair needs "=" or ":", a bearer token "b" or
# "B". The positions of each character are gathered first, then confirmed by a short look around each. A
# confirmation only ever over-approximates its rule, and every string with a confirmed hit runs the full
# rules.
#
# The confirmations are written twice, once for each build, because what is fast is opposite in them.
# Compiled by mypyc, a loop over ``ord(text[i])`` is a few machine instructions a character, so the
# native screen confirms each position in a loop and never lower-cases the text. Interpreted, every loop
# step costs a bytecode dispatch, so the bulk screen hands whole lists of positions to C-level ``map``s
# and finds "bearer" with the regex engine in a lower-cased copy. Both screens are tested on both builds.
_GITHUB_HEADS: Final = ("ghp", "gho", "ghu", "ghs", "ghr")
_GITHUB_KINDS: Final = frozenset(map(ord, "pousr"))  # the letter between "gh" and "_"
_BEARER_HEADS: Final = ("b", "B")
_BEARER_WORD: Final = re.compile("bearer")  # the regex engine's literal search beats str.find here


def _positions(text: str, anchor: str) -> list[int]:
    """Every position of the one-character ``anchor`` in ``text``."""
    # ``text.find`` is called as a method each time, not through a bound local: compiled by mypyc, that
    # call is a direct C call (a memchr), not a Python-level one.
    found: list[int] = []
    position = text.find(anchor)
    while position >= 0:
        found.append(position)
        position = text.find(anchor, position + 1)
    return found


def _key_signs(text: str, sign: str) -> list[int]:
    """Positions of ``sign`` in ``text`` where the key=value rule may match (see :func:`_key_before`)."""
    found: list[int] = []
    position = text.find(sign)
    while position >= 0:
        if _key_before(text, position):
            found.append(position)
        position = text.find(sign, position + 1)
    return found


def _anchored_hits(joined: str, redact: bool) -> list[int]:
    """The hits of both screens for the anchors that are rare in any text: "[", "-" and "K"."""
    brackets = _positions(joined, "[")
    hits = list(compress(brackets, map(_MARKER.match, repeat(joined), brackets)))
    if redact:
        dashes = _positions(joined, "-")
        credential = map(joined.endswith, repeat("sk"), repeat(0), dashes)
        private_key = map(joined.startswith, repeat("-----BEGIN "), dashes)
        hits.extend(compress(dashes, map(or_, credential, private_key)))
        capital_ks = _positions(joined, "K")
        hits.extend(compress(capital_ks, map(joined.endswith, repeat("A"), repeat(0), capital_ks)))
    return hits


def _native_hits(joined: str, redact: bool) -> list[int]:
    """Positions in ``joined`` around which a rule may match, confirmed in loops (the compiled build)."""
    hits = _anchored_hits(joined, redact)
    if not redact:
        return hits
    for position in _positions(joined, "_"):
        if (
            position >= 3
            and ord(joined[position - 3]) == 103  # "g"
            and ord(joined[position - 2]) == 104  # "h"
            and ord(joined[position - 1]) in _GITHUB_KINDS
        ):
            hits.append(position)
    hits.extend(_key_signs(joined, "="))
    hits.extend(_key_signs(joined, ":"))
    last = len(joined) - len("bearer")
    for head in _BEARER_HEADS:
        position = joined.find(head)
        while 0 <= position <= last:
            if (  # "earer", by code (see _KEY_WORD_BY_LAST)
                ord(joined[position + 1]) | 32 == 101
                and ord(joined[position + 2]) | 32 == 97
                and ord(joined[position + 3]) | 32 == 114
                and ord(joined[position + 4]) | 32 == 101
                and ord(joined[position + 5]) | 32 == 114
            ):
                hits.append(position)
            position = joined.find(head, position + 1)
    return hits


def _bulk_hits(joined: str, redact: bool) -> list[int]:
    """Positions in ``joined`` around which a rule may match, confirmed by C-level maps (interpreted)."""
    hits = _anchored_hits(joined, redact)
    if not redact:
        return hits
    underscores = _positions(joined, "_")
    hits.extend(compress(underscores, map(joined.endswith, repeat(_GITHUB_HEADS), repeat(0), underscores)))
    hits.extend(_key_signs(joined, "="))
    hits.extend(_key_signs(joined, ":"))
    lowered = joined.lower()
    if len(lowered) != len(joined):  # a character whose lower case is longer ("İ"): keep positions
        lowered = joined.encode("ascii", "replace").lower().decode("ascii")
    hits.extend(match.start() for match in _BEARER_WORD.finditer(lowered))
    return hits


def _flag_strings(texts: list[str], redact: bool, native: bool) -> set[int]:
    """Indices of the strings in ``texts`` that the full rules must see; no other one can change.

    The strings are searched concatenated, by the native or the bulk screen. A confirmation may look
    across into a neighbour, which can only flag a string needlessly, never miss one: every real match
    lies wholly inside its string.
    """
    joined = "".join(texts)
    hits = _native_hits(joined, redact) if native else _bulk_hits(joined, redact)
    if not hits:
        return set()
    if native:
        ends: list[int] = []  # string i spans ends[i - 1]:ends[i]
        total = 0
        for text in texts:
            total += len(text)
            ends.append(total)
    else:
        ends = list(accumulate(map(len, texts)))
    return set(map(bisect_right, repeat(ends), hits))


def _is_compiled() -> bool:
    """Whether this module runs compiled by mypyc: its functions are then not Python functions."""
    return not isinstance(_is_compiled, FunctionType)


_NATIVE_SCREEN: Final = _is_compiled()


_BINARY_TYPES: Final = (bytes, bytearray, memoryview)
_SCALAR_TYPES: Final = (bool, int, float)


def _plain_dict(mapping: Mapping[Any, Any]) -> dict[Any, Any]:
    """A plain dict of ``mapping``'s items, other keys than str as their text (1 and True stay two keys).

    A dict subclass is read through ``items()`` too, which it may override.
    """
    pairs = [(key if type(key) is str else _key_text(key), value) for key, value in mapping.items()]
    copy = dict(pairs)
    if len(copy) != len(pairs):  # two keys with one text, such as 1 and "1"
        raise PrivacyEnforcementError(
            "privacy-key-collision", "two payload keys are identical after sanitizing"
        )
    return copy


def _drop_from(copy: dict[Any, Any], source: dict[Any, Any], first: Any) -> None:
    """Remove ``first`` and every key after it in ``source`` from ``copy``, so they can be re-inserted."""
    dropping = False
    for key in source:
        if dropping or key is first:
            dropping = True
            del copy[key]


class _Walk:
    """One sanitizing pass over a payload: new containers, the caller's strings where unchanged.

    Content strings are placed as they are and remembered: string ``i`` sits at ``owners[i][slots[i]]`` in
    the new payload (parallel lists, no tuple each). :meth:`finish` screens them in one batch, and only the
    few the screen flags run the full rules and are replaced in the new containers.
    """

    def __init__(self, allowed: frozenset[int] | None, redact: bool, local: bool) -> None:
        self.allowed = allowed
        self.redact = redact
        self.local = local
        self.counts = _Counts()
        self.texts: list[str] = []
        self.owners: list[Any] = []
        self.slots: list[Any] = []
        # _KEY_KIND plus, as _CLEAN_KEY, every key seen to come out of sanitizing unchanged: one lookup a key.
        self.kinds: dict[str, Any] = dict(_KEY_KIND)  # values: True, False or _CLEAN_KEY
        # Payloads repeat the same few keys thousands of times: each distinct key is sanitized once.
        self.key_cache: dict[str, tuple[str, int, int]] = {}

    def text(self, text: str) -> str:
        return _sanitize(text, self.allowed, self.redact, self.counts)

    def key(self, key: Any, in_content: bool) -> Any:
        text = key if type(key) is str else _key_text(key)
        if not in_content and not ("[" in text and _MARKER.search(text)):
            return text
        cached = self.key_cache.get(text)
        if cached is None:
            key_counts = _Counts()
            cached = (
                _sanitize(text, self.allowed, self.redact, key_counts),
                key_counts.blocked,
                key_counts.redactions,
            )
            self.key_cache[text] = cached
        sanitized, blocked, redactions = cached
        if sanitized != text:
            counts = self.counts
            counts.changed = True
            counts.blocked += blocked
            counts.redactions += redactions
        elif type(key) is str:
            self.kinds[key] = _CLEAN_KEY
        return sanitized

    def walk_dict(self, source: dict[Any, Any], in_content: bool, depth: int) -> dict[Any, Any]:
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        # A copy, whose values are replaced where they change: most values stay as they are (content
        # strings are screened later, in a batch), so that costs far fewer stores than building it anew.
        result = source.copy()
        kinds = self.kinds
        renamed = False  # once a key is rewritten, the rest of the dict is rebuilt in order after it
        for key, item in source.items():
            child = kinds.get(key) if type(key) is str else None
            if child is _CLEAN_KEY:
                child = in_content
            elif child is None:
                child = in_content
                if in_content or type(key) is not str or "[" in key:
                    text_key = self.key(key, in_content)
                    if text_key is not key:
                        if not renamed:
                            renamed = True
                            _drop_from(result, source, key)
                        key = text_key  # noqa: PLW2901
            if renamed and key in result:
                raise PrivacyEnforcementError(
                    "privacy-key-collision", "two payload keys are identical after sanitizing"
                )
            kind = type(item)
            value = item
            if kind is str:
                if child:
                    self.texts.append(item)
                    self.owners.append(result)
                    self.slots.append(key)
                elif "[" in item and _MARKER.search(item):
                    value = self.text(item)
            elif kind is dict:
                value = self.walk_dict(item, child, depth + 1)
            elif kind is list:
                value = self.walk_list(item, child, depth + 1)
            elif not (item is None or kind is int or kind is float or kind is bool):
                value = self.walk(item, child, depth + 1)
            if renamed or value is not item:
                result[key] = value
        return result

    def walk_list(self, values: Iterable[Any], in_content: bool, depth: int) -> list[Any]:
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        items = list(values)  # a copy whose changed items are replaced, as in walk_dict
        for index, item in enumerate(items):
            kind = type(item)
            if kind is str:
                if in_content:
                    self.texts.append(item)
                    self.owners.append(items)
                    self.slots.append(index)
                elif "[" in item and _MARKER.search(item):
                    items[index] = self.text(item)
            elif kind is dict:
                items[index] = self.walk_dict(item, in_content, depth + 1)
            elif kind is list:
                items[index] = self.walk_list(item, in_content, depth + 1)
            elif not (item is None or kind is int or kind is float or kind is bool):
                items[index] = self.walk(item, in_content, depth + 1)
        return items

    def walk(self, value: Any, in_content: bool, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            if in_content or ("[" in value and _MARKER.search(value)):
                return self.text(value)
            return value
        if value is None or kind is int or kind is float or kind is bool:
            return value
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        if kind is dict:
            return self.walk_dict(value, in_content, depth)
        if isinstance(value, Mapping):
            return self.walk_dict(_plain_dict(value), in_content, depth)
        if kind is list or kind is tuple or isinstance(value, list | tuple):
            return self.walk_list(value, in_content, depth)
        if isinstance(value, _BINARY_TYPES):
            if self.local:
                return value
            counts = self.counts
            counts.blocked += 1
            counts.changed = True
            return _BINARY_PLACEHOLDER
        if isinstance(value, msgspec.Struct):
            return self.walk(msgspec.to_builtins(value), in_content, depth + 1)
        if isinstance(value, str):  # str subclasses: sanitize their plain text
            return self.walk(str(value), in_content, depth)
        if isinstance(value, _SCALAR_TYPES):
            return value
        raise PrivacyEnforcementError(
            "privacy-unsupported-value",
            f"payload holds a value of unsupported type {type(value).__name__[:40]}",
        )

    def finish(self) -> None:
        """Screen the remembered content strings in one batch; sanitize and replace the flagged ones."""
        texts = self.texts
        if texts:
            owners = self.owners
            slots = self.slots
            for index in _flag_strings(texts, self.redact, _NATIVE_SCREEN):
                owners[index][slots[index]] = self.text(texts[index])


def sanitize_payload(
    payload: Any, allowed: frozenset[int] | None, redact: bool, local: bool
) -> tuple[Any, bool, int, int]:
    """Build the sanitized payload in one pass: ``(payload, changed, blocked spans, secret redactions)``.

    ``allowed`` holds the ranks that may be sent (None: every rank), ``redact`` whether secrets are
    redacted, ``local`` whether binary content may pass.
    """
    walk = _Walk(allowed, redact, local)
    sanitized = walk.walk(payload, False, 0)
    walk.finish()
    counts = walk.counts
    return sanitized, counts.changed, counts.blocked, counts.redactions


def sanitize_string(text: str, allowed: frozenset[int] | None, redact: bool) -> tuple[str, int, int]:
    """One string: ``(text, blocked spans, secret redactions)``."""
    counts = _Counts()
    return _sanitize(text, allowed, redact, counts), counts.blocked, counts.redactions
