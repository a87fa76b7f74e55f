"""The privacy hot path: one copying walk over a payload, the batch screen, and the per-string rules.

This module is private and self-contained (``_privacy`` holds the public API and imports from here). It is
written for mypyc as well as for the interpreter: the walk is a class with typed attributes whose methods
call each other, and module constants are ``Final``. The pure wheel runs this file as it is; the compiled
wheel (the default on Linux x86_64, ``docs/install.md``) ships the same file compiled by mypyc next to it,
and Python imports the compiled one. Behaviour is identical either way, and core's tests run against both.
"""

from __future__ import annotations

import json
import operator
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from itertools import compress, repeat
from typing import Any, Final

import msgspec

from ds4_context_core._exceptions import PrivacyEnforcementError
from ds4_context_core._privacy._rules import (
    _BASE64_MIN,
    _BASE64_WHOLE,
    _HIDDEN,
    CREDENTIAL_PLACEHOLDER,
    NO_REFERENCE_BYTES,
    PRIVATE_KEY_PLACEHOLDER,
    SECRET_PLACEHOLDER,
    TOKEN_PLACEHOLDER,
    assignment_at,
    base64_blob_secret,
    base64_run_may_hide,
    bearer_at,
    credential_url_at,
    is_secret_name,
    json_inside,
    looks_like_secret_literal,
    private_key_at,
    redact_text,
    token_at,
)
from ds4_context_core._privacy._scan import MARKER, Candidates, find_candidates

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

_CREDENTIAL_PLACEHOLDER: Final = CREDENTIAL_PLACEHOLDER
_PRIVATE_KEY_PLACEHOLDER: Final = PRIVATE_KEY_PLACEHOLDER
_TOKEN_PLACEHOLDER: Final = TOKEN_PLACEHOLDER
_SECRET_PLACEHOLDER: Final = SECRET_PLACEHOLDER
_BINARY_PLACEHOLDER: Final = "[DS4 binary content excluded by privacy policy]"

# A local-only message's tool call arguments travel as one marked JSON text under this key, and a
# structural value (a tool name) that privacy blocks becomes the identifier ``ds4_excluded`` (see
# _local_only.py).
LOCAL_ONLY_KEY: Final = "__ds4_local_only"
LOCAL_ONLY_VALUE_KEY: Final = "__ds4_local_only_value"  # a local-only opaque block's keys and values
RAW_ARGUMENTS_KEY: Final = "__ds4_raw_arguments"  # interop's key for arguments that are not an object
_LOCAL_ONLY_OPEN: Final = "[ds4:local-only]"
_LOCAL_ONLY_CLOSE: Final = "[/ds4:local-only]"
_LOCAL_ONLY_JSON_HEAD: Final = '{"' + LOCAL_ONLY_KEY + '":'
_STRUCTURAL_PLACEHOLDER: Final = "ds4_excluded"
_NAME_KEYS: Final = frozenset(("name", "toolName", "tool_name"))  # values providers check as identifiers

_RANK: Final = {level: rank for rank, level in enumerate(PRIVACY_CLASSIFICATIONS)}
# key -> whether its value is content (True) or structure (False); other keys inherit from the parent.
_KEY_KIND: Final[dict[str, bool]] = {
    **dict.fromkeys(PRIVACY_STRUCTURAL_KEYS, False),
    **dict.fromkeys(PRIVACY_CONTENT_KEYS, True),
}
_CLEAN_KEY: Final = 2  # in a walk's own copy of _KEY_KIND: inherits, and sanitizing leaves it as it is

_MARKER: Final = MARKER  # a privacy tag (see _scan.py)
_UNKNOWN_LEVEL_RANK: Final = len(PRIVACY_CLASSIFICATIONS) - 1


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


class _Counts:
    __slots__ = ("binary", "blocked", "changed", "redactions")

    def __init__(self) -> None:
        self.blocked = 0
        self.redactions = 0
        self.changed = False
        self.binary = False  # whether binary content was met (a cached message may hold none)


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


# The batch screen. Every rule needs a few literal characters in a row (a sign after a secret's name,
# the head of a token, "://", "bearer", "[ds4:"): the screen finds them in all content strings joined
# (_scan.py: by C-level searches interpreted, by one native pass over the bytes compiled), confirms the
# few candidates with the rule's own test where that is cheap, and only strings with a hit run the full
# rules. A confirmation only ever over-approximates its rule (a token's or a private key's is its rule's
# own match, on its string alone). What no anchor can see (fullwidth or zero-width characters, base64,
# JSON escapes) is screened by :func:`_wrapped_strings` and :func:`_base64_hits`.
# The screen reads an ASCII copy of the joined text as bytes (every other character becomes "?", so
# positions stay the same; no rule matches outside ASCII once text is normalised). Each token head is
# matched as written by its family's pattern (an upper-case "TASK-1" is no "sk-" head).


