"""Privacy enforcement right before transport: classification markers, secret redaction, fail closed.

Content is classified ``normal < internal < sensitive < local-only``. Authors mark spans inline with
``[ds4:LEVEL]...[/ds4:LEVEL]``; a span is sent to a remote provider only when its level is in the
policy's ``remote_allowed`` set, otherwise it is replaced by a fixed placeholder. Local providers (chosen
by provider id) receive every level. Marker tags never reach any provider.

Marker rules:

* nesting never downgrades: a span's level is the highest level of every marker open around it;
* a string that *starts* with an opening marker that is never closed is classified by it to its end;
* ``\\[ds4:...]`` (a backslash before the bracket) is literal text, kept verbatim with its backslash, so
  sanitizing twice gives the same result;
* any other imbalance (a stray close, a mismatched close, an unclosed marker that is not leading) raises
  the floor of the whole string to the highest level it mentions.

Any exception while sanitizing becomes :class:`PrivacyEnforcementError`; the caller must then not call
its transport. Traversal is one recursive pass over the payload, linear in its size: it builds new
containers (none is shared with the caller's payload) and keeps the caller's own string objects where
nothing changes. Content strings are then screened in one batch, and only the few the screen flags run
the full marker and secret rules.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from itertools import accumulate, chain, compress, repeat
from operator import or_
from typing import Any, Final, Literal, TypeAlias

import msgspec

from ._exceptions import PrivacyEnforcementError, PrivacyPolicyError
from ._stable_json import stable_hash

__all__ = [
    "DEFAULT_LOCAL_PROVIDERS",
    "DEFAULT_REMOTE_ALLOWED",
    "PRIVACY_CLASSIFICATIONS",
    "PRIVACY_CONTENT_KEYS",
    "PRIVACY_DESTINATIONS",
    "PRIVACY_ERROR_CODES",
    "PRIVACY_MAX_DEPTH",
    "PRIVACY_PLACEHOLDERS",
    "PRIVACY_POLICY_VERSION_PREFIX",
    "PRIVACY_STRUCTURAL_KEYS",
    "PrivacyClassification",
    "PrivacyDestination",
    "PrivacyPolicy",
    "PrivacyResult",
    "PrivacySummary",
    "classify_text",
    "enforce_payload_privacy",
    "is_classification_allowed",
    "privacy_destination",
    "privacy_policy_version",
    "redact_secrets",
    "sanitize_text",
]

PrivacyClassification: TypeAlias = Literal["normal", "internal", "sensitive", "local-only"]
PrivacyDestination: TypeAlias = Literal["local", "remote"]

PRIVACY_CLASSIFICATIONS: Final = ("normal", "internal", "sensitive", "local-only")
PRIVACY_DESTINATIONS: Final = ("local", "remote")
DEFAULT_LOCAL_PROVIDERS: Final = ("ollama", "llama-cpp", "lmstudio")
DEFAULT_REMOTE_ALLOWED: Final = ("normal", "internal")
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
PRIVACY_ERROR_CODES: Final = (
    "privacy-enforcement-failed",
    "privacy-key-collision",
    "privacy-payload-too-deep",
    "privacy-unsupported-value",
)
PRIVACY_MAX_DEPTH: Final = 128
PRIVACY_POLICY_VERSION_PREFIX: Final = "ds4-privacy-policy-v1:"

_CREDENTIAL_PLACEHOLDER: Final = "[DS4 REDACTED CREDENTIAL]"
_PRIVATE_KEY_PLACEHOLDER: Final = "[DS4 REDACTED PRIVATE KEY]"
_TOKEN_PLACEHOLDER: Final = "[DS4 REDACTED TOKEN]"  # noqa: S105 (a placeholder, not a secret)
_SECRET_PLACEHOLDER: Final = "[DS4 REDACTED SECRET]"  # noqa: S105 (a placeholder, not a secret)
_BINARY_PLACEHOLDER: Final = "[DS4 binary content excluded by privacy policy]"
PRIVACY_PLACEHOLDERS: Final = (
    _BINARY_PLACEHOLDER,
    _CREDENTIAL_PLACEHOLDER,
    _PRIVATE_KEY_PLACEHOLDER,
    _SECRET_PLACEHOLDER,
    _TOKEN_PLACEHOLDER,
    *(f"[DS4 {level} content excluded by privacy policy]" for level in PRIVACY_CLASSIFICATIONS),
)

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


class PrivacyPolicy(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What may leave the machine. The defaults are the safe ones: on, secrets redacted.

    ``local_providers`` are provider ids (compared case-insensitively) that run on this machine and may
    receive every classification. ``remote_allowed`` lists the classifications any other provider may
    receive; it can never include ``local-only``.
    """

    enabled: bool = True
    local_providers: tuple[str, ...] = DEFAULT_LOCAL_PROVIDERS
    remote_allowed: tuple[PrivacyClassification, ...] = DEFAULT_REMOTE_ALLOWED
    redact_secrets: bool = True

    def __post_init__(self) -> None:
        for level in self.remote_allowed:
            if level not in _RANK:
                raise PrivacyPolicyError(
                    "privacy-classification-unknown", "remote_allowed names an unknown classification"
                )
        if "local-only" in self.remote_allowed:
            raise PrivacyPolicyError(
                "privacy-policy-invalid", "remote_allowed must never include the local-only classification"
            )
        for provider in self.local_providers:
            if not isinstance(provider, str) or not provider.strip():
                raise PrivacyPolicyError("privacy-policy-invalid", "local provider ids must be non-empty")


class PrivacySummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What enforcement did, without the payload: safe to log and to return from ``complete()``."""

    provider: str
    destination: PrivacyDestination
    changed: bool
    blocked_blocks: int
    secret_redactions: int


class PrivacyResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The sanitized payload plus counts. ``payload`` is a new object; the input is never modified."""

    provider: str
    destination: PrivacyDestination
    payload: Any
    changed: bool
    blocked_blocks: int
    secret_redactions: int

    def summary(self) -> PrivacySummary:
        """The metadata-only view of this result."""
        return PrivacySummary(
            provider=self.provider,
            destination=self.destination,
            changed=self.changed,
            blocked_blocks=self.blocked_blocks,
            secret_redactions=self.secret_redactions,
        )


def privacy_destination(provider: str, policy: PrivacyPolicy | None = None) -> PrivacyDestination:
    """``local`` only when the provider id (case-insensitive) is one of the policy's local providers."""
    active = policy or _DEFAULT_POLICY
    lowered = provider.strip().lower()
    return "local" if any(lowered == local.strip().lower() for local in active.local_providers) else "remote"


def is_classification_allowed(
    classification: PrivacyClassification,
    destination: PrivacyDestination,
    policy: PrivacyPolicy | None = None,
) -> bool:
    """Whether content of this classification may go to this destination under ``policy``."""
    if destination == "local":
        return True
    return classification in (policy or _DEFAULT_POLICY).remote_allowed


def privacy_policy_version(policy: PrivacyPolicy | None = None) -> str:
    """A short stable id of a policy's effect, for caches keyed on it (such as local KV eligibility)."""
    active = policy or _DEFAULT_POLICY
    digest = stable_hash(
        {
            "enabled": active.enabled,
            "localProviders": sorted({provider.strip().lower() for provider in active.local_providers}),
            "remoteAllowed": sorted(set(active.remote_allowed), key=_RANK.__getitem__),
            "redactSecrets": active.redact_secrets,
        }
    )
    return PRIVACY_POLICY_VERSION_PREFIX + digest[:16]


class _Segment(msgspec.Struct):
    text: str
    rank: int


def _segments(text: str) -> list[_Segment] | None:
    """Split ``text`` on marker tags into spans with their effective level; None when it has no tags."""
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
    segments: list[_Segment] = []
    stack: list[int] = []
    position = 0
    for start, end, is_close, rank in tags:
        if start > position:
            segments.append(_Segment(text[position:start], max(floor, max(stack, default=0))))
        if not is_close:
            stack.append(rank)
        elif stack and stack[-1] == rank:
            stack.pop()
        position = end
    if position < len(text):
        segments.append(_Segment(text[position:], max(floor, max(stack, default=0))))
    return segments


def classify_text(text: str) -> PrivacyClassification:
    """The highest classification any part of ``text`` carries (``normal`` when it has no markers)."""
    segments = _segments(text)
    if segments is None:
        return "normal"
    top = max((segment.rank for segment in segments), default=0)
    return PRIVACY_CLASSIFICATIONS[top]


# Empty, but only right after a word that ends a key of the key=value rule (api_key, access_token, ...).
_KEY_WORD_END: Final = re.compile(r"(?<=key)|(?<=token)|(?<=secret)|(?<=password)", re.IGNORECASE | re.ASCII)
# What may stand between such a word and its "=" or ":", and the letters such a word ends with.
_KEY_GAP: Final = " \t\n\r\f\v\"'"
_KEY_LAST_LETTERS: Final = "yYnNtTdD"
_KEY_LOOKBACK: Final = 16
_KEY_TRIES: Final = 8


