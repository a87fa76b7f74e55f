"""Fuzz targets: one function per parser, taking bytes, raising only what the parser does not document.

Each target feeds ``data`` to one parser of the project through its public API and swallows exactly the
exceptions that parser documents (a ``code``-carrying error). Anything else escaping a target is a bug.
The same functions are driven by hypothesis (``test_fuzz_parsers.py``) and by atheris
(``run_fuzz.py --engine atheris``), so a crash found by one engine replays in the other.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

import anyio

from ds4_context_core import (
    CanonicalMessage,
    HistoryDecodeError,
    InteropFormatError,
    MessageFlags,
    ModelDescriptor,
    Provenance,
    TextBlock,
)
from ds4_context_core.adapter import CompletionRequest
from ds4_context_core.config import ConfigLoadResult, load_config
from ds4_context_core.history import (
    decode_canonical_message,
    decode_canonical_messages_jsonl,
    decode_runtime_history_snapshot,
)
from ds4_context_core.interop import (
    from_anthropic_messages,
    from_openai_chat,
    from_openai_responses,
    to_anthropic_messages,
    to_openai_chat,
    to_openai_responses,
)
from ds4_context_engine import PiSessionError
from ds4_context_engine.pi import build_pi_context, read_pi_session_bytes
from ds4_context_engine.providers import (
    AnthropicMessagesTransport,
    HttpTransport,
    LocalProviderError,
    ModelReferenceError,
    OpenAIChatTransport,
    OpenAIResponsesTransport,
    ProviderConfigurationError,
    ProviderResponseError,
    parse_local_provider,
    parse_model_reference,
)
from ds4_context_reference_adapter import ReferenceHistoryError, read_reference_history

Target = Callable[[bytes], None]

# What reads a file or an answer must never be slower than this per input, so inputs stay small.
MAX_INPUT_BYTES: Final = 64 * 1024
SESSION: Final = "fuzz-session"


def _json(data: bytes) -> tuple[bool, Any]:
    """(True, value) when ``data`` is JSON the stdlib can read; fuzzing the stdlib is not our job."""
    try:
        return True, json.loads(data)
    except (ValueError, RecursionError):
        return False, None


def canonical_jsonl(data: bytes) -> None:
    """Core's decoders: JSONL history, one message, a snapshot document (both block policies)."""
    for policy in ("reject", "opaque"):
        with suppress(HistoryDecodeError):
            decode_canonical_messages_jsonl(data, unknown_blocks=policy)
        with suppress(HistoryDecodeError):
            decode_canonical_message(data, unknown_blocks=policy)
        with suppress(HistoryDecodeError):
            decode_runtime_history_snapshot(data, unknown_blocks=policy)


@functools.cache
def _scratch() -> Path:
    """A private directory for the history files this process writes (one project root inside)."""
    root = Path(tempfile.mkdtemp(prefix="ds4-fuzz-")).resolve()
    (root / "project").mkdir()
    return root


def reference_header() -> bytes:
    """A valid ``ds4-runtime-session-v1`` header naming this process's scratch project root."""
    header = {
        "type": "ds4-runtime-session-v1",
        "runtimeId": "jsonl-reference",
        "sessionId": SESSION,
        "projectRoot": str(_scratch() / "project"),
    }
    return json.dumps(header, separators=(",", ":")).encode() + b"\n"


def reference_history(data: bytes) -> None:
    """The reference runtime's reader on a real file holding ``data`` (a header is usually its start)."""
    path = _scratch() / f"history-{threading.get_ident()}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    try:
        read_reference_history(path)
    except ReferenceHistoryError:
        pass
    finally:
        path.unlink(missing_ok=True)


def pi_session(data: bytes) -> None:
    """The engine's Pi reader (public API only): parse, then build the context of every leaf."""
    try:
        session = read_pi_session_bytes(data)
    except PiSessionError:
        return
    leaves = session.leaves()
    for leaf in (None, *leaves[:4]):
        build_pi_context(session, leaf)


def model_reference(data: bytes) -> None:
    """``<provider>:<model>`` references, and local provider definitions given as JSON."""
    text = data.decode("utf-8", "surrogateescape")
    with suppress(ModelReferenceError):
        parse_model_reference(text)
    ok, value = _json(data)
    if ok:
        with suppress(LocalProviderError, ProviderConfigurationError):
            parse_local_provider(value)


