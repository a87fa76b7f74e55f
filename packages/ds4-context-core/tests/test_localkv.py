from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec
import pytest

from ds4_context_core.localkv import (
    LOCAL_KV_MAX_COUNTER,
    LOCAL_KV_REJECTION_CODES,
    LocalKvDiagnostics,
    LocalKvEligibilityInput,
    LocalKvHit,
    LocalKvMiss,
    LocalKvRejected,
    LocalKvReplayResult,
    LocalKvReuseController,
    LocalKvReuseRequest,
    LocalKvReuseResult,
    LocalKvRuntimePort,
    LocalKvUnavailable,
    evaluate_local_kv_eligibility,
)

VALID: dict[str, Any] = {
    "enabled": True,
    "capability_enabled": True,
    "capability_version": "local-kv-runtime-port-v1",
    "destination": "local",
    "runtime_id": "llama-box",
    "runtime_revision": "rev-7",
    "provider": "llama-cpp",
    "model": "qwen3-8b",
    "model_revision": "q4_k_m-2026-01",
    "privacy_policy_version": "ds4-privacy-policy-v1:abc",
    "prompt_prefix": "You are a careful assistant.\n",
    "system_options": {"temperature": 0.0},
    "tool_options": {"tools": ["read", "grep"]},
    "prefix_token_count": 120,
    "context_token_count": 160,
}

# For each rejection, in the published order, a value that breaks that rule.
BREAKERS: list[tuple[str, str, Any]] = [
    ("disabled", "enabled", False),
    ("capability-unsupported", "capability_enabled", False),
    ("non-local-destination", "destination", "remote"),
    ("invalid-provider", "provider", "  "),
    ("invalid-model", "model", "m\x00"),
    ("invalid-model-revision", "model_revision", "r" * 257),
    ("invalid-runtime-identity", "runtime_id", ""),
    ("invalid-runtime-revision", "runtime_revision", "\t"),
    ("invalid-capability-version", "capability_version", "v" * 65),
    ("invalid-privacy-policy-version", "privacy_policy_version", "p\n1"),
    ("invalid-prompt-prefix", "prompt_prefix", ""),
    ("invalid-token-count", "prefix_token_count", 161),
    ("invalid-options", "system_options", {"temperature": float("nan")}),
]


def _input(**changes: Any) -> LocalKvEligibilityInput:
    return LocalKvEligibilityInput(**{**VALID, **changes})


def _h(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _stable(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_rejection_codes_are_the_published_ones_in_order() -> None:
    assert [code for code, _, _ in BREAKERS] == list(LOCAL_KV_REJECTION_CODES)


@pytest.mark.parametrize("index", range(len(BREAKERS)))
def test_rejections_are_checked_in_order(index: int) -> None:
    # Break this rule and every later one: the earliest broken rule must be the one reported.
    changes = {field: value for _, field, value in BREAKERS[index:]}
    result = evaluate_local_kv_eligibility(_input(**changes))
    assert result.eligible is False
    assert result.rejection == BREAKERS[index][0]
    assert result.hashes is None


def test_fingerprint_and_component_hashes_follow_local_kv_eligibility_v1() -> None:
    result = evaluate_local_kv_eligibility(_input())
    assert result.eligible is True
    assert result.hashes is not None
    prefix_hash = _h(VALID["prompt_prefix"].encode())
    provider_model = _h(
        _stable({"provider": "llama-cpp", "model": "qwen3-8b", "modelRevision": "q4_k_m-2026-01"})
    )
    options = _h(_stable({"systemOptions": {"temperature": 0}, "toolOptions": {"tools": ["read", "grep"]}}))
    privacy = _h(_stable({"destination": "local", "privacyPolicyVersion": "ds4-privacy-policy-v1:abc"}))
    runtime = _h(
        _stable(
            {
                "runtimeId": "llama-box",
                "runtimeRevision": "rev-7",
                "capabilityVersion": "local-kv-runtime-port-v1",
            }
        )
    )
    fingerprint = _h(
        _stable(
            {
                "version": "local-kv-eligibility-v1",
                "prefixHash": prefix_hash,
                "providerModelHash": provider_model,
                "optionsHash": options,
                "privacyHash": privacy,
                "runtimeHash": runtime,
            }
        )
    )
    assert msgspec.to_builtins(result.hashes) == {
        "version": "local-kv-eligibility-v1",
        "fingerprint": fingerprint,
        "prefixHash": prefix_hash,
        "providerModelHash": provider_model,
        "optionsHash": options,
        "privacyHash": privacy,
        "runtimeHash": runtime,
    }
    assert (result.prefix_token_count, result.context_token_count) == (120, 160)


def test_identifiers_are_trimmed_but_never_case_folded_and_bytes_prefix_equals_its_text() -> None:
    base = evaluate_local_kv_eligibility(_input()).hashes
    assert base is not None
    trimmed = evaluate_local_kv_eligibility(_input(model="  qwen3-8b ")).hashes
    assert trimmed == base
    as_bytes = evaluate_local_kv_eligibility(_input(prompt_prefix=VALID["prompt_prefix"].encode())).hashes
    assert as_bytes == base
    folded = evaluate_local_kv_eligibility(_input(model="Qwen3-8B")).hashes
    assert folded is not None
    assert folded.fingerprint != base.fingerprint


@pytest.mark.parametrize(
    "change",
    [
        {"prompt_prefix": "You are a careful assistant!\n"},
        {"model_revision": "q8"},
        {"runtime_revision": "rev-8"},
        {"capability_version": "local-kv-runtime-port-v2"},
        {"privacy_policy_version": "ds4-privacy-policy-v1:def"},
        {"tool_options": {"tools": ["read"]}},
    ],
)
def test_any_change_of_an_input_changes_the_fingerprint(change: dict[str, Any]) -> None:
    base = evaluate_local_kv_eligibility(_input()).hashes
    changed = evaluate_local_kv_eligibility(_input(**change)).hashes
    assert base is not None
    assert changed is not None
    assert changed.fingerprint != base.fingerprint


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"capability_version": None}, "capability-unsupported"),
        ({"prefix_token_count": -1}, "invalid-token-count"),
        ({"prefix_token_count": True}, "invalid-token-count"),
        ({"context_token_count": 160.0}, "invalid-token-count"),
        ({"tool_options": {"x": {1, 2}}}, "invalid-options"),
        ({"tool_options": {1: "non-string key"}}, "invalid-options"),
        ({"system_options": object()}, "invalid-options"),
        ({"prompt_prefix": "\ud800"}, "invalid-prompt-prefix"),
        ({"prompt_prefix": 12}, "invalid-prompt-prefix"),
    ],
)
def test_malformed_inputs_are_rejected_with_their_code(changes: dict[str, Any], code: str) -> None:
    result = evaluate_local_kv_eligibility(_input(**changes))
    assert (result.eligible, result.rejection) == (False, code)