def _key_word_before(text: str, position: int) -> bool:
    """Whether the "=" or ":" at ``position`` may follow a key word, then an optional quote and spaces.

    It may answer yes needlessly (a word cut off by the look-back window counts as a key), never no wrongly.
    """
    start = position - _KEY_LOOKBACK if position > _KEY_LOOKBACK else 0
    head = text[start:position].rstrip(_KEY_GAP)
    if start and len(head) < 8:
        return True
    return bool(head) and head[-1] in _KEY_LAST_LETTERS and _KEY_WORD_END.match(head, len(head)) is not None


def _has_key_assignment(text: str, lowered: str) -> bool:
    """Whether the key=value rule may match ``text``: a key word, then its "=" or ":"."""
    if not ("key" in lowered or "token" in lowered or "secret" in lowered or "password" in lowered):
        return False
    tries = _KEY_TRIES  # past this many "=" or ":" without a key word before them, just run the rule
    for sign in "=:":
        position = text.find(sign)
        while position >= 0:
            if not tries or _key_word_before(text, position):
                return True
            tries -= 1
            position = text.find(sign, position + 1)
    return False


def redact_secrets(text: str) -> tuple[str, int]:
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
        for segment in segments:
            if allowed_ranks is None or segment.rank in allowed_ranks:
                if blocked_rank >= 0:
                    parts.append(
                        f"[DS4 {PRIVACY_CLASSIFICATIONS[blocked_rank]} content excluded by privacy policy]"
                    )
                    counts.blocked += 1
                    blocked_rank = -1
                parts.append(segment.text)
            else:
                blocked_rank = max(blocked_rank, segment.rank)
        if blocked_rank >= 0:
            parts.append(_blocked_placeholder(blocked_rank))
            counts.blocked += 1
        result = "".join(parts)
        counts.changed = True  # tags were removed at the very least
    if redact:
        result, found = redact_secrets(result)
        if found:
            counts.redactions += found
            counts.changed = True
    return result


def sanitize_text(
    text: str, *, destination: PrivacyDestination, policy: PrivacyPolicy | None = None
) -> tuple[str, int, int]:
    """Sanitize one string for a destination: ``(text, blocked_spans, secret_redactions)``."""
    active = policy or _DEFAULT_POLICY
    counts = _Counts()
    allowed = None if destination == "local" else frozenset(_RANK[level] for level in active.remote_allowed)
    redact = destination == "remote" and active.redact_secrets
    return _sanitize(text, allowed, redact, counts), counts.blocked, counts.redactions


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
# token needs "_", an AWS key needs "K", a "password=..." pair needs "=" or ":". The positions of each
# character are gathered first, then confirmed all at once by C-level ``map``s over ``startswith`` /
# ``endswith`` with bounds, so a text full of "_" or "=" costs no Python call per hit. A confirmation only
# ever over-approximates its rule, and every string with a confirmed hit runs the full rules.
#
# The case-insensitive rules ("bearer", key words) are screened in a folded byte copy of the text: one
# byte per character (anything non-ASCII becomes "?", which no such rule can match: they are re.ASCII),
# ASCII letters lower-cased, the quotes and spaces a key word may be followed by made plain spaces, and
# ":" made "=". So positions are the text's own, and a key word's gap is just a run of spaces.
_SCREEN_FOLD: Final = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ" + b" \t\n\r\f\v\"'" + b":",
    b"abcdefghijklmnopqrstuvwxyz" + b" " * 8 + b"=",
)
_GITHUB_HEADS: Final = ("ghp", "gho", "ghu", "ghs", "ghr")
# What may stand right before a "=" in the folded copy for the key=value rule to match there: a key word
# and up to three spaces, or four spaces (a longer gap: the key word is not looked for, the string is
# flagged anyway).
_KEY_SIGN_HEADS: Final = (
    *(
        f"{word}{' ' * spaces}".encode()
        for word in ("key", "token", "secret", "password")
        for spaces in range(4)
    ),
    b"    ",
)
_BEARER_WORD: Final = re.compile(b"bearer")  # the regex engine's literal search beats bytes.find here


def _positions(text: str, anchor: str) -> list[int]:
    """Every position of the one-character ``anchor`` in ``text``."""
    found: list[int] = []
    add = found.append
    find = text.find
    position = find(anchor)
    while position >= 0:
        add(position)
        position = find(anchor, position + 1)
    return found


