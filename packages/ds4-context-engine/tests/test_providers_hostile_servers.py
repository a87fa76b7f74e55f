"""Provider answers from misbehaving servers on 127.0.0.1: bombs, floods, bad encodings, slow drips.

Each case is bounded: the decoded size (memory, measured with tracemalloc), the wall clock (the call
returns a ``timeout`` while the server still has bytes left to drip) or both, and none of them raises.
"""

import gzip
import itertools
import json
import tracemalloc
import zlib

import anyio
import httpx
import pytest
from _http_servers import Reply, ScriptedServer
from _provider_fixtures import OPENAI_CHAT_ANSWER, conversation, model, run_closing

from ds4_context_core.adapter import CompletionCompleted, CompletionFallback, CompletionRequest
from ds4_context_engine.providers import (
    DISCOVERY_RESPONSE_MAX_BYTES,
    PROVIDER_RESPONSE_MAX_BYTES,
    LocalProviderDiscovery,
    OpenAIChatTransport,
    parse_local_provider,
)
from ds4_context_engine.runtime import FALLBACK_DEFAULT_DEADLINE_S, FallbackRouter, ProviderRuntime

MIB = 1024 * 1024
BOMB_DECODED_BYTES = 128 * MIB  # four times the cap; about 128 KiB on the wire


