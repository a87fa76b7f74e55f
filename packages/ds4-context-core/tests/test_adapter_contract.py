from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest

from ds4_context_core import AdapterArgumentError, Ds4ContextError
from ds4_context_core._exceptions import CompletionRequestError
from ds4_context_core.adapter import (
    ADAPTER_DIAGNOSTIC_CODES,
    ADAPTER_DIAGNOSTIC_MESSAGE_MAX_CHARS,
    COMPLETION_FALLBACK_CODES,
    AdapterDiagnostic,
    AdapterIdentity,
    CompletionCompleted,
    CompletionFallback,
    CompletionRequest,
    CompletionResult,
    DiagnosticsBuffer,
    complete_with_guards,
    completion_fallback,
    validate_completion_request,
)
from ds4_context_core.privacy import PrivacyResult, enforce_payload_privacy


def test_published_codes() -> None:
    assert ADAPTER_DIAGNOSTIC_CODES == (
        "canonical-history-read-failed",
        "canonical-history-identity-mismatch",
        "canonical-history-invalid",
        "derived-state-rebuilt",
        "privacy-enforcement-failed",
        "completion-request-invalid",
        "completion-transport-failed",
        "local-kv-replay-failed",
        "local-kv-shutdown-failed",
        "adapter-closed",
    )
    assert COMPLETION_FALLBACK_CODES == (
        "adapter-closed",
        "invalid-request",
        "privacy-enforcement-failed",
        "transport-failed",
    )


def test_identity_defaults_to_the_v1_contract() -> None:
    identity = AdapterIdentity(adapter_name="x", adapter_version="1.2.3")
    assert msgspec.to_builtins(identity) == {
        "adapterName": "x",
        "adapterVersion": "1.2.3",
        "contractVersion": "runtime-adapter-v1",
    }


@pytest.mark.parametrize("code", COMPLETION_FALLBACK_CODES)
def test_only_transport_failures_are_retryable(code: Any) -> None:
    fallback = completion_fallback(code)
    assert fallback.code == code
    assert fallback.retryable is (code == "transport-failed")
    assert msgspec.to_builtins(fallback)["status"] == "fallback"


@pytest.mark.parametrize("code", ["nope", "", None, "Transport-Failed"])
def test_unknown_fallback_code_is_refused_with_a_code(code: Any) -> None:
    with pytest.raises(AdapterArgumentError, match="unknown") as raised:
        completion_fallback(code)
    assert raised.value.code == "completion-fallback-code-unknown"
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, Ds4ContextError)


def test_results_round_trip_as_a_tagged_union() -> None:
    completed = CompletionCompleted(
        output={"role": "assistant", "content": "hi"},
        privacy=enforce_payload_privacy({"messages": []}, provider="openai").summary(),
    )
    decoder = msgspec.json.Decoder(CompletionResult)
    assert decoder.decode(msgspec.json.encode(completed)) == completed
    fallback = completion_fallback("transport-failed")
    assert decoder.decode(msgspec.json.encode(fallback)) == fallback


@pytest.mark.parametrize(
    "request_value",
    [
        {"provider": "openai", "model": "m", "payload": {}},
        CompletionRequest(provider="", model="m", payload={}),
        CompletionRequest(provider=" openai", model="m", payload={}),
        CompletionRequest(provider="openai", model="m\n", payload={}),
        CompletionRequest(provider="openai", model="m" * 257, payload={}),
        CompletionRequest(provider="openai", model="m", payload=["not", "a", "mapping"]),  # type: ignore[arg-type]
    ],
)
def test_malformed_requests_are_rejected_with_a_code(request_value: Any) -> None:
    with pytest.raises(CompletionRequestError) as raised:
        validate_completion_request(request_value)
    assert raised.value.code == "completion-request-invalid"