def _byte_positions(data: bytes, anchor: int) -> list[int]:
    """Every position of the byte ``anchor`` in ``data``."""
    found: list[int] = []
    add = found.append
    find = data.find
    position = find(anchor)
    while position >= 0:
        add(position)
        position = find(anchor, position + 1)
    return found


def _screen_hits(joined: str, redact: bool) -> Iterator[int]:
    """Positions in ``joined`` around which a rule may match; every real match holds one of them."""
    brackets = _positions(joined, "[")
    yield from compress(brackets, map(_MARKER.match, repeat(joined), brackets))
    if not redact:
        return
    dashes = _positions(joined, "-")
    credential = map(joined.endswith, repeat("sk"), repeat(0), dashes)
    private_key = map(joined.startswith, repeat("-----BEGIN "), dashes)
    yield from compress(dashes, map(or_, credential, private_key))
    underscores = _positions(joined, "_")
    yield from compress(underscores, map(joined.endswith, repeat(_GITHUB_HEADS), repeat(0), underscores))
    capital_ks = _positions(joined, "K")
    yield from compress(capital_ks, map(joined.endswith, repeat("A"), repeat(0), capital_ks))
    folded = joined.encode("ascii", "replace").translate(_SCREEN_FOLD)
    signs = _byte_positions(folded, ord("="))
    yield from compress(signs, map(folded.endswith, repeat(_KEY_SIGN_HEADS), repeat(0), signs))
    for match in _BEARER_WORD.finditer(folded):
        yield match.start()


def _flag_strings(texts: list[str], redact: bool) -> set[int]:
    """Indices of the strings in ``texts`` that the full rules must see; no other one can change.

    The strings are searched concatenated. A confirmation may look across into a neighbour, which can
    only flag a string needlessly, never miss one: every real match lies wholly inside its string.
    """
    hits = _screen_hits("".join(texts), redact)
    first = next(hits, None)
    if first is None:
        return set()
    ends = list(accumulate(map(len, texts)))  # string i spans ends[i - 1]:ends[i]
    return set(map(bisect_right, repeat(ends), chain((first,), hits)))


