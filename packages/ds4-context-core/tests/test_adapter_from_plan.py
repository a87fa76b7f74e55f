"""``CompletionRequest.from_plan``: a plan's provider-facing messages as an adapter request."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import anyio
import msgspec
import pytest

import ds4_context_core as core
from ds4_context_core._exceptions import CompletionRequestError
from ds4_context_core.adapter import (
    COMPLETION_PAYLOAD_FORMATS,
    CompletionCompleted,
    CompletionRequest,
    DiagnosticsBuffer,
    complete_with_guards,
)
from ds4_context_core.interop import to_anthropic_messages, to_openai_chat, to_openai_responses
from ds4_context_core.planner import ContextPlan, plan_context
from ds4_context_core.privacy import enforce_payload_privacy

SESSION = "s"
MODEL = core.ModelDescriptor(provider="openai", id="gpt-4o", context_window=100_000, max_tokens=4_000)


def _message(entry: str, role: Any, *blocks: Any) -> core.CanonicalMessage:
    return core.CanonicalMessage(
        id=f"{SESSION}:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=blocks,
        provenance=core.Provenance(source="runtime-session", session_id=SESSION, entry_id=entry),
    )


HISTORY = [
    _message("sys", "system", core.TextBlock(text="be brief")),
    _message("u1", "user", core.TextBlock(text="read a.py")),
    _message("a1", "assistant", core.ToolCallBlock(id="c1", name="read", arguments={"path": "a.py"})),
    _message("t1", "tool", core.ToolResultBlock(tool_call_id="c1", tool_name="read", content="x = 1")),
    _message("u2", "user", core.TextBlock(text="and now?")),
]


def _plan(**kwargs: Any) -> ContextPlan:
    return plan_context(HISTORY, model=MODEL, **kwargs)


def test_a_plan_becomes_a_request_for_its_messages_in_order() -> None:
    plan = _plan()
    assert plan.ok
    request = CompletionRequest.from_plan(plan, model=MODEL)
    assert (request.provider, request.model) == ("openai", "gpt-4o")
    assert list(request.payload) == ["messages"]
    assert request.payload["messages"] == msgspec.to_builtins(plan.messages)
    decoded = msgspec.convert(request.payload["messages"], tuple[core.CanonicalMessage, ...])
    assert decoded == plan.messages
    # JSON-ready, and what privacy enforcement accepts
    msgspec.json.encode(request.payload)
    enforce_payload_privacy(request.payload, provider=request.provider)


def test_model_id_with_an_explicit_provider_and_extra_keys() -> None:
    request = CompletionRequest.from_plan(
        _plan(), provider="azure", model="deploy-1", extra={"tools": [], "temperature": 0}
    )
    assert (request.provider, request.model) == ("azure", "deploy-1")
    assert list(request.payload) == ["messages", "tools", "temperature"]
    override = CompletionRequest.from_plan(_plan(), model=MODEL, provider="openrouter")
    assert override.provider == "openrouter"


@pytest.mark.parametrize(
    ("payload_format", "expected"),
    [
        ("openai-chat", lambda messages: {"messages": to_openai_chat(messages)}),
        ("openai-responses", lambda messages: {"input": to_openai_responses(messages)}),
        ("anthropic", to_anthropic_messages),
    ],
)
def test_provider_formats_use_interop(payload_format: Any, expected: Any) -> None:
    plan = _plan()
    request = CompletionRequest.from_plan(plan, model=MODEL, payload_format=payload_format)
    assert request.payload == expected(plan.messages)
    assert payload_format in COMPLETION_PAYLOAD_FORMATS


def test_a_request_from_a_plan_goes_through_complete_with_guards() -> None:
    sent: list[Any] = []

    async def transport(request: CompletionRequest) -> str:
        sent.append(request.payload)
        return "done"

    secret = "sk-live-u9xz6HTxaUl5Bi9VMjDuHKnHHC"
    history = [*HISTORY[:-1], _message("u2", "user", core.TextBlock(text=f"deploy with {secret}"))]
    request = CompletionRequest.from_plan(plan_context(history, model=MODEL), model=MODEL)

    async def main() -> Any:
        return await complete_with_guards(
            request,
            closed=False,
            enforce_privacy=lambda r: enforce_payload_privacy(r.payload, provider=r.provider),
            transport=transport,
            diagnostics=DiagnosticsBuffer(),
        )

    result = anyio.run(main)
    assert isinstance(result, CompletionCompleted)
    assert result.privacy.secret_redactions == 1
    assert secret not in repr(sent)
    assert secret in repr(request.payload)  # the request itself is never modified


def test_a_native_fallback_plan_raises_unless_the_host_opts_in() -> None:
    def broken_estimator(message: Any) -> int:
        raise ValueError("boom")

    plan = _plan(estimator=broken_estimator)
    assert not plan.ok
    assert plan.fallback is not None
    assert plan.fallback.mode == "native"
    with pytest.raises(CompletionRequestError, match="token-estimator-failed") as raised:
        CompletionRequest.from_plan(plan, model=MODEL)
    assert raised.value.code == "completion-plan-fallback"
    assert isinstance(raised.value, ValueError)
    request = CompletionRequest.from_plan(plan, model=MODEL, native_fallback=True)
    assert request.payload["messages"] == msgspec.to_builtins(plan.messages)
    assert len(request.payload["messages"]) == len(HISTORY)


def test_a_native_fallback_with_nothing_to_send_still_raises() -> None:
    plan = plan_context(["not a message"], model=MODEL)
    assert plan.fallback is not None
    assert (plan.fallback.mode, plan.messages) == ("native", ())
    with pytest.raises(CompletionRequestError) as raised:
        CompletionRequest.from_plan(plan, model=MODEL, native_fallback=True)
    assert raised.value.code == "completion-plan-fallback"


def test_a_blocked_plan_never_becomes_a_request() -> None:
    def broken_sanitizer(message: Any) -> Any:
        raise RuntimeError("secret sk-123 leaked in message")

    plan = _plan(sanitizer=broken_sanitizer)
    assert plan.fallback is not None
    assert plan.fallback.mode == "blocked"
    for native_fallback in (False, True):
        with pytest.raises(CompletionRequestError) as raised:
            CompletionRequest.from_plan(plan, model=MODEL, native_fallback=native_fallback)
        assert raised.value.code == "completion-plan-blocked"
        assert "sk-123" not in str(raised.value)


@pytest.mark.parametrize(
    ("plan_value", "kwargs"),
    [
        ("not a plan", {"model": MODEL}),
        (None, {"model": MODEL}),
        ("plan", {"model": None}),
        ("plan", {"model": "gpt-4o"}),  # a bare id needs a provider
        ("plan", {"model": MODEL, "provider": " openai"}),
        ("plan", {"model": "m\n", "provider": "openai"}),
        ("plan", {"model": MODEL, "payload_format": "gemini"}),
        ("plan", {"model": MODEL, "extra": {"messages": []}}),
        ("plan", {"model": MODEL, "payload_format": "openai-responses", "extra": {"input": []}}),
        ("plan", {"model": MODEL, "extra": {1: "x"}}),
    ],
)
def test_malformed_arguments_raise_with_a_code(plan_value: Any, kwargs: dict[str, Any]) -> None:
    plan = _plan() if plan_value == "plan" else plan_value
    with pytest.raises(CompletionRequestError) as raised:
        CompletionRequest.from_plan(plan, **kwargs)
    assert raised.value.code == "completion-request-invalid"


def test_importing_the_adapter_contract_does_not_load_the_planner() -> None:
    code = (
        "import sys, ds4_context_core.adapter\n"
        "assert 'pydantic' not in sys.modules\n"
        "assert 'ds4_context_core.planner' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