def test_diagnostics_buffer_keeps_the_newest_and_bounds_messages() -> None:
    buffer = DiagnosticsBuffer(limit=3)
    for index in range(5):
        buffer.record("completion-transport-failed", f"failure {index}")
    assert [d.message for d in buffer.snapshot()] == ["failure 2", "failure 3", "failure 4"]
    long = buffer.record("x", "line\nbreak\x00 " + "y" * 1000, severity="bogus")  # type: ignore[arg-type]
    assert len(long.message) == ADAPTER_DIAGNOSTIC_MESSAGE_MAX_CHARS
    assert long.message.startswith("line break y")
    assert long.severity == "error"
    assert len(buffer) == 3
    buffer.clear()
    assert buffer.snapshot() == ()


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "3"])
def test_a_diagnostics_buffer_without_room_is_refused_with_a_code(limit: Any) -> None:
    with pytest.raises(AdapterArgumentError, match="at least one") as raised:
        DiagnosticsBuffer(limit=limit)
    assert raised.value.code == "diagnostics-limit-invalid"
    assert isinstance(raised.value, ValueError)
    assert DiagnosticsBuffer(limit=1).limit == 1


def test_diagnostics_buffer_is_safe_across_threads() -> None:
    buffer = DiagnosticsBuffer(limit=50)

    def writer() -> None:
        for _ in range(500):
            buffer.add(AdapterDiagnostic(code="c", severity="info", message="m"))

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(buffer.snapshot()) == 50


class RecordingTransport:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[CompletionRequest] = []
        self.fail = fail

    async def __call__(self, request: CompletionRequest) -> Any:
        self.sent.append(request)
        if self.fail:
            raise ConnectionError("provider said: your prompt was sk-abcdefQ7mW2xLp9Zr4Kd8N")
        return {"role": "assistant", "content": "ok"}


def _enforce(request: CompletionRequest) -> PrivacyResult:
    return enforce_payload_privacy(request.payload, provider=request.provider)


REQUEST = CompletionRequest(
    provider="openai",
    model="gpt",
    payload={
        "messages": [
            {"role": "user", "content": "key sk-abcdefQ7mW2xLp9Zr4Kd8N [ds4:local-only]p[/ds4:local-only]"}
        ]
    },
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_guarded_completion_sends_only_the_sanitized_payload(anyio_backend: str) -> None:
    transport, diagnostics = RecordingTransport(), DiagnosticsBuffer()
    result = await complete_with_guards(
        REQUEST, closed=False, enforce_privacy=_enforce, transport=transport, diagnostics=diagnostics
    )
    assert isinstance(result, CompletionCompleted)
    assert result.output == {"role": "assistant", "content": "ok"}
    assert (result.privacy.blocked_blocks, result.privacy.secret_redactions) == (1, 1)
    (sent,) = transport.sent
    assert sent.payload["messages"][0]["content"] == (
        "key [DS4 REDACTED CREDENTIAL] [DS4 local-only content excluded by privacy policy]"
    )
    assert REQUEST.payload["messages"][0]["content"].startswith("key sk-")
    assert "sk-abc" not in msgspec.json.encode(result).decode()
    assert diagnostics.snapshot() == ()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "code", "diagnostic", "retryable", "sent"),
    [
        ("closed", "adapter-closed", "adapter-closed", False, 0),
        ("invalid", "invalid-request", "completion-request-invalid", False, 0),
        ("privacy", "privacy-enforcement-failed", "privacy-enforcement-failed", False, 0),
        ("transport", "transport-failed", "completion-transport-failed", True, 1),
    ],
)
async def test_guarded_completion_falls_back_with_fixed_codes(
    anyio_backend: str, case: str, code: str, diagnostic: str, retryable: bool, sent: int
) -> None:
    transport, diagnostics = RecordingTransport(fail=case == "transport"), DiagnosticsBuffer()
    request: Any = REQUEST
    if case == "invalid":
        request = CompletionRequest(provider="", model="gpt", payload={})
    if case == "privacy":
        request = CompletionRequest(provider="openai", model="gpt", payload={"messages": [object()]})
    result = await complete_with_guards(
        request,
        closed=case == "closed",
        enforce_privacy=_enforce,
        transport=transport,
        diagnostics=diagnostics,
    )
    assert isinstance(result, CompletionFallback)
    assert (result.code, result.retryable) == (code, retryable)
    assert len(transport.sent) == sent
    assert diagnostics.codes() == (diagnostic,)
    assert "sk-" not in msgspec.json.encode(diagnostics.snapshot()).decode()
    assert "sk-" not in msgspec.json.encode(result).decode()