def _local(ends: list[int], index: int, position: int) -> int:
    """``position`` of the joined text as a position in string ``index`` (see :func:`_flag_distinct`)."""
    return position - ends[index - 1] - 1 if index else position


def _token_hit(texts: list[str], ends: list[int], position: int) -> bool:
    """Whether the token rule replaces a token at ``position`` of the joined text, on its string alone."""
    index = bisect_right(ends, position)
    return token_at(texts[index], _local(ends, index, position))


def _bulk_hits(texts: list[str], joined: str, raw: bytes, found: Candidates, ends: list[int]) -> list[int]:
    """Positions in ``joined`` around which a rule may match: the candidates ``found`` in ``raw``
    (``joined.encode("ascii", "replace")``) that pass their rule's cheap test.

    ``joined`` holds the strings with a newline between each two, and string ``i`` ends at ``ends[i]``.
    """
    hits = list(found.tags)
    # After each sign after a secret's name, (in C, by a map) whether what follows it is a reference; only
    # the others are asked of assignment_at, up to the end of their string. A reference never reaches past
    # its string's end: the newline there ends it as the end of the string does (_REFERENCE reads "\n"
    # where it reads the end, and no part of it goes on over a newline).
    signs = found.signs
    others = map(NO_REFERENCE_BYTES.match, repeat(raw), map(operator.add, signs, repeat(1)))
    for position in compress(signs, others):
        if assignment_at(joined, position, ends[bisect_right(ends, position)]):
            hits.append(position)
    for start in found.heads:
        if _token_hit(texts, ends, start):
            hits.append(start)
    for start in found.jwts:
        if _token_hit(texts, ends, start):
            hits.append(start)
    for start in found.aws:
        if _token_hit(texts, ends, start):
            hits.append(start)
    for start in found.private_keys:
        index = bisect_right(ends, start)
        if private_key_at(texts[index], _local(ends, index, start)):
            hits.append(start)
    for position in found.urls:
        if credential_url_at(joined, position, ends[bisect_right(ends, position)]) is not None:
            hits.append(position)
    for position in found.bearers:
        if bearer_at(joined, position, ends[bisect_right(ends, position)]):
            hits.append(position)
    return hits


def _wrapped_strings(texts: list[str], joined: str, found: Candidates, ends: list[int]) -> set[int]:
    """Indices of the strings that may hide a secret from the anchors: normalisable characters, ``\\u``
    escapes, a JSON text that parses or a whole-string base64 value that decodes to a secret (each judged
    stripped, as the rules judge it). Found with C-level searches over the joined text and maps over the
    strings, not one call a string."""
    found_strings: set[int] = set()
    if not joined.isascii():  # str.isascii is a flag CPython keeps: no scan
        others = compress(range(len(texts)), map(operator.not_, map(str.isascii, texts)))
        found_strings.update(index for index in others if _HIDDEN.search(texts[index]) is not None)
    # One that spans two strings flags the first needlessly.
    found_strings.update(map(bisect_right, repeat(ends), found.escapes))
    stripped = list(map(str.strip, texts))  # the same object where nothing is stripped
    opens = map(str.startswith, stripped, repeat(("{", "[")))
    found_strings.update(
        index for index in compress(range(len(texts)), opens) if json_inside(stripped[index])
    )
    long_words = compress(range(len(texts)), map(_BASE64_MIN.__le__, map(len, stripped)))
    found_strings.update(
        index
        for index in long_words
        if " " not in stripped[index]
        and _BASE64_WHOLE.fullmatch(stripped[index]) is not None
        and base64_blob_secret(stripped[index])
    )
    return found_strings


def _base64_hits(joined: str, raw: bytes, found: Candidates, ends: list[int]) -> list[int]:
    """Indices of the strings holding a base64 run that decodes to a secret (a run ends with its string:
    the newline after it is no base64)."""
    return [
        bisect_right(ends, start)
        for start, end in found.runs
        if base64_run_may_hide(raw[start:end]) and base64_blob_secret(joined[start:end])
    ]