class ScriptedPort:
    """A local runtime port that answers try_reuse from a script and counts calls."""

    def __init__(self, answers: list[Any], replay_tokens: int = 160) -> None:
        self.answers = answers
        self.replay_tokens = replay_tokens
        self.reuse_calls = 0
        self.replay_calls = 0
        self.shutdowns = 0
        self.replay_error: Exception | None = None
        self.seen: list[LocalKvReuseRequest] = []

    async def try_reuse(self, request: LocalKvReuseRequest) -> LocalKvReuseResult:
        self.reuse_calls += 1
        self.seen.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        result: LocalKvReuseResult = answer
        return result

    async def full_replay(self, request: LocalKvReuseRequest) -> LocalKvReplayResult:
        self.replay_calls += 1
        if self.replay_error is not None:
            raise self.replay_error
        return LocalKvReplayResult(
            output={"text": "replayed"}, prefill_tokens=self.replay_tokens, prefill_latency_ms=2.5
        )

    async def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_worked_example_four_requests_one_hit(anyio_backend: str) -> None:
    port = ScriptedPort(
        [
            LocalKvHit(output={"text": "reused"}, saved_prefill_tokens=120, prefill_latency_ms=0.4),
            LocalKvMiss(),
            LocalKvMiss(),
            LocalKvMiss(),
        ]
    )
    assert isinstance(port, LocalKvRuntimePort)
    controller = LocalKvReuseController(port)
    eligibility = evaluate_local_kv_eligibility(_input())
    outputs = [await controller.execute(eligibility, {"messages": []}) for _ in range(4)]
    assert [execution.outcome.status for execution in outputs] == ["hit", "miss", "miss", "miss"]
    assert outputs[0].output == {"text": "reused"}
    assert outputs[1].output == {"text": "replayed"}
    diagnostics = controller.diagnostics()
    assert msgspec.to_builtins(diagnostics) == {
        "version": "local-kv-diagnostics-v1",
        "requests": 4,
        "eligibleRequests": 4,
        "bypassedRequests": 0,
        "hits": 1,
        "misses": 3,
        "rejected": 0,
        "unavailable": 0,
        "fullReplays": 3,
        "transportFailures": 0,
        "prefixTokens": 480,
        "contextTokens": 640,
        "savedPrefillTokens": 120,
        "replayPrefillTokens": 480,
        "replayPrefillLatencyMs": 7.5,
    }


