"""The prompt size a provider reported for one call, read from every usage shape we meet.

Shapes (the prompt is what the provider counted as the request's input, cached or not):

- Pi (``input``, ``output``, ``cacheRead``, ``cacheWrite``, optional ``totalTokens``): Pi counts cached
  input apart, so the prompt is ``input + cacheRead + cacheWrite``. Older Pi files have no
  ``totalTokens``; the sum is still unambiguous. With ``totalTokens``, a writer that folded the cache
  counts into ``input`` (``totalTokens == input + output``) is told apart from Pi's own convention, and a
  total that fits neither makes the record ambiguous.
- Anthropic (``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``): cached
  input is apart too, so the prompt is the sum; a ``null`` cache count is 0, as the API writes it.
- OpenAI Chat Completions (``prompt_tokens``, ``prompt_tokens_details.cached_tokens``) and Responses
  (``input_tokens``, ``input_tokens_details.cached_tokens``): the cached part is already inside the
  prompt count, so the prompt is ``prompt_tokens`` / ``input_tokens``.

A record that cannot be read gives a code, never an exception: usage comes from files and providers we
do not control, and a bad record must cost one calibration sample, not the host's turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

__all__ = ["USAGE_READING_CODES", "UsageReading", "read_reported_input"]

# No model reads ten million tokens in one call: a count above this is a broken writer, not a tokenizer.
_MAX_INPUT_TOKENS: Final = 10_000_000

USAGE_READING_CODES: Final = (
    "usage-ambiguous",
    "usage-count-invalid",
    "usage-count-negative",
    "usage-count-out-of-range",
    "usage-input-missing",
    "usage-not-a-record",
    "usage-zero",
)


class UsageReading(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """What one usage record says about the prompt: ``input_tokens``, or ``code`` saying why not.

    ``shape`` names the convention recognised (``pi``, ``anthropic``, ``openai-chat``,
    ``openai-responses``, ``input-tokens``), ``cached_tokens`` how much of the prompt came from a cache.
    Numbers and names only, never content.
    """

    shape: str
    input_tokens: int | None = None
    cached_tokens: int = 0
    code: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


class _UnreadableError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _count(record: Mapping[str, object], key: str, *, required: bool = False) -> int:
    """A token count: an int >= 0; missing or ``null`` is 0 unless ``required``."""
    value = record.get(key)
    if value is None:
        if required:
            raise _UnreadableError("usage-input-missing")
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _UnreadableError("usage-count-invalid")
    if value < 0:
        raise _UnreadableError("usage-count-negative")
    return value


def _cached_detail(record: Mapping[str, object], key: str) -> int:
    details = record.get(key)
    if details is None:
        return 0
    if not isinstance(details, Mapping):
        raise _UnreadableError("usage-count-invalid")
    return _count(details, "cached_tokens")


def _pi(record: Mapping[str, object]) -> tuple[int, int]:
    fresh = _count(record, "input", required=True)
    cached = _count(record, "cacheRead") + _count(record, "cacheWrite")
    if "totalTokens" not in record or not cached:
        return fresh + cached, cached
    output = _count(record, "output")
    total = _count(record, "totalTokens", required=True)
    if total == fresh + output + cached:
        return fresh + cached, cached
    if total == fresh + output and cached <= fresh:  # the writer folded the cache counts into input
        return fresh, cached
    raise _UnreadableError("usage-ambiguous")


def _anthropic(record: Mapping[str, object]) -> tuple[int, int]:
    fresh = _count(record, "input_tokens", required=True)
    cached = _count(record, "cache_read_input_tokens") + _count(record, "cache_creation_input_tokens")
    return fresh + cached, cached


def _openai(record: Mapping[str, object], key: str, details: str) -> tuple[int, int]:
    prompt = _count(record, key, required=True)
    cached = _cached_detail(record, details)
    if cached > prompt:
        raise _UnreadableError("usage-ambiguous")
    return prompt, cached


def _shape(record: Mapping[str, object]) -> str:
    if "prompt_tokens" in record:
        return "openai-chat"
    if "input_tokens_details" in record:
        return "openai-responses"
    if "cache_creation_input_tokens" in record or "cache_read_input_tokens" in record:
        return "anthropic"
    if "input_tokens" in record:
        return "input-tokens"  # no cache fields: Anthropic and OpenAI Responses mean the same here
    return "pi"


def read_reported_input(usage: object) -> UsageReading:
    """The prompt tokens of one call from its usage record (see the module for the shapes). Never raises."""
    if not isinstance(usage, Mapping):
        return UsageReading(shape="unknown", code="usage-not-a-record")
    shape = _shape(usage)
    try:
        if shape == "openai-chat":
            prompt, cached = _openai(usage, "prompt_tokens", "prompt_tokens_details")
        elif shape == "openai-responses":
            prompt, cached = _openai(usage, "input_tokens", "input_tokens_details")
        elif shape in ("anthropic", "input-tokens"):
            prompt, cached = _anthropic(usage)
        else:
            prompt, cached = _pi(usage)
    except _UnreadableError as problem:
        return UsageReading(shape=shape, code=problem.code)
    if prompt == 0:  # aborted or failed calls report zero usage: no signal
        return UsageReading(shape=shape, code="usage-zero")
    if prompt > _MAX_INPUT_TOKENS:
        return UsageReading(shape=shape, code="usage-count-out-of-range")
    return UsageReading(shape=shape, input_tokens=prompt, cached_tokens=cached)
