"""Reading the prompt size out of every usage shape Pi and the providers write."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ds4_context_core.tokens import USAGE_READING_CODES, read_reported_input


@pytest.mark.parametrize(
    ("usage", "shape", "tokens", "cached"),
    [
        # newer Pi: cached input apart, totalTokens the sum of every count
        (
            {"input": 3, "output": 200, "cacheRead": 41_000, "cacheWrite": 900, "totalTokens": 42_103},
            "pi",
            41_903,
            41_900,
        ),
        # older Pi: no totalTokens; input + cacheRead + cacheWrite is still the whole prompt
        ({"input": 3, "output": 200, "cacheRead": 41_000, "cacheWrite": 900}, "pi", 41_903, 41_900),
        ({"input": 1_000, "output": 60}, "pi", 1_000, 0),
        # a writer that folded the cache counts into input: totalTokens tells
        (
            {"input": 1_000, "output": 60, "cacheRead": 700, "cacheWrite": 200, "totalTokens": 1_060},
            "pi",
            1_000,
            900,
        ),
        # Anthropic's API: cache counts apart, null when unused
        (
            {"input_tokens": 12, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 9_000},
            "anthropic",
            9_312,
            9_300,
        ),
        (
            {"input_tokens": 12, "cache_creation_input_tokens": None, "cache_read_input_tokens": None},
            "anthropic",
            12,
            0,
        ),
        # OpenAI Chat Completions and Responses: the cached part is inside the prompt count
        (
            {
                "prompt_tokens": 5_000,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 4_096},
            },
            "openai-chat",
            5_000,
            4_096,
        ),
        (
            {"input_tokens": 5_000, "output_tokens": 20, "input_tokens_details": {"cached_tokens": 4_096}},
            "openai-responses",
            5_000,
            4_096,
        ),
        ({"input_tokens": 800, "output_tokens": 20}, "input-tokens", 800, 0),
    ],
)
def test_every_shape_gives_the_whole_prompt(usage, shape, tokens, cached):
    reading = read_reported_input(usage)
    assert reading.ok, reading.code
    assert (reading.shape, reading.input_tokens, reading.cached_tokens) == (shape, tokens, cached)


@pytest.mark.parametrize(
    ("usage", "code"),
    [
        ({"input": -5, "output": 1}, "usage-count-negative"),
        ({"input": 900, "cacheRead": -1, "output": 10}, "usage-count-negative"),
        ({"input_tokens": 10, "cache_read_input_tokens": -3}, "usage-count-negative"),
        ({"prompt_tokens": -1}, "usage-count-negative"),
        ({"output": 60, "cacheRead": 0, "totalTokens": 60}, "usage-input-missing"),
        ({"input": None, "output": 60}, "usage-input-missing"),
        ({"cache_read_input_tokens": 50}, "usage-input-missing"),
        ({"input": True, "output": 1}, "usage-count-invalid"),
        ({"input": "1200"}, "usage-count-invalid"),
        ({"input": 1200.0}, "usage-count-invalid"),
        ({"prompt_tokens": 10, "prompt_tokens_details": [1]}, "usage-count-invalid"),
        ({"input": 900, "output": 10, "cacheRead": 500, "totalTokens": 7}, "usage-ambiguous"),
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}, "usage-ambiguous"),
        ({"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}, "usage-zero"),
        ({"input": 10**12, "output": 1}, "usage-count-out-of-range"),
        ([1200, 60], "usage-not-a-record"),
        (None, "usage-not-a-record"),
    ],
)
def test_bad_records_get_a_code_not_an_exception(usage, code):
    reading = read_reported_input(usage)
    assert code in USAGE_READING_CODES
    assert (reading.ok, reading.input_tokens, reading.code) == (False, None, code)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=10,
)
_keys = st.sampled_from(
    [
        "input",
        "output",
        "cacheRead",
        "cacheWrite",
        "totalTokens",
        "input_tokens",
        "prompt_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "prompt_tokens_details",
        "input_tokens_details",
    ]
)


@given(st.dictionaries(_keys, _json, max_size=6) | _json)
def test_no_record_raises_and_a_count_is_always_positive(usage):
    reading = read_reported_input(usage)
    if reading.ok:
        assert isinstance(reading.input_tokens, int)
        assert 0 < reading.input_tokens <= 10_000_000
        assert 0 <= reading.cached_tokens <= reading.input_tokens
    else:
        assert reading.code in USAGE_READING_CODES
