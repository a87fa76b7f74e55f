"""Sanitized messages by content: privacy over one history, call after call, screens only what is new.

A run loop sends its whole history at every model call, and enforcing privacy on it again costs as much
as the first time. :class:`PrivacyCache` keeps, per message (each item of a top-level content list of
the payload, such as ``messages``, ``input``, ``system`` or ``tools``), the sanitized copy and its counts,
keyed by the message's exact serialised form and by what decides the result: the classification ranks
the destination may receive, whether secrets are redacted and whether binary content may pass (a policy
or destination that differs never shares an entry). A message seen before is handed out as a
fresh copy of its containers (its strings are shared: they are immutable); only the others are walked
and screened, in one batch as without a cache.

An entry is stored only after the whole payload was sanitized without an error: a failure (which the
caller turns into :class:`PrivacyEnforcementError`, nothing sent) leaves nothing behind. A message that
holds anything but the exact built-in types (a custom mapping, a subclass, an object) or holds bytes is
walked every time. The cache is bounded by entries and by bytes (of the serialised messages, which is
about their size), least recently used first.
"""

from __future__ import annotations

import marshal
import threading
from collections import OrderedDict
from typing import Any, Final, NamedTuple

from ds4_context_core._exceptions import PrivacyPolicyError

from ._walk import (
    _KEY_KIND,
    LOCAL_ONLY_KEY,
    LOCAL_ONLY_VALUE_KEY,
    _Counts,
    _Walk,
    copy_containers,
    sanitize_payload,
)

__all__ = ["PrivacyCache", "sanitize_payload_cached"]

DEFAULT_CACHE_ENTRIES: Final = 8192
DEFAULT_CACHE_BYTES: Final = 32 * 1024 * 1024

# A message's key is its exact serialised form: ``marshal`` version 0 writes only the exact built-in types
# (a subclass, an object, a custom mapping raise), tells int, float and bool, list and tuple, str and
# bytes apart, keeps key order, and writes no references or interning that would make equal values
# differ. Two messages share an entry only when these bytes are equal (a dict compares them whole).
_MARSHAL_VERSION: Final = 0


class _Entry(NamedTuple):
    value: Any  # the sanitized message; unused when dropped
    dropped: bool  # a signed block privacy would change: left out of its list
    changed: bool
    blocked: int
    redactions: int
    size: int  # the bytes of the serialised message, for the bound


