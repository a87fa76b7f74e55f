"""The runtime facade: route a completion over a fallback chain, and run agent turns (``create_runtime``)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

import anyio
import msgspec

from ds4_context_core import ModelDescriptor
from ds4_context_core.adapter import CompletionRequest, CompletionResult, ToolDefinition
from ds4_context_core.privacy import PrivacyPolicy
from ds4_context_core.summaries import SummaryOutcome
from ds4_context_core.tokens import TokenCalibration, TokenCalibrator
from ds4_context_engine.providers import ModelReference, StreamEvent

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

from ._errors import RuntimeOptionsError
from ._fallback import (
    FALLBACK_DEFAULT_DEADLINE_S,
    AttemptContext,
    AttemptPolicy,
    AttemptResolver,
    FallbackRouter,
    RetryPolicy,
    RoutedResult,
    parse_fallback_chain,
)
from ._run_options import RunOptions, RunResult
from ._sandbox import SandboxPolicy
from ._sandbox_engine import SandboxEngine
from ._tool_lifecycle import ToolLifecycleSink
from ._toolbox import CombinedToolbox, HostTool, HostToolbox, Toolbox
from ._tools import ManagedToolbox, PersistArtifact

__all__ = [
    "AgentRuntime",
    "ProviderRuntime",
    "ProviderTransport",
    "RoutedStreamCallback",
    "create_runtime",
    "default_transport",
]

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

    async def stream(
        self,
        request: CompletionRequest,
        on_event: RoutedStreamCallback,
        *,
        prepare: Callable[[CompletionRequest, AttemptContext], CompletionRequest] | None = None,
    ) -> RoutedResult:
        """Route ``request`` as :meth:`complete` does, streaming each attempt's answer to ``on_event``.

        A transport without ``stream()`` is called with ``complete()`` (no deltas). When an attempt fails
        mid-stream and the router retries or fails over, the next attempt's deltas come with its own
        :class:`AttemptContext`: a host showing the answer starts over when the context changes.
        ``prepare`` may adjust each attempt's request (the run loop drops anonymous live input from a
        retried attempt, which must not see it twice).
        """

        async def send(context: AttemptContext) -> CompletionResult:
            transport = self._transports[context.entry.model.provider]
            attempt = self._attempt_request(request, context)
            if prepare is not None:
                attempt = prepare(attempt, context)
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


# --- the agent runtime (seed 001's facade): create_runtime(...) then run(system_prompt, options) ---------

_DEFAULT_CONTEXT_WINDOW = 128_000
_DEFAULT_OUTPUT_TOKENS = 4096


def default_transport(provider: str, privacy_policy: PrivacyPolicy | None = None) -> ProviderTransport:
    """The transport a bare provider id means: OpenAI chat, Anthropic Messages, or a local server.

    ``ollama`` and ``lmstudio`` are the local servers at their usual ports (``LocalProviderDefinition``
    defaults); any other provider needs an explicit transport (``runtime-backend-unavailable``).
    """
    from ds4_context_engine import providers  # noqa: PLC0415 - httpx only when a transport is built

    if provider == "openai":
        return providers.OpenAIChatTransport(privacy_policy=privacy_policy)
    if provider == "anthropic":
        return providers.AnthropicMessagesTransport(privacy_policy=privacy_policy)
    if provider in ("ollama", "lmstudio"):
        definition = providers.parse_local_provider({"id": provider, "type": provider})
        return providers.local_provider_transport(definition, privacy_policy=privacy_policy)
    raise RuntimeOptionsError(
        "runtime-backend-unavailable", f"no transport configured for provider {provider[:64]!r}"
    )


class AgentRuntime:
    """Runs agent turns in one workspace; built by :func:`create_runtime`.

    ``await runtime.run(system_prompt, RunOptions(...))`` returns a :class:`RunResult`; it never raises
    for an expected failure (the result carries an error code). Token calibration learned from each
    answer's usage is kept per ``<provider>:<model>`` for the runtime's lifetime.
    """

    def __init__(
        self,
        *,
        workspace: Path,
        toolbox: Toolbox,
        transports: Mapping[str, ProviderTransport] | None,
        lifecycle_sink: ToolLifecycleSink | None,
        models: Mapping[str, ModelDescriptor],
        privacy_policy: PrivacyPolicy | None,
        retry_policy: RetryPolicy | None,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.workspace = workspace
        self.toolbox = toolbox
        self._transports: dict[str, ProviderTransport] = dict(transports or {})
        self._explicit = transports is not None
        self._lifecycle_sink = lifecycle_sink
        self._models = dict(models)
        self._privacy_policy = privacy_policy
        self._retry_policy = retry_policy
        self._sleep = sleep
        self._calibrators: dict[str, TokenCalibrator] = {}
        # LLM summaries (RunOptions.summary_model): outcomes per session, kept for the runtime's lifetime,
        # and, while the runtime is entered, the task group where a summary may finish between turns
        self._summaries: dict[str, dict[str, SummaryOutcome]] = {}
        self._background: TaskGroup | None = None

    def transport(self, provider: str) -> ProviderTransport:
        found = self._transports.get(provider)
        if found is None:
            if self._explicit:
                raise RuntimeOptionsError(
                    "runtime-backend-unavailable", f"no transport configured for provider {provider[:64]!r}"
                )
            found = self._transports[provider] = default_transport(provider, self._privacy_policy)
        return found

    def _router(
        self,
        chain: Sequence[object],
        policy: AttemptPolicy,
        attempt_timeout_s: float | None,
        deadline_s: float | None,
    ) -> ProviderRuntime:
        entries = parse_fallback_chain(chain)
        transports = {entry.model.provider: self.transport(entry.model.provider) for entry in entries}
        return ProviderRuntime(
            transports,
            entries,
            retry_policy=self._retry_policy,
            base_policy=policy,
            attempt_timeout_s=attempt_timeout_s,
            deadline_s=deadline_s,
            sleep=self._sleep,
        )

    def _describe(self, reference: ModelReference, options: RunOptions) -> ModelDescriptor:
        known = self._models.get(reference.reference)
        window = options.context_window or (known.context_window if known else _DEFAULT_CONTEXT_WINDOW)
        output = options.max_output_tokens or (known.max_tokens if known else None) or _DEFAULT_OUTPUT_TOKENS
        return ModelDescriptor(
            provider=reference.provider, id=reference.model, context_window=window, max_tokens=output
        )

    def _route_transport(self, reference: ModelReference) -> object | None:
        """The transport ``reference`` goes through, or ``None`` when the runtime has none for it."""
        try:
            return self.transport(reference.provider)
        except RuntimeOptionsError:
            return None

    def _wire_format(self, reference: ModelReference) -> str | None:
        wire = getattr(self._route_transport(reference), "interop_format", None)
        return wire if isinstance(wire, str) else None

    def _request_overhead(
        self, reference: ModelReference, model: ModelDescriptor, system: str, tools: Sequence[ToolDefinition]
    ) -> int | None:
        from ds4_context_engine.providers import HttpTransport, request_overhead_tokens  # noqa: PLC0415

        transport = self._route_transport(reference)
        if not isinstance(transport, HttpTransport):
            return None
        return request_overhead_tokens(transport, model=model, system=system or None, tools=tools)

    def calibration(self, reference: str) -> TokenCalibration | None:
        """What the runtime learned about ``reference``'s token counts so far (``None`` before any usage)."""
        calibrator = self._calibrators.get(reference)
        return None if calibrator is None else calibrator.calibration()

    async def run(self, system_prompt: str, options: RunOptions) -> RunResult:
        """Run one agent turn; see :class:`RunOptions` for what it takes and :class:`RunResult` for what
        it gives back."""
        from ._run import RunContext, run_turn  # noqa: PLC0415 - the planner loads with the first turn

        context = RunContext(
            build_router=self._router,
            toolbox=self.toolbox,
            workspace=self.workspace,
            lifecycle_sink=self._lifecycle_sink,
            describe_model=self._describe,
            calibrators=self._calibrators,
            wire_format=self._wire_format,
            request_overhead=self._request_overhead,
            summary_transport=self._route_transport,
            summaries=self._summaries,
            background=self._background,
        )
        return await run_turn(context, system_prompt, options)

    async def aclose(self) -> None:
        """Close the transports' HTTP clients (a transport passed in is closed too, if it can be)."""
        for transport in self._transports.values():
            close = getattr(transport, "aclose", None)
            if close is not None:
                await close()

    async def __aenter__(self) -> Self:
        """Enter the runtime: background summaries may then outlive the turn that asked for them."""
        group = anyio.create_task_group()
        await group.__aenter__()
        self._background = group
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        group, self._background = self._background, None
        try:
            if group is not None:
                group.cancel_scope.cancel()  # a summary still out is dropped: nothing waits for it
                await group.__aexit__(None, None, None)
        finally:
            await self.aclose()


