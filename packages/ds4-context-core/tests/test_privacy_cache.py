"""The per-message privacy cache: the same results as without it, never across policies, never a failure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_privacy_perf_contract import TEXT

from ds4_context_core import PrivacyEnforcementError
from ds4_context_core._exceptions import PrivacyPolicyError
from ds4_context_core.privacy import PrivacyCache, PrivacyPolicy, PrivacyResult, enforce_payload_privacy

SECRET = "sk-proj-Zq81mWx0aLp2Kd7Tr4Nv9Bc6"
FIELDS = ("provider", "destination", "payload", "changed", "blocked_blocks", "secret_redactions")


def outcome(result: PrivacyResult) -> list[Any]:
    return [getattr(result, name) for name in FIELDS]


def history(count: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful coding assistant."}]
    for index in range(count):
        text = f"step {index}: read src/app_{index}.py and run the tests"
        if index % 4 == 1:
            text += f" with {SECRET}"
        if index % 5 == 2:
            text += " [ds4:sensitive]the customer list[/ds4:sensitive]"
        messages.append({"role": "user" if index % 2 else "assistant", "content": text})
        if index % 3 == 0:
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "plan the edit", "signature": "EqQBCkYIBRgC"},
                        {"type": "thinking", "thinking": f"the key is {SECRET}", "signature": "EqQBCkYIBRgD"},
                        {
                            "type": "tool_use",
                            "id": f"t{index}",
                            "name": "read",
                            "input": {"password": "hunter2x9"},
                        },
                    ],
                }
            )
    return messages


def payload_of(messages: list[dict[str, Any]]) -> dict[str, Any]:
    tools = [{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}]
    return {"model": "claude", "system": "be brief", "messages": messages, "tools": tools, "max_tokens": 64}


@pytest.mark.parametrize("provider", ["anthropic", "ollama"])
def test_a_growing_history_gives_the_same_results_as_without_a_cache(provider: str) -> None:
    cache = PrivacyCache()
    messages = history(40)
    for size in (10, 11, 25, 25, 41):
        payload = payload_of(messages[:size])
        cached = enforce_payload_privacy(payload, provider=provider, cache=cache)
        assert outcome(cached) == outcome(enforce_payload_privacy(payload, provider=provider))
    assert cache.hits > 0
    assert SECRET not in json.dumps(cached.payload) or provider == "ollama"


def test_messages_seen_before_are_not_screened_again() -> None:
    cache = PrivacyCache()
    messages = history(30)
    enforce_payload_privacy(payload_of(messages[:20]), provider="openai", cache=cache)
    hits, misses = cache.hits, cache.misses
    enforce_payload_privacy(payload_of(messages[:22]), provider="openai", cache=cache)
    tools = 1  # the tools list is a content list too: its one item is seen again
    assert cache.hits - hits == 20 + tools
    assert cache.misses - misses == 2


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (PrivacyPolicy(redact_secrets=False), PrivacyPolicy()),
        (PrivacyPolicy(), PrivacyPolicy(redact_secrets=False)),
        (PrivacyPolicy(remote_allowed=("normal", "internal", "sensitive")), PrivacyPolicy()),
        (PrivacyPolicy(), PrivacyPolicy(local_providers=("anthropic",))),
    ],
)
def test_a_changed_policy_never_reuses_an_entry(first: PrivacyPolicy, second: PrivacyPolicy) -> None:
    cache = PrivacyCache()
    payload = payload_of(history(12))
    enforce_payload_privacy(payload, provider="anthropic", policy=first, cache=cache)
    hits = cache.hits
    cached = enforce_payload_privacy(payload, provider="anthropic", policy=second, cache=cache)
    assert cache.hits == hits
    assert outcome(cached) == outcome(enforce_payload_privacy(payload, provider="anthropic", policy=second))
    assert outcome(cached) != outcome(enforce_payload_privacy(payload, provider="anthropic", policy=first))


def test_a_failure_is_never_cached_and_still_fails_closed() -> None:
    cache = PrivacyCache()
    good = history(6)
    colliding = {"role": "user", "content": [{"x": "a", "[ds4:internal]x[/ds4:internal]": "b"}]}
    for _ in range(2):
        with pytest.raises(PrivacyEnforcementError) as raised:
            enforce_payload_privacy(payload_of([*good, colliding]), provider="openai", cache=cache)
        assert raised.value.code == "privacy-key-collision"
        assert len(cache) == 0  # not even the good messages walked in the same call
    assert cache.hits == 0
    # A set cannot be sent; a list that reads the same once serialised is no reason to send it.
    listed = {"role": "user", "content": ["a", "b"]}
    enforce_payload_privacy(payload_of([listed]), provider="openai", cache=cache)
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy(
            payload_of([{"role": "user", "content": {"a", "b"}}]), provider="openai", cache=cache
        )
    assert raised.value.code == "privacy-unsupported-value"


def test_a_result_changed_by_its_caller_does_not_change_the_next_one() -> None:
    cache = PrivacyCache()
    payload = payload_of(history(5))
    first = enforce_payload_privacy(payload, provider="openai", cache=cache)
    expected = outcome(enforce_payload_privacy(payload, provider="openai"))
    first.payload["messages"][1]["content"] = "changed by the transport"
    first.payload["messages"][2]["content"].clear()
    for _ in range(2):
        again = enforce_payload_privacy(payload, provider="openai", cache=cache)
        assert outcome(again) == expected
        again.payload["messages"][1]["content"] = "changed again"


def test_messages_of_other_types_are_sanitized_every_time_and_not_kept() -> None:
    class Text(str):
        pass

    cache = PrivacyCache()
    odd = [
        ("user", f"tuple {SECRET}"),  # a tuple is sent as a list
        {"role": "user", "content": Text(f"a str subclass {SECRET}")},
        {"role": "user", "content": [{"type": "image", "data": b"\x89PNG"}]},
    ]
    hits = []
    for _ in range(2):
        cached = enforce_payload_privacy(payload_of(odd), provider="openai", cache=cache)
        assert outcome(cached) == outcome(enforce_payload_privacy(payload_of(odd), provider="openai"))
        hits.append(cache.hits)
    # Kept: the tuple (under its own key, not a list's) and the tools list's item; not the other two.
    assert (len(cache), hits) == (2, [0, 2])
    assert SECRET not in json.dumps(cached.payload)


def test_the_cache_is_bounded_by_entries_and_bytes() -> None:
    by_count = PrivacyCache(max_entries=5)
    enforce_payload_privacy(payload_of(history(20)), provider="openai", cache=by_count)
    assert len(by_count) == 5
    by_bytes = PrivacyCache(max_bytes=2_000)
    enforce_payload_privacy(payload_of(history(20)), provider="openai", cache=by_bytes)
    assert 0 < by_bytes.stored_bytes <= 2_000
    # The most recent entries stay: the last messages are found again.
    hits = by_count.hits
    enforce_payload_privacy(payload_of(history(20)[-3:]), provider="openai", cache=by_count)
    assert by_count.hits - hits >= 2
    by_count.clear()
    assert (len(by_count), by_count.stored_bytes) == (0, 0)


@pytest.mark.parametrize("bounds", [{"max_entries": 0}, {"max_bytes": -1}, {"max_entries": 1.5}])
def test_bad_bounds_are_refused(bounds: dict[str, Any]) -> None:
    with pytest.raises(PrivacyPolicyError) as raised:
        PrivacyCache(**bounds)
    assert raised.value.code == "privacy-policy-invalid"


def test_a_disabled_policy_or_a_payload_without_lists_passes_through() -> None:
    cache = PrivacyCache()
    payload = payload_of(history(3))
    off = enforce_payload_privacy(
        payload, provider="openai", policy=PrivacyPolicy(enabled=False), cache=cache
    )
    assert off.payload is payload
    plain = {"model": "m", "prompt": f"use {SECRET}"}
    assert outcome(enforce_payload_privacy(plain, provider="openai", cache=cache)) == outcome(
        enforce_payload_privacy(plain, provider="openai")
    )
    assert len(cache) == 0


MESSAGE = st.one_of(
    TEXT.map(lambda text: {"role": "user", "content": text}),
    st.lists(TEXT, max_size=3).map(
        lambda texts: {"role": "assistant", "content": [{"type": "text", "text": t} for t in texts]}
    ),
    st.tuples(TEXT, TEXT).map(
        lambda pair: {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": pair[0], "signature": "s1"}],
            "note": pair[1],
        }
    ),
    st.dictionaries(TEXT, TEXT, max_size=3).map(
        lambda args: {"role": "assistant", "content": [{"type": "tool_use", "input": args}]}
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.lists(MESSAGE, max_size=6),
    second=st.lists(MESSAGE, max_size=6),
    provider=st.sampled_from(["openai", "ollama"]),
    redact=st.booleans(),
)
def test_cached_results_equal_uncached_ones(
    first: list[dict[str, Any]], second: list[dict[str, Any]], provider: str, redact: bool
) -> None:
    cache = PrivacyCache()
    policy = PrivacyPolicy(redact_secrets=redact)
    for messages in (first, [*first, *second], [*second, *first]):
        payload = {"model": "m", "messages": messages}
        failed = None
        try:
            expected = outcome(enforce_payload_privacy(payload, provider=provider, policy=policy))
        except PrivacyEnforcementError as error:
            failed = error.code
        if failed is not None:
            with pytest.raises(PrivacyEnforcementError) as raised:
                enforce_payload_privacy(payload, provider=provider, policy=policy, cache=cache)
            assert raised.value.code == failed
            continue
        cached = enforce_payload_privacy(payload, provider=provider, policy=policy, cache=cache)
        assert outcome(cached) == expected
