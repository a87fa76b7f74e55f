"""Local KV prefix reuse: eligibility fingerprints, the handle-free runtime port, the controller.

Reuse is off by default. A request may reuse a local runtime's KV cache only when the host enabled it,
the adapter negotiated a versioned ``local-kv-reuse`` capability, the destination is local and every
identity input is valid. The fingerprint binds the exact prompt-prefix bytes, the provider/model
revision, the options, the privacy policy and the runtime revision, so a cache built under one of them
is never reused under another. No cache handle ever crosses the port: the runtime keeps its handles and
is told only hashes and the complete sanitized replay payload.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from ds4_context_core._history._stable_json import stable_hash

__all__ = [
    "LOCAL_KV_DIAGNOSTICS_VERSION",
    "LOCAL_KV_ELIGIBILITY_VERSION",
    "LOCAL_KV_MAX_COUNTER",
    "LOCAL_KV_OUTCOME_STATUSES",
    "LOCAL_KV_REJECTION_CODES",
    "LOCAL_KV_RUNTIME_PORT_VERSION",
    "LocalKvDiagnostics",
    "LocalKvEligibility",
    "LocalKvEligibilityInput",
    "LocalKvExecution",
    "LocalKvHashes",
    "LocalKvHit",
    "LocalKvMiss",
    "LocalKvOutcome",
    "LocalKvRejected",
    "LocalKvReplayResult",
    "LocalKvReuseController",
    "LocalKvReuseRequest",
    "LocalKvReuseResult",
    "LocalKvRuntimePort",
    "LocalKvUnavailable",
    "evaluate_local_kv_eligibility",
]

LOCAL_KV_ELIGIBILITY_VERSION: Final = "local-kv-eligibility-v1"
LOCAL_KV_DIAGNOSTICS_VERSION: Final = "local-kv-diagnostics-v1"
LOCAL_KV_RUNTIME_PORT_VERSION: Final = "local-kv-runtime-port-v1"
# In the order they are checked: the first failing rule is the one reported.
LOCAL_KV_REJECTION_CODES: Final = (
    "disabled",
    "capability-unsupported",
    "non-local-destination",
    "invalid-provider",
    "invalid-model",
    "invalid-model-revision",
    "invalid-runtime-identity",
    "invalid-runtime-revision",
    "invalid-capability-version",
    "invalid-privacy-policy-version",
    "invalid-prompt-prefix",
    "invalid-token-count",
    "invalid-options",
)
LOCAL_KV_OUTCOME_STATUSES: Final = ("bypassed", "hit", "miss", "rejected", "unavailable")
# Counters saturate here, the largest integer a JSON reader in any language keeps exactly.
LOCAL_KV_MAX_COUNTER: Final = 2**53 - 1

_MAX_IDENTIFIER_CHARS: Final = 256
_MAX_CAPABILITY_VERSION_CHARS: Final = 64
_MAX_OPTIONS_DEPTH: Final = 32

LocalKvRejection: TypeAlias = Literal[
    "disabled",
    "capability-unsupported",
    "non-local-destination",
    "invalid-provider",
    "invalid-model",
    "invalid-model-revision",
    "invalid-runtime-identity",
    "invalid-runtime-revision",
    "invalid-capability-version",
    "invalid-privacy-policy-version",
    "invalid-prompt-prefix",
    "invalid-token-count",
    "invalid-options",
]


class LocalKvEligibilityInput(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Everything that decides whether, and under which fingerprint, a prefix may be reused."""

    enabled: bool
    capability_enabled: bool
    capability_version: str | None
    destination: str
    runtime_id: str
    runtime_revision: str
    provider: str
    model: str
    model_revision: str
    privacy_policy_version: str
    prompt_prefix: str | bytes
    system_options: Any = None
    tool_options: Any = None
    prefix_token_count: int
    context_token_count: int