def _flag_strings(texts: list[str], redact: bool) -> set[int]:
    """Indices of the strings in ``texts`` that the full rules must see; no other one can change.

    Each distinct string is screened once (a coding payload repeats its short replies and the files it
    reads), and a flagged one flags every copy.
    """
    unique = list(dict.fromkeys(texts))
    if len(unique) == len(texts):
        return _flag_distinct(texts, redact)
    flagged = _flag_distinct(unique, redact)
    if not flagged:
        return flagged
    chosen = {unique[index] for index in flagged}
    return set(compress(range(len(texts)), map(chosen.__contains__, texts)))


def _flag_distinct(texts: list[str], redact: bool) -> set[int]:
    """:func:`_flag_strings` of strings that are all different, searched joined by newlines.

    A confirmation may look across into a neighbour, which can only flag a string needlessly, never miss
    one: every real match lies wholly inside its string (and a token's or a private key's is matched on
    its string alone, where a string's start is one).
    """
    # A newline between each two strings: no rule's match goes on over one, so no search sees a string run
    # on into the next, and what follows a sign or a run ends where its string does. String i spans
    # ends[i - 1] + 1:ends[i].
    joined = "\n".join(texts)
    # A plain loop: compiled, it is native arithmetic (a quarter of the time of the C iterators' chain).
    ends: list[int] = []
    end = -1
    for text in texts:
        end += len(text) + 1
        ends.append(end)
    # An ASCII copy at the same positions (see the screen's comment), for the searches that run on bytes.
    # Encoded one string at a time where any is not ASCII: an ASCII string's copy is a memcpy, and only the
    # few others go through the slow, character by character path ("?" for each other character).
    if not redact:
        tags = [match.start() for match in _MARKER.finditer(joined)] if "[" in joined else []
        return set(map(bisect_right, repeat(ends), tags))
    raw = (
        joined.encode("ascii")
        if joined.isascii()
        else b"\n".join(map(str.encode, texts, repeat("ascii"), repeat("replace")))
    )
    found = find_candidates(raw)
    hits = _bulk_hits(texts, joined, raw, found, ends)
    wrapped = _wrapped_strings(texts, joined, found, ends)
    wrapped.update(_base64_hits(joined, raw, found, ends))
    if not hits:
        return wrapped
    return set(map(bisect_right, repeat(ends), hits)) | wrapped


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


def _local_only_inner(text: Any) -> str | None:
    """The text inside a whole local-only span, or None when ``text`` is not one."""
    if type(text) is not str or not (text.startswith(_LOCAL_ONLY_OPEN) and text.endswith(_LOCAL_ONLY_CLOSE)):
        return None
    inner: str = text[len(_LOCAL_ONLY_OPEN) : len(text) - len(_LOCAL_ONLY_CLOSE)]
    return None if "[" in inner and _MARKER.search(inner) else inner


