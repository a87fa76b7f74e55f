"""Crashes the fuzzer found in the engine (issue 22), each kept as a regression test.

Every one raised before its fix: a RecursionError or a raw msgspec error out of an API documented to
report problems with codes instead.
"""

from __future__ import annotations

import pytest
from fuzz_targets import _transports, answer_server, completion_over_http

from ds4_context_engine.pi import build_pi_context, read_pi_session_bytes
from ds4_context_engine.providers import ProviderResponseError

DEEP_ANSWER = b"[" * 50_000 + b"1" + b"]" * 50_000


def test_complete_never_raises_on_a_deeply_nested_answer() -> None:
    with answer_server() as server:
        completion_over_http(server, DEEP_ANSWER)


@pytest.mark.parametrize("transport", range(3), ids=["openai-chat", "openai-responses", "anthropic"])
def test_parse_response_refuses_a_non_object_with_provider_response_error(transport: int) -> None:
    with pytest.raises(ProviderResponseError):
        _transports()[transport].parse_response(None)


_PI_HEADER = b'{"type":"session","version":3,"id":"s1","timestamp":"2026-03-02T09:00:00.000Z","cwd":"/tmp"}\n'


def _pi_message(message: bytes) -> bytes:
    return (
        b'{"type":"message","id":"a1","parentId":null,"timestamp":"2026-03-02T09:00:01.000Z","message":'
        + message
        + b"}\n"
    )


def test_pi_reader_reports_a_list_role_as_an_issue() -> None:
    session = read_pi_session_bytes(_PI_HEADER + _pi_message(b'{"role":["user"],"content":"hi"}'))
    context = build_pi_context(session)
    assert "pi-message-role-unknown" in {issue.code for issue in context.issues}


def test_pi_reader_reports_a_deeply_nested_line_as_an_issue() -> None:
    deep = b"[" * 50_000 + b"]" * 50_000
    session = read_pi_session_bytes(_PI_HEADER + _pi_message(b'{"role":"user","content":' + deep + b"}"))
    build_pi_context(session)
    assert "pi-line-too-deep" in {issue.code for issue in session.issues}