@pytest.mark.anyio
async def test_ineligible_requests_bypass_the_port(anyio_backend: str) -> None:
    port = ScriptedPort([])
    controller = LocalKvReuseController(port)
    execution = await controller.execute(evaluate_local_kv_eligibility(_input(destination="remote")), {})
    assert execution.outcome.status == "bypassed"
    assert execution.outcome.rejection == "non-local-destination"
    assert execution.output is None
    assert (port.reuse_calls, port.replay_calls) == (0, 0)
    assert controller.diagnostics().bypassed_requests == 1
    no_port = LocalKvReuseController(None)
    assert (await no_port.execute(evaluate_local_kv_eligibility(_input()), {})).outcome.status == "bypassed"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "status"),
    [
        (LocalKvRejected(), "rejected"),
        (LocalKvUnavailable(), "unavailable"),
        (RuntimeError("cache gone"), "unavailable"),
        (LocalKvHit(output="x", saved_prefill_tokens=121, prefill_latency_ms=1.0), "unavailable"),
        (LocalKvHit(output="x", saved_prefill_tokens=-1, prefill_latency_ms=1.0), "unavailable"),
        (LocalKvHit(output="x", saved_prefill_tokens=10, prefill_latency_ms=float("nan")), "unavailable"),
        ({"status": "hit", "handle": 42}, "unavailable"),
    ],
)
async def test_anything_but_a_valid_hit_falls_back_to_full_replay(
    anyio_backend: str, answer: Any, status: str
) -> None:
    port = ScriptedPort([answer])
    controller = LocalKvReuseController(port)
    execution = await controller.execute(evaluate_local_kv_eligibility(_input()), {"messages": []})
    assert execution.outcome.status == status
    assert execution.outcome.replayed is True
    assert execution.output == {"text": "replayed"}
    diagnostics = controller.diagnostics()
    assert (diagnostics.hits, diagnostics.full_replays, diagnostics.saved_prefill_tokens) == (0, 1, 0)
    assert getattr(diagnostics, status) == 1


@pytest.mark.anyio
async def test_a_failed_replay_is_counted_and_reported_not_raised(anyio_backend: str) -> None:
    port = ScriptedPort([LocalKvMiss()])
    port.replay_error = OSError("socket closed")
    controller = LocalKvReuseController(port)
    execution = await controller.execute(evaluate_local_kv_eligibility(_input()), {})
    assert (execution.outcome.failed, execution.outcome.replayed, execution.output) == (True, False, None)
    assert controller.diagnostics().transport_failures == 1
    assert controller.diagnostics().full_replays == 0


@pytest.mark.anyio
async def test_counters_saturate_and_ignore_negative_values(anyio_backend: str) -> None:
    port = ScriptedPort([LocalKvMiss(), LocalKvMiss(), LocalKvMiss()], replay_tokens=LOCAL_KV_MAX_COUNTER)
    controller = LocalKvReuseController(port)
    eligibility = evaluate_local_kv_eligibility(_input())
    await controller.execute(eligibility, {})
    await controller.execute(eligibility, {})
    assert controller.diagnostics().replay_prefill_tokens == LOCAL_KV_MAX_COUNTER
    port.replay_tokens = -5  # malformed: counted as a transport failure, never subtracted
    execution = await controller.execute(eligibility, {})
    assert execution.outcome.failed is True
    assert controller.diagnostics().replay_prefill_tokens == LOCAL_KV_MAX_COUNTER


@pytest.mark.anyio
async def test_shutdown_is_idempotent_and_stops_reuse(anyio_backend: str) -> None:
    port = ScriptedPort([])
    controller = LocalKvReuseController(port)
    assert await controller.shutdown() is True
    assert await controller.shutdown() is True
    assert port.shutdowns == 1
    assert controller.port_available is False
    execution = await controller.execute(evaluate_local_kv_eligibility(_input()), {})
    assert execution.outcome.status == "bypassed"

    class FailingShutdown(ScriptedPort):
        async def shutdown(self) -> None:
            raise RuntimeError("stuck")

    assert await LocalKvReuseController(FailingShutdown([])).shutdown() is False


@pytest.mark.anyio
async def test_the_port_sees_hashes_and_payload_but_no_handle(anyio_backend: str) -> None:
    port = ScriptedPort([LocalKvMiss()])
    controller = LocalKvReuseController(port)
    await controller.execute(evaluate_local_kv_eligibility(_input()), {"messages": ["sanitized"]})
    (request,) = port.seen
    assert set(msgspec.to_builtins(request)) == {"hashes", "payload", "prefixTokenCount", "contextTokenCount"}
    assert request.payload == {"messages": ["sanitized"]}
    assert set(LocalKvDiagnostics.__struct_fields__) >= {"requests", "hits", "replay_prefill_latency_ms"}
    assert all("handle" not in name for name in LocalKvDiagnostics.__struct_fields__)