def create_runtime(
    *,
    workspace: str | os.PathLike[str],
    additional_read_roots: Iterable[str | os.PathLike[str]] = (),
    additional_write_roots: Iterable[str | os.PathLike[str]] = (),
    sandbox_policy: SandboxPolicy | None = None,
    sandbox_engine: SandboxEngine | None = None,
    tool_lifecycle_sink: ToolLifecycleSink | None = None,
    persist_artifact: PersistArtifact | None = None,
    tools: Iterable[HostTool] = (),
    managed_tools: bool = True,
    transports: Mapping[str, ProviderTransport] | None = None,
    models: Mapping[str, ModelDescriptor] | None = None,
    privacy_policy: PrivacyPolicy | None = None,
    retry_policy: RetryPolicy | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> AgentRuntime:
    """The agent runtime for ``workspace`` (an existing directory).

    The managed tools (``Read``, ``Write``, ``Edit``, ``Glob``, ``Grep``, ``Bash``) work inside the
    workspace plus ``additional_read_roots`` / ``additional_write_roots``, under ``sandbox_policy`` and
    ``sandbox_engine``; oversized output goes to ``persist_artifact``. ``tools`` adds the host's own
    :class:`HostTool` functions (``managed_tools=False`` offers only those). Every tool call goes
    through ``tool_lifecycle_sink`` when one is given. ``transports`` maps provider ids to transports
    (default: built on first use for ``openai``, ``anthropic``, ``ollama`` and ``lmstudio``);
    ``models`` gives context windows per ``<provider>:<model>``.
    """
    root = Path(workspace)
    if not root.is_dir():
        raise RuntimeOptionsError("run-invalid-options", "workspace must be an existing directory")
    root = root.resolve()
    if tool_lifecycle_sink is not None and not isinstance(tool_lifecycle_sink, ToolLifecycleSink):
        raise RuntimeOptionsError("run-invalid-options", "tool_lifecycle_sink must be a ToolLifecycleSink")
    toolboxes: list[Toolbox] = []
    if managed_tools:
        toolboxes.append(
            ManagedToolbox(
                root,
                additional_read_roots=tuple(additional_read_roots),
                additional_write_roots=tuple(additional_write_roots),
                sandbox_policy=sandbox_policy,
                sandbox_engine=sandbox_engine,
                persist_artifact=persist_artifact,
            )
        )
    host = tuple(tools)
    if host:
        toolboxes.append(HostToolbox(host))
    return AgentRuntime(
        workspace=root,
        toolbox=CombinedToolbox(toolboxes),
        transports=transports,
        lifecycle_sink=tool_lifecycle_sink,
        models=models or {},
        privacy_policy=privacy_policy,
        retry_policy=retry_policy,
        sleep=sleep,
    )
