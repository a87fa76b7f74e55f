"""Crashes the fuzzer found outside this harness's area, pinned until the engine fixes them (issue 22).

Each test is ``xfail(strict=True)``: it fails today, and the day the engine is fixed it passes, which
fails the run until the marker is removed.
"""

from __future__ import annotations

import msgspec
import pytest
from fuzz_targets import _transports, answer_server, completion_over_http

from ds4_context_engine.providers import ProviderResponseError

DEEP_ANSWER = b"[" * 50_000 + b"1" + b"]" * 50_000


@pytest.mark.xfail(
    strict=True, raises=RecursionError, reason="issue 22: complete() raises RecursionError on a deep 200 body"
)
def test_complete_never_raises_on_a_deeply_nested_answer() -> None:
    with answer_server() as server:
        completion_over_http(server, DEEP_ANSWER)


@pytest.mark.xfail(
    strict=True,
    raises=msgspec.ValidationError,
    reason="issue 22: parse_response lets msgspec.ValidationError out for a body that is not an object",
)
@pytest.mark.parametrize("transport", range(3), ids=["openai-chat", "openai-responses", "anthropic"])
def test_parse_response_refuses_a_non_object_with_provider_response_error(transport: int) -> None:
    with pytest.raises(ProviderResponseError):
        _transports()[transport].parse_response(None)