def _gzip_bomb(decoded_bytes: int) -> bytes:
    """A gzip body of ``decoded_bytes`` spaces, built without holding them in memory."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b" " * MIB
    parts = [packer.compress(piece) for _ in range(decoded_bytes // MIB)]
    parts.append(packer.flush())
    return b"".join(parts)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _gzip_bomb(BOMB_DECODED_BYTES)


def _chat(server, **kwargs):
    return OpenAIChatTransport(base_url=server.url + "/v1", api_key="k", api_key_env=None, **kwargs)


def _request():
    return CompletionRequest.from_messages(conversation(), model=model())


def _complete_traced(transport):
    """The result and the peak of Python memory allocated while getting it."""
    tracemalloc.start()
    try:
        result = run_closing(transport, transport.complete, _request())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def _assert_too_large(result):
    assert isinstance(result, CompletionFallback)
    assert (result.code, result.retryable) == ("transport-failed", False)
    assert result.failure.kind == "invalid-response"
    assert "too large" in result.failure.reason


# --- the size cap is on decoded bytes, enforced while reading ------------------------------------------


def test_a_gzip_bomb_is_refused_with_memory_bounded_by_the_cap(bomb):
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(raw=bomb, headers={"Content-Encoding": "gzip"}))
        result, peak = _complete_traced(_chat(server))
    _assert_too_large(result)
    # The cap plus one read's worth: never the 128 MiB the bomb decodes to.
    assert peak < PROVIDER_RESPONSE_MAX_BYTES + 16 * MIB


def test_a_flood_without_a_length_is_cut_once_the_cap_is_passed():
    planned = 96 * MIB
    with ScriptedServer() as server:
        flood = Reply(stream=lambda: (b" " * MIB for _ in range(planned // MIB)))
        server.on("POST", "/v1/chat/completions", flood)
        result, peak = _complete_traced(_chat(server))
        sent = server.sent_bytes
    _assert_too_large(result)
    assert peak < PROVIDER_RESPONSE_MAX_BYTES + 16 * MIB
    assert sent < planned  # the client hung up instead of reading the rest


def test_a_declared_length_over_the_cap_is_refused_before_the_body_is_read():
    declared = PROVIDER_RESPONSE_MAX_BYTES + 1
    with ScriptedServer() as server:
        pieces = Reply(
            stream=lambda: (b" " * MIB for _ in range(declared // MIB + 1)),
            headers={"Content-Length": str(declared)},
        )
        server.on("POST", "/v1/chat/completions", pieces)
        result, peak = _complete_traced(_chat(server))
    _assert_too_large(result)
    assert peak < 16 * MIB


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send it
        ("identity", lambda data: data),
    ],
    ids=["gzip", "deflate-zlib", "deflate-raw", "identity"],
)
def test_compressed_answers_within_the_cap_still_decode(encoding, encode):
    body = encode(json.dumps(OPENAI_CHAT_ANSWER).encode())
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(raw=body, headers={"Content-Encoding": encoding}))
        transport = _chat(server)
        result = run_closing(transport, transport.complete, _request())
        offered = server.requests[0].headers["accept-encoding"]
    assert isinstance(result, CompletionCompleted), result
    assert result.output.text == "The commands are demo, plan and status."
    assert offered == "gzip, deflate"


@pytest.mark.parametrize(
    ("encoding", "raw"),
    [("gzip", b"this is not gzip at all"), ("deflate", b"\x78\x9c broken"), ("br", b"\x0b\x02\x80")],
    ids=["corrupt-gzip", "corrupt-deflate", "not-offered"],
)
def test_a_200_with_a_bad_content_encoding_is_a_failure_result_not_an_exception(encoding, raw):
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(raw=raw, headers={"Content-Encoding": encoding}))
        transport = _chat(server)
        result = run_closing(transport, transport.complete, _request())
    assert isinstance(result, CompletionFallback)
    assert result.failure.kind == "invalid-response"
    assert result.failure.http_status == 200
    assert raw.decode("latin-1") not in result.failure.reason


def test_an_error_answer_with_a_bad_encoding_still_reports_its_status():
    with ScriptedServer() as server:
        broken = Reply(status=503, raw=b"not gzip", headers={"Content-Encoding": "gzip"})
        server.on("POST", "/v1/chat/completions", broken)
        transport = _chat(server)
        result = run_closing(transport, transport.complete, _request())
    assert isinstance(result, CompletionFallback)
    assert (result.failure.kind, result.failure.http_status, result.retryable) == ("server-error", 503, True)


def test_an_error_answer_is_read_only_as_far_as_its_error_type():
    planned = 64 * MIB
    head = json.dumps({"error": {"type": "overloaded_error"}}).encode()
    with ScriptedServer() as server:
        flood = Reply(status=529, stream=lambda: itertools.chain([head], (b" " * MIB for _ in range(64))))
        server.on("POST", "/v1/chat/completions", flood)
        result, peak = _complete_traced(_chat(server))
        sent = server.sent_bytes
    assert isinstance(result, CompletionFallback)
    assert (result.failure.kind, result.failure.http_status, result.retryable) == ("server-error", 529, True)
    assert sent < planned
    assert peak < 16 * MIB


# --- wall-clock deadlines -------------------------------------------------------------------------------


def _drip(pieces: int):
    """A valid answer preceded by ``pieces`` spaces (JSON allows leading whitespace)."""
    return lambda: [*([b" "] * pieces), json.dumps(OPENAI_CHAT_ANSWER).encode()]


def test_a_server_that_drips_bytes_cannot_keep_a_call_alive_past_its_deadline():
    pieces = 100  # 20 s of dripping, one byte per 0.2 s: every single read is well inside 1 s
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(stream=_drip(pieces), drip_s=0.2))
        transport = _chat(server, timeout_s=1)
        result = run_closing(transport, transport.complete, _request())
        sent = server.sent_bytes
    assert isinstance(result, CompletionFallback)
    assert (result.failure.kind, result.retryable) == ("timeout", True)
    assert result.failure.reason == "no answer within 1 s"
    assert sent < pieces  # the call ended while the server still had most of its drip to send


def test_the_fallback_chain_has_a_total_deadline_by_default():
    router = FallbackRouter(["openai:gpt-4o-mini"])
    assert router.deadline_s == FALLBACK_DEFAULT_DEADLINE_S


def test_the_fallback_chain_stops_at_its_deadline_against_a_slow_failing_server():
    with ScriptedServer() as server:
        slow_failure = Reply(status=503, body={"error": {"type": "overloaded"}}, delay_s=0.6)
        server.on("POST", "/v1/chat/completions", slow_failure)
        transport = _chat(server, timeout_s=30)
        runtime = ProviderRuntime(
            {"openai": transport, "backup": _chat(server, provider="backup", timeout_s=30)},
            [{"model": "openai:gpt-4o-mini", "attempts": 5}, {"model": "backup:gpt-4o-mini", "attempts": 5}],
            deadline_s=1.0,
            sleep=lambda seconds: anyio.sleep(0),
        )
        routed = run_closing(runtime, runtime.complete, _request())
        seen = len(server.requests)
    assert isinstance(routed.result, CompletionFallback)
    assert routed.result.failure.kind == "timeout"
    assert "deadline" in routed.result.failure.reason
    assert seen < 10  # ten attempts were allowed; the deadline ended the run after a few
    assert all(record.kind in ("server-error", "timeout") for record in routed.failovers)


def test_a_hanging_server_is_cut_by_the_chain_deadline_even_with_a_long_transport_timeout():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(stream=_drip(40), drip_s=0.25))
        transport = _chat(server, timeout_s=60)
        runtime = ProviderRuntime({"openai": transport}, ["openai:gpt-4o-mini"], deadline_s=1.0)
        routed = run_closing(runtime, runtime.complete, _request())
        sent = server.sent_bytes
    assert isinstance(routed.result, CompletionFallback)
    assert routed.result.failure.kind == "timeout"
    assert sent < 40


# --- one HTTP client per transport ------------------------------------------------------------------------


def test_one_transport_reuses_one_client_and_its_connection():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))
        transport = _chat(server)

        async def three_calls():
            async with transport:
                first = await transport.complete(_request())
                second = await transport.complete(_request())
            third = await transport.complete(_request())  # usable after close: a new client
            await transport.aclose()
            return first, second, third

        results = anyio.run(three_calls)
        ports = [recorded.client_port for recorded in server.requests]
    assert all(isinstance(result, CompletionCompleted) for result in results)
    assert ports[0] == ports[1]  # the second call went over the first call's connection
    assert ports[2] != ports[0]  # closing the transport closed that connection


def test_a_caller_supplied_client_is_used_and_left_open():
    with ScriptedServer() as server:
        server.on("POST", "/v1/chat/completions", Reply(body=OPENAI_CHAT_ANSWER))

        async def main():
            async with httpx.AsyncClient() as client:
                transport = _chat(server, client=client)
                async with transport:
                    result = await transport.complete(_request())
                return result, client.is_closed

        result, closed_by_transport = anyio.run(main)
    assert isinstance(result, CompletionCompleted)
    assert closed_by_transport is False


# --- local discovery is bounded the same way --------------------------------------------------------------


def test_discovery_refuses_a_bomb_with_memory_bounded_by_its_cap(bomb):
    with ScriptedServer() as server:
        server.on("GET", "/v1/models", Reply(raw=bomb, headers={"Content-Encoding": "gzip"}))
        definition = parse_local_provider({"id": "ollama", "type": "ollama", "baseUrl": server.url})
        tracemalloc.start()
        try:
            found = anyio.run(LocalProviderDiscovery(timeout_ms=10_000).discover, definition)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert found.chat_models == ()
    assert peak < DISCOVERY_RESPONSE_MAX_BYTES + 16 * MIB


def test_discovery_treats_a_corrupt_encoding_as_no_models():
    with ScriptedServer() as server:
        server.on("GET", "/v1/models", Reply(raw=b"nope", headers={"Content-Encoding": "gzip"}))
        definition = parse_local_provider({"id": "lmstudio", "type": "lmstudio", "baseUrl": server.url})
        found = anyio.run(LocalProviderDiscovery().discover, definition)
    assert found.chat_models == ()
