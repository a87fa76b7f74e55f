import anyio
import pytest

from ds4_context_core.adapter import CompletionCompleted, CompletionFailure, completion_fallback
from ds4_context_core.privacy import PrivacySummary
from ds4_context_engine.providers import CompletionOutput
from ds4_context_engine.runtime import (
    FALLBACK_ERROR_CODES,
    AttemptPolicy,
    FallbackRouter,
    RetryPolicy,
    RuntimeOptionsError,
    parse_fallback_chain,
)


def _ok(context):
    privacy = PrivacySummary(
        provider=context.entry.model.provider,
        destination="remote",
        changed=False,
        blocked_blocks=0,
        secret_redactions=0,
    )
    return CompletionCompleted(output=CompletionOutput(text="done"), privacy=privacy)


def _failed(context, kind, *, status=None, retry_after_ms=None):
    failure = CompletionFailure(kind=kind, reason="r", http_status=status, retry_after_ms=retry_after_ms)
    return completion_fallback("transport-failed", failure=failure)


class Script:
    """Plays back a list of outcomes, one per attempt, and records what was attempted."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.seen = []

    async def __call__(self, context):
        self.seen.append((context.entry.model.reference, context.attempt, context.policy))
        outcome = self.outcomes.pop(0)
        return outcome(context)


class Sleeps:
    def __init__(self):
        self.calls = []

    async def __call__(self, seconds):
        self.calls.append(seconds)


def _run(router, send):
    return anyio.run(router.run, send)


def test_default_entry_has_one_attempt():
    chain = parse_fallback_chain(
        ["openai:gpt-4o", {"model": "anthropic:claude-sonnet-4-5", "effort": "high"}]
    )
    assert [entry.attempts for entry in chain] == [1, 1]
    assert chain[1].effort == "high"


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        ([], "fallback-chain-empty"),
        ("openai:gpt-4o", "fallback-invalid-entry"),
        ([42], "fallback-invalid-entry"),
        ([{"model": "openai:gpt-4o", "sandbox": {}}], "fallback-invalid-entry"),
        ([{"model": "gpt-4o"}], "fallback-invalid-model"),
        ([{"model": "openai:gpt-4o", "attempts": 0}], "fallback-attempts-out-of-range"),
        ([{"model": "openai:gpt-4o", "attempts": 11}], "fallback-attempts-out-of-range"),
        ([{"model": "openai:gpt-4o", "attempts": 2.0}], "fallback-attempts-out-of-range"),
        ([{"model": "openai:gpt-4o", "attempts": True}], "fallback-attempts-out-of-range"),
        ([{"model": "openai:gpt-4o", "effort": "max"}], "fallback-invalid-effort"),
    ],
)
def test_bad_chains_are_refused(entries, code):
    with pytest.raises(RuntimeOptionsError) as caught:
        parse_fallback_chain(entries)
    assert caught.value.code == code
    assert code in FALLBACK_ERROR_CODES


def test_backoff_starts_at_one_second_doubles_and_caps_at_fifteen():
    policy = RetryPolicy()
    assert [policy.backoff_ms(n) for n in range(6)] == [1000, 2000, 4000, 8000, 15000, 15000]
    assert policy.backoff_ms(100) == 15000


def test_bad_retry_policy_is_refused():
    with pytest.raises(RuntimeOptionsError) as caught:
        RetryPolicy(initial_backoff_ms=5000, max_backoff_ms=1000)
    assert caught.value.code == "fallback-invalid-retry-policy"


def test_transient_failures_are_retried_with_backoff_then_fail_over():
    sleeps = Sleeps()
    router = FallbackRouter(
        [{"model": "openai:gpt-4o", "attempts": 3}, "anthropic:claude-sonnet-4-5"], sleep=sleeps
    )
    send = Script(
        lambda c: _failed(c, "server-error", status=503),
        lambda c: _failed(c, "timeout"),
        lambda c: _failed(c, "connection-error"),
        _ok,
    )
    routed = _run(router, send)
    assert routed.result.status == "completed"
    assert routed.model.reference == "anthropic:claude-sonnet-4-5"
    assert routed.attempts == 4
    assert [(f.model, f.attempt, f.kind) for f in routed.failovers] == [
        ("openai:gpt-4o", 1, "server-error"),
        ("openai:gpt-4o", 2, "timeout"),
        ("openai:gpt-4o", 3, "connection-error"),
    ]
    assert sleeps.calls == [1.0, 2.0]
    assert [f.waited_ms for f in routed.failovers] == [1000, 2000, 0]


def test_retry_after_is_honoured_when_longer_than_backoff():
    sleeps = Sleeps()
    router = FallbackRouter([{"model": "openai:gpt-4o", "attempts": 2}], sleep=sleeps)
    send = Script(lambda c: _failed(c, "rate-limited", status=429, retry_after_ms=7000), _ok)
    routed = _run(router, send)
    assert routed.result.status == "completed"
    assert sleeps.calls == [7.0]
    assert routed.failovers[0].retry_after_ms == 7000


def test_retry_after_beyond_the_cap_fails_over_without_waiting():
    sleeps = Sleeps()
    router = FallbackRouter(
        [{"model": "openai:gpt-4o", "attempts": 5}, "ollama:llama3.2"],
        retry_policy=RetryPolicy(max_retry_after_ms=30_000),
        sleep=sleeps,
    )
    send = Script(lambda c: _failed(c, "rate-limited", status=429, retry_after_ms=3_600_000), _ok)
    routed = _run(router, send)
    assert routed.model.reference == "ollama:llama3.2"
    assert sleeps.calls == []
    assert routed.attempts == 2


@pytest.mark.parametrize(
    "kind", ["client-error", "authentication", "invalid-response", "privacy-enforcement-failed"]
)
def test_non_transient_failures_stop_the_chain(kind):
    router = FallbackRouter([{"model": "openai:gpt-4o", "attempts": 3}, "ollama:llama3.2"], sleep=Sleeps())
    send = Script(lambda c: _failed(c, kind, status=400))
    routed = _run(router, send)
    assert routed.result.status == "fallback"
    assert routed.result.failure.kind == kind
    assert routed.attempts == 1
    assert routed.failovers == ()


def test_exhausted_chain_returns_the_last_failure_with_full_history():
    router = FallbackRouter(["openai:gpt-4o", "ollama:llama3.2"], sleep=Sleeps())
    send = Script(lambda c: _failed(c, "server-error", status=500), lambda c: _failed(c, "timeout"))
    routed = _run(router, send)
    assert routed.result.status == "fallback"
    assert routed.result.retryable is True
    assert routed.model.reference == "ollama:llama3.2"
    assert [f.kind for f in routed.failovers] == ["server-error", "timeout"]


def test_a_raising_transport_becomes_a_fallback_result():
    async def explode(context):
        raise RuntimeError("boom sk-secret")

    routed = _run(FallbackRouter(["openai:gpt-4o"], sleep=Sleeps()), explode)
    assert routed.result.status == "fallback"
    assert routed.result.code == "transport-failed"
    assert "sk-secret" not in routed.result.failure.reason


def test_a_hanging_attempt_times_out_and_fails_over():
    async def hang_then_answer(context):
        if context.entry_index == 0:
            await anyio.sleep(30)
        return _ok(context)

    router = FallbackRouter(["openai:gpt-4o", "ollama:llama3.2"], attempt_timeout_s=0.05, sleep=Sleeps())
    routed = _run(router, hang_then_answer)
    assert routed.result.status == "completed"
    assert routed.failovers[0].kind == "timeout"


def test_resolver_may_project_tool_lists_and_permission_mode_per_route():
    def resolve(context):
        if context.entry.model.provider == "ollama":
            return {"allowed_tools": ["read"], "permission_mode": "plan"}
        return None

    router = FallbackRouter(
        ["openai:gpt-4o", "ollama:llama3.2"],
        base_policy=AttemptPolicy(allowed_tools=("read", "bash")),
        resolve_attempt=resolve,
        sleep=Sleeps(),
    )
    send = Script(lambda c: _failed(c, "server-error", status=502), _ok)
    _run(router, send)
    assert send.seen[0][2] == AttemptPolicy(allowed_tools=("read", "bash"))
    assert send.seen[1][2] == AttemptPolicy(allowed_tools=("read",), permission_mode="plan")


@pytest.mark.parametrize(
    ("resolution", "code"),
    [
        ({"sandbox": {"mode": "off"}}, "fallback-protected-field"),
        ({"model": "openai:gpt-5"}, "fallback-protected-field"),
        ({"messages": []}, "fallback-protected-field"),
        ({"allowed_tools": "bash"}, "fallback-invalid-override"),
        ({"disallowed_tools": ["bad name!"]}, "fallback-invalid-override"),
        ({"permission_mode": "x" * 64}, "fallback-invalid-override"),
        (["allowed_tools"], "fallback-invalid-override"),
    ],
)
def test_resolver_cannot_replace_protected_fields(resolution, code):
    router = FallbackRouter(["openai:gpt-4o"], resolve_attempt=lambda c: resolution, sleep=Sleeps())
    send = Script(_ok)
    with pytest.raises(RuntimeOptionsError) as caught:
        _run(router, send)
    assert caught.value.code == code
    assert send.seen == []


def test_router_runs_under_trio():
    router = FallbackRouter(
        [{"model": "openai:gpt-4o", "attempts": 2}], retry_policy=RetryPolicy(initial_backoff_ms=1)
    )
    send = Script(lambda c: _failed(c, "server-error", status=500), _ok)
    routed = anyio.run(router.run, send, backend="trio")
    assert routed.result.status == "completed"
    assert routed.failovers[0].waited_ms == 1