def config(data: bytes) -> None:
    """``load_config`` on any JSON document: documented never to raise, always a result."""
    ok, value = _json(data)
    if not ok:
        return
    result = load_config(value)
    assert isinstance(result, ConfigLoadResult)


def _interop_round_trip(messages: tuple[CanonicalMessage, ...]) -> None:
    for export in (to_openai_chat, to_openai_responses, to_anthropic_messages):
        with suppress(InteropFormatError):
            export(messages)


def openai_chat(data: bytes) -> None:
    ok, value = _json(data)
    if not ok:
        return
    try:
        messages = from_openai_chat(value, session_id=SESSION)
    except InteropFormatError:
        return
    _interop_round_trip(messages)


def openai_responses(data: bytes) -> None:
    ok, value = _json(data)
    if not ok:
        return
    try:
        messages = from_openai_responses(value, session_id=SESSION)
    except InteropFormatError:
        return
    _interop_round_trip(messages)


def anthropic(data: bytes) -> None:
    ok, value = _json(data)
    if not ok:
        return
    try:
        messages = from_anthropic_messages(value, session_id=SESSION)
    except InteropFormatError:
        return
    _interop_round_trip(messages)


@functools.cache
def _transports() -> tuple[HttpTransport, ...]:
    base = "http://127.0.0.1:9/v1"
    return (
        OpenAIChatTransport(base_url=base, api_key="k", api_key_env=None),
        OpenAIResponsesTransport(base_url=base, api_key="k", api_key_env=None),
        AnthropicMessagesTransport(base_url="http://127.0.0.1:9", api_key="k", api_key_env=None),
    )


def provider_answer(data: bytes) -> None:
    """Each transport's ``parse_response`` on a decoded 2xx body: only ``ProviderResponseError``."""
    ok, value = _json(data)
    if not ok:
        return
    for transport in _transports():
        with suppress(ProviderResponseError):
            transport.parse_response(value)


class _AnswerHandler(BaseHTTPRequestHandler):
    """Answers every POST with the raw bytes the test put on the server."""

    server: _AnswerServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = self.server.answer
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _AnswerServer(ThreadingHTTPServer):
    answer: bytes = b""
    daemon_threads = True


@contextmanager
def answer_server() -> Iterator[_AnswerServer]:
    """A real HTTP server on 127.0.0.1 that answers with whatever ``server.answer`` holds."""
    server = _AnswerServer(("127.0.0.1", 0), _AnswerHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _request(provider: str) -> CompletionRequest:
    message = CanonicalMessage(
        id=f"{SESSION}:1",
        source_entry_id="1",
        role="user",
        blocks=(TextBlock(text="hello"),),
        provenance=Provenance(source="runtime-session", session_id=SESSION, entry_id="1", runtime_id="r"),
        flags=MessageFlags(),
    )
    model = ModelDescriptor(provider=provider, id="m", context_window=8192, max_tokens=64)
    return CompletionRequest.from_messages((message,), model=model)


async def _complete_once(transport: HttpTransport, request: CompletionRequest) -> Any:
    async with transport:  # the transport's HTTP client is closed with the call
        return await transport.complete(request)


def completion_over_http(server: _AnswerServer, data: bytes) -> None:
    """``complete()`` against a real server answering ``data`` with 200: documented never to raise."""
    server.answer = data
    url = f"http://127.0.0.1:{server.server_address[1]}"
    transports: tuple[tuple[str, HttpTransport], ...] = (
        ("openai", OpenAIChatTransport(base_url=url + "/v1", api_key="k", api_key_env=None)),
        ("openai", OpenAIResponsesTransport(base_url=url + "/v1", api_key="k", api_key_env=None)),
        ("anthropic", AnthropicMessagesTransport(base_url=url, api_key="k", api_key_env=None)),
    )
    for provider, transport in transports:
        result = anyio.run(_complete_once, transport, _request(provider))
        assert result.status in ("completed", "fallback"), result.status


TARGETS: Final[dict[str, Target]] = {
    "canonical_jsonl": canonical_jsonl,
    "reference_history": reference_history,
    "pi_session": pi_session,
    "model_reference": model_reference,
    "config": config,
    "openai_chat": openai_chat,
    "openai_responses": openai_responses,
    "anthropic": anthropic,
    "provider_answer": provider_answer,
}
