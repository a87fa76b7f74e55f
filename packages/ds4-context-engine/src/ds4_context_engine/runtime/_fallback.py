"""Ordered fallback chains: bounded retries with capped exponential backoff, then failover.

Only transient failures (timeouts, rate limits, 5xx, connection errors) are retried or failed over; any
other failure is returned at once, because another attempt would send the same bad request again. The
whole chain runs under a wall-clock deadline (``FALLBACK_DEFAULT_DEADLINE_S`` unless told otherwise):
every attempt and every backoff wait fits in what is left of it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

import anyio
import msgspec

from ds4_context_core.adapter import (
    CompletionFailure,
    CompletionFallback,
    CompletionResult,
    completion_fallback,
)
from ds4_context_engine.providers import ModelReference, ModelReferenceError, parse_model_reference

from ._errors import RuntimeOptionsError

__all__ = [
    "ATTEMPT_OVERRIDABLE_FIELDS",
    "FALLBACK_DEFAULT_ATTEMPTS",
    "FALLBACK_DEFAULT_DEADLINE_S",
    "FALLBACK_EFFORT_LEVELS",
    "FALLBACK_ERROR_CODES",
    "FALLBACK_INITIAL_BACKOFF_MS",
    "FALLBACK_MAX_ATTEMPTS",
    "FALLBACK_MAX_BACKOFF_MS",
    "AttemptContext",
    "AttemptPolicy",
    "AttemptResolver",
    "AttemptSender",
    "FailoverRecord",
    "FallbackChainEntry",
    "FallbackRouter",
    "RetryPolicy",
    "RoutedResult",
    "parse_fallback_chain",
]

FALLBACK_MAX_ATTEMPTS: Final = 10
FALLBACK_DEFAULT_ATTEMPTS: Final = 1
# A whole turn's routing (every attempt, every wait): ten minutes is several slow full-length answers.
FALLBACK_DEFAULT_DEADLINE_S: Final = 600.0
FALLBACK_INITIAL_BACKOFF_MS: Final = 1000
FALLBACK_MAX_BACKOFF_MS: Final = 15000
FALLBACK_EFFORT_LEVELS: Final = ("high", "low", "medium", "minimal", "xhigh")
# A per-attempt resolver may change only these; model, messages, sandbox and the rest stay protected.
ATTEMPT_OVERRIDABLE_FIELDS: Final = ("allowed_tools", "disallowed_tools", "permission_mode")
FALLBACK_ERROR_CODES: Final = (
    "fallback-attempts-out-of-range",
    "fallback-chain-empty",
    "fallback-invalid-effort",
    "fallback-invalid-entry",
    "fallback-invalid-model",
    "fallback-invalid-override",
    "fallback-invalid-retry-policy",
    "fallback-protected-field",
    "runtime-backend-unavailable",
)
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.:*-]{1,128}")
_PERMISSION_MODE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


class FallbackChainEntry(msgspec.Struct, frozen=True, kw_only=True):
    model: ModelReference
    effort: str | None = None
    attempts: int = FALLBACK_DEFAULT_ATTEMPTS


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Backoff before retry ``n`` (0-based) is ``min(initial * 2**n, max)``; Retry-After waits longer.

    A Retry-After above ``max_retry_after_ms`` is not waited out: the router fails over instead.
    """

    initial_backoff_ms: int = FALLBACK_INITIAL_BACKOFF_MS
    max_backoff_ms: int = FALLBACK_MAX_BACKOFF_MS
    max_retry_after_ms: int = 60_000

    def __post_init__(self) -> None:
        if not (0 <= self.initial_backoff_ms <= self.max_backoff_ms) or self.max_retry_after_ms < 0:
            raise RuntimeOptionsError(
                "fallback-invalid-retry-policy", "backoff values must satisfy 0 <= initial <= max"
            )

    def backoff_ms(self, retry_index: int) -> int:
        if retry_index >= 32:
            return self.max_backoff_ms
        return min(self.initial_backoff_ms * (1 << retry_index), self.max_backoff_ms)


class AttemptPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The only request fields a route attempt may project differently."""

    allowed_tools: tuple[str, ...] | None = None
    disallowed_tools: tuple[str, ...] | None = None
    permission_mode: str | None = None


class AttemptContext(msgspec.Struct, frozen=True, kw_only=True):
    entry: FallbackChainEntry
    entry_index: int
    attempt: int
    policy: AttemptPolicy


class FailoverRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One failed attempt: which route, why, and how long the router waited afterwards."""

    model: str
    entry_index: int
    attempt: int
    kind: str
    reason: str
    http_status: int | None = None
    retry_after_ms: int | None = None
    waited_ms: int = 0


class RoutedResult(msgspec.Struct, frozen=True, kw_only=True):
    """The final result, the route that produced it and every failed attempt before it."""

    result: CompletionResult
    model: ModelReference
    attempts: int
    failovers: tuple[FailoverRecord, ...]