class PrivacyCache:
    """A bounded cache of sanitized messages for :func:`~ds4_context_core.privacy.enforce_payload_privacy`.

    Pass the same cache to every call that sends a growing history (one per transport): each message
    already seen under the same destination and policy is taken from it. ``max_entries`` and
    ``max_bytes`` (of the cached messages, serialised) bound it; the least recently used entries
    go first. Safe to share between threads. The results are equal to those without a cache.
    """

    def __init__(
        self, *, max_entries: int = DEFAULT_CACHE_ENTRIES, max_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        for value in (max_entries, max_bytes):
            if type(value) is not int or value < 1:
                raise PrivacyPolicyError(
                    "privacy-policy-invalid", "privacy cache bounds must be positive integers"
                )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"PrivacyCache(entries={len(self._entries)}, bytes={self._bytes}, "
            f"hits={self.hits}, misses={self.misses})"
        )

    @property
    def stored_bytes(self) -> int:
        """The bytes of the messages held now, serialised."""
        return self._bytes

    def clear(self) -> None:
        """Forget every entry (the hit and miss counts stay)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _lookup(self, keys: list[tuple[Any, ...] | None]) -> list[_Entry | None]:
        """The entry of each key (None for a key that is None or not held), each found one now the most
        recently used."""
        found: list[_Entry | None] = []
        with self._lock:
            entries = self._entries
            for key in keys:
                entry = None
                if key is not None:
                    entry = entries.get(key)
                    if entry is None:
                        self.misses += 1
                    else:
                        entries.move_to_end(key)
                        self.hits += 1
                found.append(entry)
        return found

    def _put(self, key: tuple[Any, ...], entry: _Entry) -> None:
        if entry.size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            self._entries[key] = entry
            self._bytes += entry.size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _key, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.size


def _key_bytes(value: Any) -> bytes | None:
    """``value`` serialised exactly (see :data:`_MARSHAL_VERSION`), or None when it cannot be."""
    try:
        return marshal.dumps(value, _MARSHAL_VERSION)
    except (ValueError, TypeError, RecursionError, OverflowError):
        return None


# Keys that make the top level itself special (a signed block, a local-only wrapper): walked as a whole.
_TOP_LEVEL_WALKED: Final = ("signature", "data", LOCAL_ONLY_KEY, LOCAL_ONLY_VALUE_KEY)


def _cacheable(payload: dict[Any, Any]) -> bool:
    """Whether the top level is one the cached path rebuilds as the walk would: plain keys, not signed,
    no local-only wrapper."""
    for key in payload:
        if type(key) is not str or "[" in key:
            return False
    return not any(key in payload for key in _TOP_LEVEL_WALKED)


def sanitize_payload_cached(
    payload: Any, allowed: frozenset[int] | None, redact: bool, local: bool, cache: PrivacyCache
) -> tuple[Any, bool, int, int]:
    """:func:`sanitize_payload` with each item of the top-level content lists taken from ``cache`` when
    it was sanitized before under the same ranks, redaction and destination."""
    if type(payload) is not dict or not _cacheable(payload):
        return sanitize_payload(payload, allowed, redact, local)
    lists = [key for key, value in payload.items() if type(value) is list and _KEY_KIND.get(key) is True]
    if not lists:
        return sanitize_payload(payload, allowed, redact, local)
    rest = {key: ([] if key in lists else value) for key, value in payload.items()}
    sanitized, changed, blocked, redactions = sanitize_payload(rest, allowed, redact, local)
    fingerprint = (allowed, redact, local)
    # Per list: its items as (entry from the cache or None, cache key or None, index among the misses).
    plans: dict[str, list[tuple[_Entry | None, tuple[Any, ...] | None, int]]] = {}
    misses: list[Any] = []
    sizes: list[int] = []
    for name in lists:
        values = payload[name]
        exact = list(map(_key_bytes, values))
        keys = [None if raw is None else (fingerprint, raw) for raw in exact]
        plan: list[tuple[_Entry | None, tuple[Any, ...] | None, int]] = []
        for item, raw, key, entry in zip(values, exact, keys, cache._lookup(keys), strict=True):
            if entry is None:
                plan.append((None, key, len(misses)))
                misses.append(item)
                sizes.append(0 if raw is None else len(raw))
            else:
                plan.append((entry, key, -1))
        plans[name] = plan
    walked: list[tuple[list[Any], _Counts]] = []
    if misses:
        walk = _Walk(allowed, redact, local, False)
        walked = walk.walk_each(misses, True, 1)
        walk.finish()
    fresh: list[tuple[tuple[Any, ...], _Entry]] = []
    for name, plan in plans.items():
        items: list[Any] = []
        for cached, key, miss in plan:
            if cached is None:
                holder, counts = walked[miss]
                value = holder[0] if holder else None
                entry = _Entry(
                    value, not holder, counts.changed, counts.blocked, counts.redactions, sizes[miss]
                )
                if key is not None and not counts.binary:  # bytes stand for any buffer in the key
                    fresh.append((key, entry._replace(value=copy_containers(value))))
                if holder:
                    items.append(value)
            else:
                entry = cached
                if not entry.dropped:
                    items.append(copy_containers(entry.value))
            changed = changed or entry.changed
            blocked += entry.blocked
            redactions += entry.redactions
        sanitized[name] = items
    for key, entry in fresh:  # only now: the whole payload was sanitized without an error
        cache._put(key, entry)
    return sanitized, changed, blocked, redactions