def _sanitize_payload(  # noqa: PLR0915 (closures keep the hot loops on fast local lookups)
    payload: Any, allowed: frozenset[int] | None, redact: bool, destination: PrivacyDestination
) -> tuple[Any, _Counts]:
    """Build the sanitized payload in one pass: new containers, the caller's strings where unchanged.

    Content strings are placed as they are and remembered; one batch screen afterwards picks the few
    that the full rules must see, and only those are replaced in the new containers.
    """
    counts = _Counts()
    # Content string i sits at owners[i][slots[i]] in the new payload (parallel lists: no tuple each).
    texts: list[str] = []
    owners: list[Any] = []
    slots: list[Any] = []
    add_text = texts.append
    add_owner = owners.append
    add_slot = slots.append
    # _KEY_KIND plus, as _CLEAN_KEY, every key seen to come out of sanitizing unchanged: one lookup a key.
    kinds: dict[str, Any] = dict(_KEY_KIND)  # values: True, False or _CLEAN_KEY
    kind_of = kinds.get
    marker_search = _MARKER.search
    key_cache: dict[str, tuple[str, int, int]] = {}

    def sanitized_key(key: Any, in_content: bool) -> Any:
        text = key if type(key) is str else _key_text(key)
        if not in_content and not ("[" in text and marker_search(text)):
            return text
        # Payloads repeat the same few keys thousands of times: sanitize each distinct key once and
        # replay its counts on every later occurrence.
        cached = key_cache.get(text)
        if cached is None:
            key_counts = _Counts()
            cached = (_sanitize(text, allowed, redact, key_counts), key_counts.blocked, key_counts.redactions)
            key_cache[text] = cached
        sanitized, blocked, redactions = cached
        if sanitized != text:
            counts.changed = True
            counts.blocked += blocked
            counts.redactions += redactions
        elif type(key) is str:
            kinds[key] = _CLEAN_KEY
        return sanitized

    def walk_dict(pairs: Iterable[tuple[Any, Any]], in_content: bool, depth: int) -> dict[Any, Any]:
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        result: dict[Any, Any] = {}
        renamed = False  # once a key is rewritten, any later key may collide with it
        for key, item in pairs:
            child = kind_of(key) if type(key) is str else None
            if child is _CLEAN_KEY:
                child = in_content
            elif child is None:
                child = in_content
                if in_content or type(key) is not str or "[" in key:
                    text_key = sanitized_key(key, in_content)
                    if text_key is not key:
                        renamed = True
                        key = text_key  # noqa: PLW2901
            if renamed and key in result:
                raise PrivacyEnforcementError(
                    "privacy-key-collision", "two payload keys are identical after sanitizing"
                )
            kind = type(item)
            if kind is str:
                if child:
                    add_text(item)
                    add_owner(result)
                    add_slot(key)
                elif "[" in item and marker_search(item):
                    item = _sanitize(item, allowed, redact, counts)  # noqa: PLW2901
            elif kind is dict:
                item = walk_dict(item.items(), child, depth + 1)  # noqa: PLW2901
            elif kind is list:
                item = walk_list(item, child, depth + 1)  # noqa: PLW2901
            elif not (item is None or kind is int or kind is float or kind is bool):
                item = walk(item, child, depth + 1)  # noqa: PLW2901
            result[key] = item
        return result

    def walk_list(values: Iterable[Any], in_content: bool, depth: int) -> list[Any]:
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        items: list[Any] = []
        append = items.append
        for item in values:
            kind = type(item)
            if kind is str:
                if in_content:
                    add_text(item)
                    add_owner(items)
                    add_slot(len(items))
                elif "[" in item and marker_search(item):
                    item = _sanitize(item, allowed, redact, counts)  # noqa: PLW2901
            elif kind is dict:
                item = walk_dict(item.items(), in_content, depth + 1)  # noqa: PLW2901
            elif kind is list:
                item = walk_list(item, in_content, depth + 1)  # noqa: PLW2901
            elif not (item is None or kind is int or kind is float or kind is bool):
                item = walk(item, in_content, depth + 1)  # noqa: PLW2901
            append(item)
        return items

    def walk(value: Any, in_content: bool, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            if in_content or ("[" in value and marker_search(value)):
                return _sanitize(value, allowed, redact, counts)
            return value
        if value is None or kind is int or kind is float or kind is bool:
            return value
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        if kind is dict or isinstance(value, Mapping):
            return walk_dict(value.items(), in_content, depth)
        if kind is list or kind is tuple or isinstance(value, list | tuple):
            return walk_list(value, in_content, depth)
        if isinstance(value, bytes | bytearray | memoryview):
            if destination == "local":
                return value
            counts.blocked += 1
            counts.changed = True
            return _BINARY_PLACEHOLDER
        if isinstance(value, msgspec.Struct):
            return walk(msgspec.to_builtins(value), in_content, depth + 1)
        if isinstance(value, str):  # str subclasses: sanitize their plain text
            return walk(str(value), in_content, depth)
        if isinstance(value, bool | int | float):
            return value
        raise PrivacyEnforcementError(
            "privacy-unsupported-value",
            f"payload holds a value of unsupported type {type(value).__name__[:40]}",
        )

    sanitized = walk(payload, False, 0)
    if texts:
        for index in _flag_strings(texts, redact):
            owners[index][slots[index]] = _sanitize(texts[index], allowed, redact, counts)
    return sanitized, counts


def enforce_payload_privacy(
    payload: Any, *, provider: str, policy: PrivacyPolicy | None = None
) -> PrivacyResult:
    """Sanitize a provider payload for ``provider``; raise :class:`PrivacyEnforcementError` on any failure.

    Strings under content keys (and any string holding a marker) are sanitized; structural keys are kept.
    With the policy disabled the payload is returned as given. The input is never modified.
    """
    active = policy or _DEFAULT_POLICY
    try:
        if not isinstance(provider, str) or not provider.strip():
            raise PrivacyEnforcementError("privacy-enforcement-failed", "provider id is missing")
        destination = privacy_destination(provider, active)
        if not active.enabled:
            return PrivacyResult(
                provider=provider,
                destination=destination,
                payload=payload,
                changed=False,
                blocked_blocks=0,
                secret_redactions=0,
            )
        allowed = (
            None if destination == "local" else frozenset(_RANK[level] for level in active.remote_allowed)
        )
        sanitized, counts = _sanitize_payload(
            payload, allowed, destination == "remote" and active.redact_secrets, destination
        )
    except PrivacyEnforcementError:
        raise
    except Exception as error:
        # Never chain the original: its message may quote payload content.
        raise PrivacyEnforcementError(
            "privacy-enforcement-failed", f"privacy enforcement failed ({type(error).__name__[:40]})"
        ) from None
    return PrivacyResult(
        provider=provider,
        destination=destination,
        payload=sanitized,
        changed=counts.changed,
        blocked_blocks=counts.blocked,
        secret_redactions=counts.redactions,
    )


_DEFAULT_POLICY: Final = PrivacyPolicy()