AttemptSender = Callable[[AttemptContext], Awaitable[CompletionResult]]
AttemptResolver = Callable[[AttemptContext], Mapping[str, Any] | None]


def _entry(raw: object, index: int) -> FallbackChainEntry:
    if isinstance(raw, FallbackChainEntry):
        candidate: Mapping[str, Any] = {"model": raw.model, "effort": raw.effort, "attempts": raw.attempts}
    elif isinstance(raw, str | ModelReference):
        candidate = {"model": raw}
    elif isinstance(raw, Mapping):
        candidate = raw
    else:
        raise RuntimeOptionsError("fallback-invalid-entry", f"fallback entry {index} must be an object")
    unknown = set(candidate) - {"model", "effort", "attempts"}
    if unknown:
        raise RuntimeOptionsError(
            "fallback-invalid-entry",
            f"fallback entry {index} has unknown fields {sorted(map(str, unknown))[:5]}",
        )
    model = candidate.get("model")
    try:
        reference = model if isinstance(model, ModelReference) else parse_model_reference(model)  # type: ignore[arg-type]
    except ModelReferenceError as error:
        raise RuntimeOptionsError("fallback-invalid-model", f"fallback entry {index}: {error}") from error
    effort = candidate.get("effort")
    if effort is not None and effort not in FALLBACK_EFFORT_LEVELS:
        raise RuntimeOptionsError(
            "fallback-invalid-effort",
            f"fallback entry {index}: effort must be one of {FALLBACK_EFFORT_LEVELS}",
        )
    attempts = candidate.get("attempts", FALLBACK_DEFAULT_ATTEMPTS)
    if attempts is None:
        attempts = FALLBACK_DEFAULT_ATTEMPTS
    if type(attempts) is not int or not 1 <= attempts <= FALLBACK_MAX_ATTEMPTS:
        raise RuntimeOptionsError(
            "fallback-attempts-out-of-range",
            f"fallback entry {index}: attempts must be an integer from 1 to {FALLBACK_MAX_ATTEMPTS}",
        )
    return FallbackChainEntry(model=reference, effort=effort, attempts=attempts)


def parse_fallback_chain(entries: Iterable[object]) -> tuple[FallbackChainEntry, ...]:
    """Validate ``[{model, effort?, attempts?}, ...]`` (plain reference strings are accepted too)."""
    if isinstance(entries, str | bytes | Mapping):
        raise RuntimeOptionsError("fallback-invalid-entry", "a fallback chain must be a list of entries")
    chain = tuple(_entry(raw, index) for index, raw in enumerate(entries))
    if not chain:
        raise RuntimeOptionsError("fallback-chain-empty", "a fallback chain needs at least one entry")
    return chain


