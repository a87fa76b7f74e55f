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
its transport. Traversal is one recursive pass over the payload, linear in its size.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping
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
_CREDENTIAL: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})"
)
_KEY_VALUE: Final = re.compile(
    r"(api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|password)"
    r"([\"']?\s*[=:]\s*[\"']?)(?!\[DS4 )[^\s\"',;}\]]+",
    re.IGNORECASE | re.ASCII,
)
_KEY_VALUE_WORDS: Final = ("key", "token", "secret", "password")


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


def redact_secrets(text: str) -> tuple[str, int]:
    """Replace private keys, API credentials, bearer tokens and ``password=...`` values; return the count."""
    lowered = text.lower()
    total = 0
    if "-----begin" in lowered:
        text, found = _PEM.subn(_PRIVATE_KEY_PLACEHOLDER, text)
        total += found
    if "bearer" in lowered:
        text, found = _BEARER.subn(rf"\1 {_TOKEN_PLACEHOLDER}", text)
        total += found
    if "sk-" in lowered or "akia" in lowered or "gh" in lowered:
        text, found = _CREDENTIAL.subn(_CREDENTIAL_PLACEHOLDER, text)
        total += found
    if any(word in lowered for word in _KEY_VALUE_WORDS):
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


# Substrings (lower case) that every marker or secret pattern contains. A content string holding none of
# them cannot change, so only strings flagged by this cheap batch scan run the full regexes.
_SCREEN_NEEDLES: Final = (
    "[ds4:",
    "sk-",
    "akia",
    "-----begin",
    "bearer",
    "api",
    "token",
    "secret",
    "password",
)
_GITHUB_SCREEN: Final = re.compile(r"gh[pousr]_")


class _Walker:
    """Copies the payload; content strings are screened in one batch after the copy is built."""

    __slots__ = ("allowed", "counts", "destination", "key_cache", "pending", "redact")

    def __init__(self, allowed: frozenset[int] | None, redact: bool, destination: PrivacyDestination) -> None:
        self.allowed = allowed
        self.redact = redact
        self.destination = destination
        self.counts = _Counts()
        self.key_cache: dict[str, tuple[str, int, int]] = {}
        # (container, key or index, text): a content string placed in the copy, maybe to be replaced.
        self.pending: list[tuple[Any, Any, str]] = []

    def key(self, key: Any, in_content: bool) -> str:
        text = key if type(key) is str else _key_text(key)
        if not in_content and not ("[" in text and _MARKER.search(text)):
            return text
        # Payloads repeat the same few keys thousands of times: sanitize each distinct key once and
        # replay its counts on every later occurrence.
        cached = self.key_cache.get(text)
        if cached is None:
            counts = _Counts()
            cached = (_sanitize(text, self.allowed, self.redact, counts), counts.blocked, counts.redactions)
            self.key_cache[text] = cached
        sanitized, blocked, redactions = cached
        if sanitized != text:
            self.counts.changed = True
            self.counts.blocked += blocked
            self.counts.redactions += redactions
        return sanitized

    def walk(self, value: Any, in_content: bool, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            if in_content or ("[" in value and _MARKER.search(value)):
                return _sanitize(value, self.allowed, self.redact, self.counts)
            return value
        if value is None or kind is int or kind is float or kind is bool:
            return value
        if depth >= PRIVACY_MAX_DEPTH:
            raise PrivacyEnforcementError("privacy-payload-too-deep", "payload nesting exceeds the limit")
        if kind is dict or isinstance(value, Mapping):
            result: dict[str, Any] = {}
            remember = self.pending.append
            key_kind = _KEY_KIND.get
            for key, item in value.items():
                child_in_content = key_kind(key) if type(key) is str else None
                if child_in_content is None:
                    child_in_content = in_content
                    text_key = self.key(key, in_content)
                else:
                    text_key = key
                if text_key in result:
                    raise PrivacyEnforcementError(
                        "privacy-key-collision", "two payload keys are identical after sanitizing"
                    )
                if type(item) is str:
                    result[text_key] = item
                    if child_in_content:
                        remember((result, text_key, item))
                    elif "[" in item and _MARKER.search(item):
                        result[text_key] = _sanitize(item, self.allowed, self.redact, self.counts)
                else:
                    result[text_key] = self.walk(item, child_in_content, depth + 1)
            return result
        if kind is list or kind is tuple or isinstance(value, list | tuple):
            items: list[Any] = []
            pending = self.pending
            for item in value:
                if type(item) is str:
                    if in_content:
                        pending.append((items, len(items), item))
                    elif "[" in item and _MARKER.search(item):
                        item = _sanitize(item, self.allowed, self.redact, self.counts)  # noqa: PLW2901
                    items.append(item)
                else:
                    items.append(self.walk(item, in_content, depth + 1))
            return items
        if isinstance(value, bytes | bytearray | memoryview):
            if self.destination == "local":
                return value
            self.counts.blocked += 1
            self.counts.changed = True
            return _BINARY_PLACEHOLDER
        if isinstance(value, msgspec.Struct):
            return self.walk(msgspec.to_builtins(value), in_content, depth + 1)
        if isinstance(value, str):  # str subclasses: sanitize their plain text
            return self.walk(str(value), in_content, depth)
        if isinstance(value, bool | int | float):
            return value
        raise PrivacyEnforcementError(
            "privacy-unsupported-value",
            f"payload holds a value of unsupported type {type(value).__name__[:40]}",
        )

    def finish(self) -> None:
        """Sanitize, in place in the copy, every pending content string the batch screen flags."""
        pending = self.pending
        if not pending:
            return
        texts = [entry[2] for entry in pending]
        joined = "\0".join(texts)
        lowered = joined.lower()
        if len(lowered) != len(joined):  # a few non-ASCII letters grow when lowered
            lowered = "\0".join(text.lower() for text in texts)
        offsets: list[int] = []
        position = 0
        for text in texts:
            offsets.append(position)
            position += len(text) + 1
        lengths = [len(text) for text in texts]
        flagged: set[int] = set()
        for needle in _SCREEN_NEEDLES:
            found = lowered.find(needle)
            while found >= 0:
                index = bisect_right(offsets, found) - 1
                flagged.add(index)
                found = lowered.find(needle, offsets[index] + lengths[index] + 1)
        for match in _GITHUB_SCREEN.finditer(lowered):
            flagged.add(bisect_right(offsets, match.start()) - 1)
        for index in flagged:
            container, slot, text = pending[index]
            container[slot] = _sanitize(text, self.allowed, self.redact, self.counts)


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
        walker = _Walker(allowed, destination == "remote" and active.redact_secrets, destination)
        sanitized = walker.walk(payload, False, 0)
        walker.finish()
    except PrivacyEnforcementError:
        raise
    except Exception as error:
        # Never chain the original: its message may quote payload content.
        raise PrivacyEnforcementError(
            "privacy-enforcement-failed", f"privacy enforcement failed ({type(error).__name__[:40]})"
        ) from None
    counts = walker.counts
    return PrivacyResult(
        provider=provider,
        destination=destination,
        payload=sanitized,
        changed=counts.changed,
        blocked_blocks=counts.blocked,
        secret_redactions=counts.redactions,
    )


_DEFAULT_POLICY: Final = PrivacyPolicy()