def _local_only_arguments_text(text: str) -> str | None:
    """For a local destination: the arguments text inside a JSON-encoded local-only wrapper, else None."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    if type(parsed) is not dict or len(parsed) != 1:
        return None
    return _local_only_inner(parsed.get(LOCAL_ONLY_KEY))


def _local_only_arguments(source: dict[Any, Any]) -> Any:
    """For a local destination: the arguments object a local-only wrapper dict carries, else None."""
    inner = _local_only_inner(source.get(LOCAL_ONLY_KEY))
    if inner is None:
        return None
    try:
        parsed = json.loads(inner)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: inner}
    return parsed if type(parsed) is dict and RAW_ARGUMENTS_KEY not in parsed else {RAW_ARGUMENTS_KEY: inner}


def _local_only_value(source: dict[Any, Any]) -> Any:
    """For a local destination: ``source`` with its marked opaque value back in place, else None.

    The marked text holds JSON; an object's keys go where the marked key stands (a key outside that the
    object holds too is its copy, such as a part's ``type``), any other value replaces ``source`` when the
    marked key is all it has.
    """
    inner = _local_only_inner(source.get(LOCAL_ONLY_VALUE_KEY))
    if inner is None:
        return None
    try:
        parsed = json.loads(inner)
    except (ValueError, RecursionError):
        return None
    if type(parsed) is not dict:
        return parsed if len(source) == 1 else None
    result: dict[Any, Any] = {}
    for key, value in source.items():
        if key == LOCAL_ONLY_VALUE_KEY:
            result.update(parsed)
        elif key not in parsed:
            result[key] = value
    return result


class _Dropped:
    """The marker a signed block leaves in its list when it may not be sent as it is."""

    __slots__ = ()


_DROPPED: Final = _Dropped()
# Blocks a provider signs (Anthropic thinking and redacted thinking): editing one voids its signature, so
# one that sanitizing would change is dropped whole instead.
_SIGNED_TYPES: Final = frozenset(("thinking", "redacted_thinking"))


def _is_signed(source: dict[Any, Any]) -> bool:
    signature = source.get("signature")
    kind = source.get("type")
    return (
        isinstance(signature, str) and bool(signature) and (kind in _SIGNED_TYPES or "thinking" in source)
    ) or (kind == "redacted_thinking" and "data" in source)


class _Walk:
    """One sanitizing pass over a payload: new containers, the caller's strings where unchanged.

    Content strings are placed as they are and remembered: string ``i`` sits at ``owners[i][slots[i]]`` in
    the new payload (parallel lists, no tuple each). :meth:`finish` screens them in one batch, and only the
    few the screen flags run the full rules and are replaced in the new containers.
    """

    def __init__(self, allowed: frozenset[int] | None, redact: bool, local: bool, signed: bool) -> None:
        self.allowed = allowed
        self.redact = redact
        self.local = local
        self.signed = signed  # whether this walk is inside a signed block (see signed_block)
        self.counts = _Counts()
        self.dropping: list[list[Any]] = []  # lists holding a dropped signed block
        self.texts: list[str] = []
        self.owners: list[Any] = []
        self.slots: list[Any] = []
        # _KEY_KIND plus, as _CLEAN_KEY, every key seen to come out of sanitizing unchanged: one lookup a key.
        self.kinds: dict[str, Any] = dict(_KEY_KIND)  # values: True, False or _CLEAN_KEY
        # Payloads repeat the same few keys thousands of times: each distinct key is sanitized once.
        self.key_cache: dict[str, tuple[str, int, int]] = {}
        # Whether a key names a secret (its string value is then judged as a secret's literal).
        self.secret_names: dict[str, bool] = {}
        # For walk_each: the index in ``texts`` where each value's strings start, and each value's counts.
        self.marks: list[int] = []
        self.mark_counts: list[_Counts] = []

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

    def content_value(self, result: dict[Any, Any], key: Any, item: str) -> str:
        """A content string of a dict: judged now under a secret's name, else remembered for the screen."""
        if self.secret_value(key, item):
            counts = self.counts
            counts.redactions += 1
            counts.changed = True
            return _SECRET_PLACEHOLDER
        if self.local and item.startswith(_LOCAL_ONLY_JSON_HEAD):
            value = self.local_only_text(item)
            if value is not item:
                return value
        self.texts.append(item)
        self.owners.append(result)
        self.slots.append(key)
        return item

    def structural_text(self, text: str) -> str:
        """A structural value (a name, a type) with markers: an identifier when any of it is blocked."""
        blocked = self.counts.blocked
        result = self.text(text)
        return _STRUCTURAL_PLACEHOLDER if self.counts.blocked > blocked else result

    def local_only_text(self, text: str) -> str:
        """For a local destination: a local-only call's JSON arguments text, back as it was."""
        inner = _local_only_arguments_text(text)
        if inner is None:
            return text
        self.counts.changed = True
        return inner

    def signed_block(self, source: dict[Any, Any], in_content: bool, depth: int) -> Any:
        """``source`` as it is when sanitizing would not change it, else the dropped marker."""
        inner = _Walk(self.allowed, self.redact, self.local, True)
        copy = inner.walk_dict(source, in_content, depth)
        inner.finish()
        if inner.counts.binary:
            self.counts.binary = True
        if not inner.counts.changed:
            return copy
        counts = self.counts
        counts.blocked += 1
        counts.changed = True
        return _DROPPED

    def secret_value(self, key: Any, text: str) -> bool:
        """Whether ``text``, the value of object key ``key``, is a secret's literal to redact."""
        if not self.redact or type(key) is not str:
            return False
        named = self.secret_names.get(key)
        if named is None:
            named = is_secret_name(key)
            self.secret_names[key] = named
        return named and looks_like_secret_literal(text)

    def walk_dict(self, source: dict[Any, Any], in_content: bool, depth: int) -> Any:
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        if not self.signed and ("signature" in source or "data" in source) and _is_signed(source):
            return self.signed_block(source, in_content, depth)
        if self.local and LOCAL_ONLY_KEY in source and len(source) == 1:
            arguments = _local_only_arguments(source)
            if arguments is not None:  # a local-only call's arguments, back as they were
                self.counts.changed = True
                return self.walk_dict(arguments, in_content, depth)
        if self.local and LOCAL_ONLY_VALUE_KEY in source:
            restored = _local_only_value(source)
            if restored is not None:  # a local-only opaque block's value, back as it was
                self.counts.changed = True
                return self.walk(restored, in_content, depth + 1)
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
                    value = self.content_value(result, key, item)
                elif "[" in item and _MARKER.search(item):
                    value = self.structural_text(item) if key in _NAME_KEYS else self.text(item)
            elif kind is dict:
                value = self.walk_dict(item, child, depth + 1)
                if value is _DROPPED:
                    raise PrivacyEnforcementError(
                        "privacy-signed-block", "a signed block that privacy would change is not in a list"
                    )
            elif kind is list:
                value = self.walk_list(item, child, depth + 1)
            elif not (item is None or kind is int or kind is float or kind is bool):
                value = self.walk(item, child, depth + 1)
                if value is _DROPPED:
                    raise PrivacyEnforcementError(
                        "privacy-signed-block", "a signed block that privacy would change is not in a list"
                    )
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
                value = self.walk_dict(item, in_content, depth + 1)
                if value is _DROPPED and (not self.dropping or self.dropping[-1] is not items):
                    self.dropping.append(items)
                items[index] = value
            elif kind is list:
                items[index] = self.walk_list(item, in_content, depth + 1)
            elif not (item is None or kind is int or kind is float or kind is bool):
                value = self.walk(item, in_content, depth + 1)
                if value is _DROPPED and (not self.dropping or self.dropping[-1] is not items):
                    self.dropping.append(items)
                items[index] = value
        return items

    def walk(self, value: Any, in_content: bool, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            if in_content:
                return self.text(value)
            if "[" in value and _MARKER.search(value):
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
            self.counts.binary = True
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

    def walk_each(self, values: list[Any], in_content: bool, depth: int) -> list[tuple[list[Any], _Counts]]:
        """Each of ``values`` walked as an item of a list at ``depth``, each with counts of its own.

        Per value: a list holding its sanitized copy (empty when it is a signed block that is dropped)
        and its counts. Both are complete once :meth:`finish` has run; the walk's own counts stay apart.
        """
        walked: list[tuple[list[Any], _Counts]] = []
        total = self.counts
        for value in values:
            counts = _Counts()
            self.counts = counts
            self.marks.append(len(self.texts))
            self.mark_counts.append(counts)
            walked.append((self.walk_list([value], in_content, depth), counts))
        self.counts = total
        return walked

    def finish(self) -> None:
        """Screen the remembered content strings in one batch; sanitize and replace the flagged ones."""
        texts = self.texts
        if texts:
            owners = self.owners
            slots = self.slots
            marks = self.marks
            total = self.counts
            for index in _flag_strings(texts, self.redact):
                if marks:  # a string of walk_each: its value's counts
                    self.counts = self.mark_counts[bisect_right(marks, index) - 1]
                owners[index][slots[index]] = self.text(texts[index])
            self.counts = total
        for items in self.dropping:
            items[:] = [item for item in items if item is not _DROPPED]


def copy_containers(value: Any) -> Any:
    """``value`` with each of its dicts and lists copied, the rest shared (a sanitized payload holds no
    other container): a cached result handed out anew, so that no caller can change another's."""
    kind = type(value)
    if kind is dict:
        copied = value.copy()
        for key, item in value.items():
            inner = type(item)
            if inner is dict or inner is list:
                copied[key] = copy_containers(item)
        return copied
    if kind is list:
        items = list(value)
        for index, item in enumerate(items):
            inner = type(item)
            if inner is dict or inner is list:
                items[index] = copy_containers(item)
        return items
    return value


def sanitize_payload(
    payload: Any, allowed: frozenset[int] | None, redact: bool, local: bool
) -> tuple[Any, bool, int, int]:
    """Build the sanitized payload in one pass: ``(payload, changed, blocked spans, secret redactions)``.

    ``allowed`` holds the ranks that may be sent (None: every rank), ``redact`` whether secrets are
    redacted, ``local`` whether binary content may pass.
    """
    walk = _Walk(allowed, redact, local, False)
    sanitized = walk.walk(payload, False, 0)
    if sanitized is _DROPPED:
        raise PrivacyEnforcementError("privacy-signed-block", "the payload is a signed block that changes")
    walk.finish()
    counts = walk.counts
    return sanitized, counts.changed, counts.blocked, counts.redactions


def sanitize_string(text: str, allowed: frozenset[int] | None, redact: bool) -> tuple[str, int, int]:
    """One string: ``(text, blocked spans, secret redactions)``."""
    counts = _Counts()
    return _sanitize(text, allowed, redact, counts), counts.blocked, counts.redactions