def _names(value: object, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise RuntimeOptionsError("fallback-invalid-override", f"{field} must be a list of tool names")
    names = tuple(value)
    if not all(isinstance(name, str) and _TOOL_NAME.fullmatch(name) for name in names):
        raise RuntimeOptionsError("fallback-invalid-override", f"{field} must contain valid tool names")
    return names


def _apply_resolution(base: AttemptPolicy, resolution: Mapping[str, Any] | None) -> AttemptPolicy:
    if resolution is None:
        return base
    if not isinstance(resolution, Mapping):
        raise RuntimeOptionsError("fallback-invalid-override", "an attempt resolution must be a mapping")
    protected = sorted(str(key) for key in resolution if key not in ATTEMPT_OVERRIDABLE_FIELDS)
    if protected:
        raise RuntimeOptionsError(
            "fallback-protected-field",
            f"a route attempt may change only {ATTEMPT_OVERRIDABLE_FIELDS}; refused: {protected[:5]}",
        )
    policy = base
    if "allowed_tools" in resolution:
        policy = msgspec.structs.replace(
            policy, allowed_tools=_names(resolution["allowed_tools"], "allowed_tools")
        )
    if "disallowed_tools" in resolution:
        policy = msgspec.structs.replace(
            policy, disallowed_tools=_names(resolution["disallowed_tools"], "disallowed_tools")
        )
    if "permission_mode" in resolution:
        mode = resolution["permission_mode"]
        if mode is not None and not (isinstance(mode, str) and _PERMISSION_MODE.fullmatch(mode)):
            raise RuntimeOptionsError(
                "fallback-invalid-override", "permission_mode must be a short identifier"
            )
        policy = msgspec.structs.replace(policy, permission_mode=mode)
    return policy


def _raised(error: Exception) -> CompletionFallback:
    # Not transient: a transport that raises once will raise again for the same request.
    failure = CompletionFailure(kind="client-error", reason=f"the transport raised {type(error).__name__}")
    return completion_fallback("transport-failed", failure=failure)


def _timed_out(seconds: float) -> CompletionFallback:
    failure = CompletionFailure(kind="timeout", reason=f"the attempt took longer than {seconds:g} s")
    return completion_fallback("transport-failed", failure=failure)


def _deadline_passed(seconds: float) -> CompletionFallback:
    failure = CompletionFailure(kind="timeout", reason=f"the fallback chain's {seconds:g} s deadline passed")
    return completion_fallback("transport-failed", failure=failure)


def _positive(value: float | None, name: str) -> float | None:
    if value is not None and not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
        raise RuntimeOptionsError("fallback-invalid-retry-policy", f"{name} must be a positive number")
    return None if value is None else float(value)


class FallbackRouter:
    """Runs one logical request over an ordered chain of models.

    ``send`` performs one attempt for an :class:`AttemptContext`; ``resolve_attempt`` may project the tool
    allow/deny lists and permission mode per route, nothing else. ``deadline_s`` bounds the whole run
    in wall-clock time (default ``FALLBACK_DEFAULT_DEADLINE_S``; ``None`` for no bound): an attempt is
    cut when it passes, a backoff that would pass it is not waited out, and the run then returns a
    ``timeout`` failure. ``attempt_timeout_s`` optionally bounds each attempt as well. ``sleep`` and
    ``clock`` are injectable for tests.
    """

    def __init__(
        self,
        chain: Iterable[object],
        *,
        retry_policy: RetryPolicy | None = None,
        base_policy: AttemptPolicy | None = None,
        resolve_attempt: AttemptResolver | None = None,
        attempt_timeout_s: float | None = None,
        deadline_s: float | None = FALLBACK_DEFAULT_DEADLINE_S,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.chain = parse_fallback_chain(chain)
        self.retry_policy = retry_policy or RetryPolicy()
        self._base_policy = base_policy or AttemptPolicy()
        self._resolve_attempt = resolve_attempt
        self._attempt_timeout_s = _positive(attempt_timeout_s, "attempt_timeout_s")
        self.deadline_s = _positive(deadline_s, "deadline_s")
        self._sleep = sleep
        self._clock = clock

    async def _attempt(
        self, send: AttemptSender, context: AttemptContext, remaining_s: float | None
    ) -> CompletionResult:
        limits = [limit for limit in (self._attempt_timeout_s, remaining_s) if limit is not None]
        try:
            if not limits:
                return await send(context)
            with anyio.move_on_after(min(limits)) as scope:
                result = await send(context)
            if scope.cancelled_caught:
                if remaining_s is not None and remaining_s <= min(limits) and self.deadline_s is not None:
                    return _deadline_passed(self.deadline_s)
                return _timed_out(min(limits))
            return result
        except Exception as error:  # a raising transport must not lose the user's turn
            return _raised(error)

    async def run(self, send: AttemptSender) -> RoutedResult:
        failovers: list[FailoverRecord] = []
        attempts = 0
        result: CompletionResult | None = None
        deadline = None if self.deadline_s is None else self._clock() + self.deadline_s

        def remaining() -> float | None:
            return None if deadline is None else deadline - self._clock()

        for entry_index, entry in enumerate(self.chain):
            for attempt in range(1, entry.attempts + 1):
                left = remaining()
                if left is not None and left <= 0 and self.deadline_s is not None:
                    model = self.chain[failovers[-1].entry_index].model if failovers else entry.model
                    return RoutedResult(
                        result=_deadline_passed(self.deadline_s),
                        model=model,
                        attempts=attempts,
                        failovers=tuple(failovers),
                    )
                context = AttemptContext(
                    entry=entry, entry_index=entry_index, attempt=attempt, policy=self._base_policy
                )
                if self._resolve_attempt is not None:
                    policy = _apply_resolution(self._base_policy, self._resolve_attempt(context))
                    context = msgspec.structs.replace(context, policy=policy)
                attempts += 1
                result = await self._attempt(send, context, left)
                failure = result.failure if isinstance(result, CompletionFallback) else None
                if failure is None or not failure.transient:
                    return RoutedResult(
                        result=result, model=entry.model, attempts=attempts, failovers=tuple(failovers)
                    )
                waited = 0
                last_attempt_here = attempt == entry.attempts
                retry_after = failure.retry_after_ms
                if not last_attempt_here:
                    if retry_after is not None and retry_after > self.retry_policy.max_retry_after_ms:
                        last_attempt_here = True  # too long to wait: move on to the next route
                    else:
                        waited = max(self.retry_policy.backoff_ms(attempt - 1), retry_after or 0)
                        left = remaining()
                        if left is not None and waited / 1000 >= left:
                            waited, last_attempt_here = 0, True  # the wait would outlast the deadline
                failovers.append(
                    FailoverRecord(
                        model=entry.model.reference,
                        entry_index=entry_index,
                        attempt=attempt,
                        kind=failure.kind,
                        reason=failure.reason,
                        http_status=failure.http_status,
                        retry_after_ms=retry_after,
                        waited_ms=waited,
                    )
                )
                if last_attempt_here:
                    break
                if waited:
                    await self._sleep(waited / 1000)
        assert result is not None  # the chain is never empty
        return RoutedResult(
            result=result, model=self.chain[-1].model, attempts=attempts, failovers=tuple(failovers)
        )
