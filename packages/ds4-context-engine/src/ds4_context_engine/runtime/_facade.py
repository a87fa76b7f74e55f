"""One call for a host: route a completion request over a fallback chain of provider transports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol, Self, runtime_checkable

import anyio
import msgspec

from ds4_context_core import ModelDescriptor
from ds4_context_core.adapter import CompletionRequest, CompletionResult
from ds4_context_engine.providers import ModelReference, StreamEvent

from ._errors import RuntimeOptionsError
from ._fallback import (
    FALLBACK_DEFAULT_DEADLINE_S,
    AttemptContext,
    AttemptPolicy,
    AttemptResolver,
    FallbackRouter,
    RetryPolicy,
    RoutedResult,
)

__all__ = ["ProviderRuntime", "ProviderTransport", "RoutedStreamCallback"]

RoutedStreamCallback = Callable[[AttemptContext, StreamEvent], None]
"""Receives each delta with the attempt it belongs to: a new attempt starts its answer from the top."""


@runtime_checkable
class ProviderTransport(Protocol):
    """Anything that sends one request and never raises: every transport in ``providers`` is one."""

    async def complete(self, request: CompletionRequest) -> CompletionResult: ...


def _same_limits(reference: ModelReference, base: ModelDescriptor | None) -> ModelDescriptor | None:
    if base is None:
        return None
    return msgspec.structs.replace(base, provider=reference.provider, id=reference.model)


class ProviderRuntime:
    """Sends a ``CompletionRequest`` along an ordered chain of ``<provider>:<model>`` routes.

    ``transports`` maps provider ids to transports; every provider in the chain needs one (checked
    here, before anything is sent). Each route's request names the route's provider and model;
    ``describe_model`` gives its limits (``model_descriptor``); by default a route keeps the request's
    limits with its own provider and model id. Per route, only the tool lists and
    permission mode may differ (see :class:`AttemptPolicy`): ``allowed_tools``/``disallowed_tools``
    filter the request's tools; messages, system prompt, limits and continuation stay as given.
    ``deadline_s`` bounds the whole routed call in wall-clock time (see :class:`FallbackRouter`).
    """

    def __init__(
        self,
        transports: Mapping[str, ProviderTransport],
        chain: Iterable[object],
        *,
        retry_policy: RetryPolicy | None = None,
        base_policy: AttemptPolicy | None = None,
        resolve_attempt: AttemptResolver | None = None,
        describe_model: Callable[
            [ModelReference, ModelDescriptor | None], ModelDescriptor | None
        ] = _same_limits,
        attempt_timeout_s: float | None = None,
        deadline_s: float | None = FALLBACK_DEFAULT_DEADLINE_S,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._router = FallbackRouter(
            chain,
            retry_policy=retry_policy,
            base_policy=base_policy,
            resolve_attempt=resolve_attempt,
            attempt_timeout_s=attempt_timeout_s,
            deadline_s=deadline_s,
            sleep=sleep,
        )
        missing = sorted({entry.model.provider for entry in self._router.chain} - set(transports))
        if missing:
            raise RuntimeOptionsError(
                "runtime-backend-unavailable", f"no transport configured for providers {missing[:5]}"
            )
        self._transports = dict(transports)
        self._describe_model = describe_model

    @property
    def chain(self) -> tuple[ModelReference, ...]:
        return tuple(entry.model for entry in self._router.chain)

    def _attempt_request(self, request: CompletionRequest, context: AttemptContext) -> CompletionRequest:
        reference = context.entry.model
        tools = request.tools
        policy = context.policy
        if policy.allowed_tools is not None:
            allowed = set(policy.allowed_tools)
            tools = tuple(tool for tool in tools if tool.name in allowed)
        if policy.disallowed_tools:
            denied = set(policy.disallowed_tools)
            tools = tuple(tool for tool in tools if tool.name not in denied)
        continuation = request.continuation
        if continuation is not None and (
            continuation.provider != reference.provider or continuation.model != reference.model
        ):
            continuation = None
        return msgspec.structs.replace(
            request,
            provider=reference.provider,
            model=reference.model,
            model_descriptor=self._describe_model(reference, request.model_descriptor),
            tools=tools,
            continuation=continuation,
        )

    async def complete(self, request: CompletionRequest) -> RoutedResult:
        """Route ``request``; the result says which route answered and every failover before it."""

        async def send(context: AttemptContext) -> CompletionResult:
            transport = self._transports[context.entry.model.provider]
            return await transport.complete(self._attempt_request(request, context))

        return await self._router.run(send)

    async def stream(self, request: CompletionRequest, on_event: RoutedStreamCallback) -> RoutedResult:
        """Route ``request`` as :meth:`complete` does, streaming each attempt's answer to ``on_event``.

        A transport without ``stream()`` is called with ``complete()`` (no deltas). When an attempt fails
        mid-stream and the router retries or fails over, the next attempt's deltas come with its own
        :class:`AttemptContext`: a host showing the answer starts over when the context changes.
        """

        async def send(context: AttemptContext) -> CompletionResult:
            transport = self._transports[context.entry.model.provider]
            attempt = self._attempt_request(request, context)
            streamer = getattr(transport, "stream", None)
            if streamer is None:
                return await transport.complete(attempt)
            result: CompletionResult = await streamer(attempt, lambda event: on_event(context, event))
            return result

        return await self._router.run(send)

    async def aclose(self) -> None:
        """Close every transport that has an ``aclose()`` (the HTTP transports' reused clients)."""
        for transport in self._transports.values():
            close = getattr(transport, "aclose", None)
            if close is not None:
                await close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