class LocalKvHashes(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The component hashes (lowercase hex sha256) and the fingerprint that binds them."""

    version: str
    fingerprint: str
    prefix_hash: str
    provider_model_hash: str
    options_hash: str
    privacy_hash: str
    runtime_hash: str


class LocalKvEligibility(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """``eligible`` with hashes, or not eligible with the first failing rule as ``rejection``."""

    eligible: bool
    rejection: LocalKvRejection | None = None
    hashes: LocalKvHashes | None = None
    prefix_token_count: int = 0
    context_token_count: int = 0


def _identifier(value: Any, limit: int = _MAX_IDENTIFIER_CHARS) -> str | None:
    """The trimmed identifier, or None when it is empty, too long or holds control characters."""
    if not isinstance(value, str):
        return None
    trimmed = value.strip()
    if not trimmed or len(trimmed) > limit or not trimmed.isprintable():
        return None
    return trimmed


def _plain_json(value: Any, depth: int = 0) -> bool:
    if depth > _MAX_OPTIONS_DEPTH:
        return False
    kind = type(value)
    if value is None or kind is str or kind is bool or kind is int:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(key) is str and _plain_json(item, depth + 1) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_plain_json(item, depth + 1) for item in value)
    return False


def _token_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _reject(rejection: LocalKvRejection) -> LocalKvEligibility:
    return LocalKvEligibility(eligible=False, rejection=rejection)


def evaluate_local_kv_eligibility(request: LocalKvEligibilityInput) -> LocalKvEligibility:
    """Apply the ``local-kv-eligibility-v1`` rules in their fixed order and fingerprint an eligible input."""
    if request.enabled is not True:
        return _reject("disabled")
    if request.capability_enabled is not True or request.capability_version is None:
        return _reject("capability-unsupported")
    if request.destination != "local":
        return _reject("non-local-destination")
    provider = _identifier(request.provider)
    if provider is None:
        return _reject("invalid-provider")
    model = _identifier(request.model)
    if model is None:
        return _reject("invalid-model")
    model_revision = _identifier(request.model_revision)
    if model_revision is None:
        return _reject("invalid-model-revision")
    runtime_id = _identifier(request.runtime_id)
    if runtime_id is None:
        return _reject("invalid-runtime-identity")
    runtime_revision = _identifier(request.runtime_revision)
    if runtime_revision is None:
        return _reject("invalid-runtime-revision")
    capability_version = _identifier(request.capability_version, _MAX_CAPABILITY_VERSION_CHARS)
    if capability_version is None:
        return _reject("invalid-capability-version")
    privacy_policy_version = _identifier(request.privacy_policy_version)
    if privacy_policy_version is None:
        return _reject("invalid-privacy-policy-version")
    prefix: Any = request.prompt_prefix  # typed str | bytes, but hosts pass what they have
    if isinstance(prefix, str):
        try:
            prefix_bytes = prefix.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates have no UTF-8 form
            return _reject("invalid-prompt-prefix")
    elif isinstance(prefix, bytes):
        prefix_bytes = prefix
    else:
        return _reject("invalid-prompt-prefix")
    if not prefix_bytes:
        return _reject("invalid-prompt-prefix")
    prefix_tokens = request.prefix_token_count
    context_tokens = request.context_token_count
    if not (_token_count(prefix_tokens) and _token_count(context_tokens) and prefix_tokens <= context_tokens):
        return _reject("invalid-token-count")
    if not (_plain_json(request.system_options) and _plain_json(request.tool_options)):
        return _reject("invalid-options")

    prefix_hash = hashlib.sha256(prefix_bytes).hexdigest()
    provider_model_hash = stable_hash({"provider": provider, "model": model, "modelRevision": model_revision})
    options_hash = stable_hash({"systemOptions": request.system_options, "toolOptions": request.tool_options})
    privacy_hash = stable_hash({"destination": "local", "privacyPolicyVersion": privacy_policy_version})
    runtime_hash = stable_hash(
        {
            "runtimeId": runtime_id,
            "runtimeRevision": runtime_revision,
            "capabilityVersion": capability_version,
        }
    )
    fingerprint = stable_hash(
        {
            "version": LOCAL_KV_ELIGIBILITY_VERSION,
            "prefixHash": prefix_hash,
            "providerModelHash": provider_model_hash,
            "optionsHash": options_hash,
            "privacyHash": privacy_hash,
            "runtimeHash": runtime_hash,
        }
    )
    return LocalKvEligibility(
        eligible=True,
        hashes=LocalKvHashes(
            version=LOCAL_KV_ELIGIBILITY_VERSION,
            fingerprint=fingerprint,
            prefix_hash=prefix_hash,
            provider_model_hash=provider_model_hash,
            options_hash=options_hash,
            privacy_hash=privacy_hash,
            runtime_hash=runtime_hash,
        ),
        prefix_token_count=prefix_tokens,
        context_token_count=context_tokens,
    )


class LocalKvReuseRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What the port receives: hashes, token counts and the complete sanitized payload. Never a handle."""

    hashes: LocalKvHashes
    payload: Any
    prefix_token_count: int
    context_token_count: int


class LocalKvHit(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="status", tag="hit"):
    """The runtime reused its cached prefix and completed the request."""

    output: Any
    saved_prefill_tokens: int
    prefill_latency_ms: float


class LocalKvMiss(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="status", tag="miss"):
    """No cached prefix for this fingerprint."""


class LocalKvRejected(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="status", tag="rejected"
):
    """The runtime refused reuse (for example its cache was built under another revision)."""


class LocalKvUnavailable(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="status", tag="unavailable"
):
    """The runtime cannot reuse right now (cache evicted, busy, restarting)."""


LocalKvReuseResult: TypeAlias = LocalKvHit | LocalKvMiss | LocalKvRejected | LocalKvUnavailable


class LocalKvReplayResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A full prefill of the complete sanitized payload."""

    output: Any
    prefill_tokens: int
    prefill_latency_ms: float


@runtime_checkable
class LocalKvRuntimePort(Protocol):
    """A host-owned port into a local runtime's KV cache. It keeps its handles; none ever cross here.

    ``shutdown()`` is optional: a port that has nothing to release need not define it.
    """

    async def try_reuse(self, request: LocalKvReuseRequest) -> LocalKvReuseResult:
        """Reuse the cached prefix for ``request.hashes.fingerprint`` if the runtime still has it."""
        ...

    async def full_replay(self, request: LocalKvReuseRequest) -> LocalKvReplayResult:
        """Prefill and complete the whole payload without reuse."""
        ...


class LocalKvDiagnostics(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``local-kv-diagnostics-v1``: numbers only, saturating at ``LOCAL_KV_MAX_COUNTER``."""

    version: str = LOCAL_KV_DIAGNOSTICS_VERSION
    requests: int = 0
    eligible_requests: int = 0
    bypassed_requests: int = 0
    hits: int = 0
    misses: int = 0
    rejected: int = 0
    unavailable: int = 0
    full_replays: int = 0
    transport_failures: int = 0
    prefix_tokens: int = 0
    context_tokens: int = 0
    saved_prefill_tokens: int = 0
    replay_prefill_tokens: int = 0
    replay_prefill_latency_ms: float = 0.0


class LocalKvOutcome(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """What happened to one request, metadata only (safe in completion results and logs)."""

    status: Literal["bypassed", "hit", "miss", "rejected", "unavailable"]
    replayed: bool = False
    failed: bool = False
    rejection: LocalKvRejection | None = None
    fingerprint: str | None = None
    saved_prefill_tokens: int = 0
    replay_prefill_tokens: int = 0


class LocalKvExecution(msgspec.Struct, frozen=True, kw_only=True):
    """The controller's answer: the outcome, plus the output when the port produced one.

    ``output`` is None when the request was bypassed (send it through the normal transport) or when the
    full replay failed (``outcome.failed``).
    """

    outcome: LocalKvOutcome
    output: Any = None


_COUNTER_FIELDS: Final = tuple(
    field for field in LocalKvDiagnostics.__struct_fields__ if field not in ("version",)
)


def _valid_hit(result: LocalKvHit, prefix_tokens: int) -> bool:
    saved = result.saved_prefill_tokens
    latency = result.prefill_latency_ms
    return (
        type(saved) is int
        and 0 <= saved <= prefix_tokens
        and isinstance(latency, int | float)
        and not isinstance(latency, bool)
        and math.isfinite(latency)
        and latency >= 0
    )


def _valid_replay(result: Any) -> bool:
    if not isinstance(result, LocalKvReplayResult):
        return False
    latency = result.prefill_latency_ms
    return (
        type(result.prefill_tokens) is int
        and result.prefill_tokens >= 0
        and isinstance(latency, int | float)
        and not isinstance(latency, bool)
        and math.isfinite(latency)
        and latency >= 0
    )


class LocalKvReuseController:
    """Runs one request through a :class:`LocalKvRuntimePort` and keeps the aggregate counters.

    Ineligible requests are bypassed without touching the port. A hit is validated; a malformed hit or
    an exception from ``try_reuse`` counts as unavailable. Miss, rejected and unavailable fall back to a
    full replay; a failing replay is counted as a transport failure and reported, never raised.
    """

    def __init__(self, port: LocalKvRuntimePort | None) -> None:
        self._port = port
        self._counters: dict[str, float] = dict.fromkeys(_COUNTER_FIELDS, 0)
        self._closed = False

    @property
    def port_available(self) -> bool:
        """Whether a port was injected (and the controller is not shut down)."""
        return self._port is not None and not self._closed

    def _add(self, field: str, amount: float) -> None:
        if not (amount > 0) or not math.isfinite(amount):  # negative, zero, nan and inf are ignored
            return
        self._counters[field] = min(self._counters[field] + amount, LOCAL_KV_MAX_COUNTER)

    def diagnostics(self) -> LocalKvDiagnostics:
        """A snapshot of the counters."""
        values: dict[str, Any] = {}
        for field, value in self._counters.items():
            values[field] = float(value) if field == "replay_prefill_latency_ms" else int(value)
        return LocalKvDiagnostics(**values)

    async def execute(self, eligibility: LocalKvEligibility, payload: Any) -> LocalKvExecution:
        """Reuse or replay ``payload`` (already sanitized) according to ``eligibility``."""
        self._add("requests", 1)
        port = self._port
        if not eligibility.eligible or eligibility.hashes is None or port is None or self._closed:
            self._add("bypassed_requests", 1)
            rejection = eligibility.rejection if not eligibility.eligible else "capability-unsupported"
            return LocalKvExecution(outcome=LocalKvOutcome(status="bypassed", rejection=rejection))
        hashes = eligibility.hashes
        prefix_tokens = eligibility.prefix_token_count
        self._add("eligible_requests", 1)
        self._add("prefix_tokens", prefix_tokens)
        self._add("context_tokens", eligibility.context_token_count)
        request = LocalKvReuseRequest(
            hashes=hashes,
            payload=payload,
            prefix_token_count=prefix_tokens,
            context_token_count=eligibility.context_token_count,
        )
        status: Literal["miss", "rejected", "unavailable"]
        try:
            result = await port.try_reuse(request)
        except Exception:
            result = LocalKvUnavailable()
        if isinstance(result, LocalKvHit) and _valid_hit(result, prefix_tokens):
            self._add("hits", 1)
            self._add("saved_prefill_tokens", result.saved_prefill_tokens)
            outcome = LocalKvOutcome(
                status="hit", fingerprint=hashes.fingerprint, saved_prefill_tokens=result.saved_prefill_tokens
            )
            return LocalKvExecution(outcome=outcome, output=result.output)
        if isinstance(result, LocalKvMiss):
            status = "miss"
            self._add("misses", 1)
        elif isinstance(result, LocalKvRejected):
            status = "rejected"
            self._add("rejected", 1)
        else:  # unavailable, a malformed hit or anything else the port returned
            status = "unavailable"
            self._add("unavailable", 1)
        try:
            replay = await port.full_replay(request)
            if not _valid_replay(replay):
                raise TypeError("malformed replay result")
        except Exception:
            self._add("transport_failures", 1)
            outcome = LocalKvOutcome(
                status=status, replayed=False, failed=True, fingerprint=hashes.fingerprint
            )
            return LocalKvExecution(outcome=outcome)
        self._add("full_replays", 1)
        self._add("replay_prefill_tokens", replay.prefill_tokens)
        self._add("replay_prefill_latency_ms", replay.prefill_latency_ms)
        outcome = LocalKvOutcome(
            status=status,
            replayed=True,
            fingerprint=hashes.fingerprint,
            replay_prefill_tokens=replay.prefill_tokens,
        )
        return LocalKvExecution(outcome=outcome, output=replay.output)

    async def shutdown(self) -> bool:
        """Release the port once; later calls do nothing. False when the port's shutdown raised."""
        if self._closed:
            return True
        self._closed = True
        shutdown = getattr(self._port, "shutdown", None)
        if shutdown is None:
            return True
        try:
            await shutdown()
        except Exception:
            return False
        return True
