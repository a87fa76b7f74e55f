"""One agent turn: plan -> privacy -> provider (streamed, routed) -> tools -> lifecycle -> session -> repeat.

Every model call plans the whole history with the core planner (carrying its ``PlanState`` from step to
step, so planning stays incremental and the prefix stays cache-stable); the transport enforces privacy
on the converted payload once, right before sending; the fallback router retries and fails over. Each
tool call is recorded with the lifecycle sink (invocation, then exactly one result), answered in the
transcript whatever happens (unknown tool, bad arguments, not allowed, cancelled), and the step's
assistant message and results are appended to the Pi session in one locked write, so the file never
holds a call without its result. Nothing here raises for an expected failure: the result has a code.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

import anyio
import anyio.to_thread
import msgspec

from ds4_context_core import (
    CanonicalMessage,
    MessageFlags,
    ModelDescriptor,
    Provenance,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core.adapter import CompletionCompleted, CompletionFallback, CompletionRequest
from ds4_context_core.summaries import SummaryOutcome, summarize, summary_span_hash, summary_supplement
from ds4_context_core.tokens import TokenCalibrator, estimate_text_tokens
from ds4_context_engine._exceptions import RunStoppedError as _Stop
from ds4_context_engine.providers import CompletionOutput, ModelReference, OutputToolCall, ToolDefinition

from ._errors import RuntimeOptionsError, ToolLifecycleError
from ._fallback import AttemptContext, AttemptPolicy, FailoverRecord, parse_fallback_chain
from ._live_input import LiveInput, LiveInputMessage
from ._run_options import (
    REMOVED_RUN_OPTIONS,
    RUN_MAX_STEPS_LIMIT,
    TOOL_EXECUTION_MODES,
    ModelStreamed,
    RunEvent,
    RunOptions,
    RunResult,
    RunStep,
    RunToolRecord,
    StepPlanned,
    SummaryFinished,
    ToolFinished,
    ToolStarted,
)
from ._tool_lifecycle import TOOL_LIFECYCLE_STATES, ToolInvocationEvent, ToolLifecycleSink, ToolResultEvent
from ._toolbox import HostToolOutcome, Toolbox, ToolOutcomeLike, ToolSpecLike, parallel_batches

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ds4_context_core.planner import ContextPlan, PlanState, SupplementalItem

    from ._facade import ProviderRuntime

__all__ = ["RunContext", "run_turn"]

_T = TypeVar("_T")
_DEFAULT_WINDOW: Final = 128_000
_DEFAULT_OUTPUT_TOKENS: Final = 4096
_TOOL_TEXT_MAX_CHARS: Final = 256 * 1024
_CODE: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_CALL_ID: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.*-]{1,128}")
_sorted_json: Final = msgspec.json.Encoder(order="sorted")
_WIRE_FORMATS: Final = ("anthropic", "openai-chat", "openai-responses")


_OverheadProbe: TypeAlias = Callable[
    [ModelReference, ModelDescriptor, str, Sequence[ToolDefinition]], int | None
]


class RunContext(msgspec.Struct, kw_only=True):
    """What the runtime gives one turn: its routes, tools, sink, limits and calibration state."""

    build_router: Callable[[Sequence[object], AttemptPolicy, float | None, float | None], ProviderRuntime]
    toolbox: Toolbox
    workspace: Path
    lifecycle_sink: ToolLifecycleSink | None
    describe_model: Callable[[ModelReference, RunOptions], ModelDescriptor]
    calibrators: dict[str, TokenCalibrator]
    wire_format: Callable[[ModelReference], str | None]
    # What the system prompt and tools add to the payload the reference's transport really builds;
    # None when the transport cannot tell (a host transport): the loop then estimates the texts.
    request_overhead: _OverheadProbe = msgspec.field(default=lambda _reference, _model, _system, _tools: None)
    # LLM summaries (RunOptions.summary_model): the transport of a reference, the outcomes kept per session
    # across the runtime's turns (session key -> span hash -> outcome), and the runtime's background task
    # group when it is entered (``async with runtime``), so a summary may finish between turns
    summary_transport: Callable[[ModelReference], object | None] = msgspec.field(default=lambda _ref: None)
    summaries: dict[str, dict[str, SummaryOutcome]] = msgspec.field(default_factory=dict)
    background: TaskGroup | None = None


class _Pending(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of a step, with the refusal it gets instead of running (if any)."""

    step: int
    call_id: str
    call: OutputToolCall
    refusal: HostToolOutcome | None
    index: int


class _Checked(msgspec.Struct, kw_only=True):
    chain: tuple[object, ...]
    references: tuple[ModelReference, ...]
    allowed: frozenset[str] | None
    denied: frozenset[str]
    cwd: str
    session_path: Path | None
    persist: bool
    summary: ModelReference | None = None


def _names(value: object, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise RuntimeOptionsError("run-invalid-options", f"{field} must be a list of tool names")
    if not all(isinstance(name, str) and _TOOL_NAME.fullmatch(name) for name in value):
        raise RuntimeOptionsError("run-invalid-options", f"{field} must hold valid tool names")
    return tuple(value)


def _check(options: RunOptions, workspace: Path) -> _Checked:
    if not isinstance(options, RunOptions):
        raise RuntimeOptionsError("run-invalid-options", "options must be a RunOptions")
    removed = [name for name in REMOVED_RUN_OPTIONS if getattr(options, name) is not None]
    if removed:
        raise RuntimeOptionsError(
            "runtime-option-removed",
            f"{removed[0]} was removed: put instructions in the system prompt and use sandbox_policy "
            "for containment",
        )
    if options.fallback_chain is not None:
        chain: tuple[object, ...] = tuple(parse_fallback_chain(options.fallback_chain))
    elif options.model is not None:
        chain = tuple(parse_fallback_chain([options.model]))
    else:
        raise RuntimeOptionsError("run-invalid-options", "a model or a fallback_chain is required")
    if options.tool_execution_mode not in TOOL_EXECUTION_MODES:
        raise RuntimeOptionsError(
            "run-invalid-options", f"tool_execution_mode must be one of {TOOL_EXECUTION_MODES}"
        )
    for name, value, limit in (
        ("max_steps", options.max_steps, RUN_MAX_STEPS_LIMIT),
        ("max_repeated_steps", options.max_repeated_steps, RUN_MAX_STEPS_LIMIT),
    ):
        if type(value) is not int or not 1 <= value <= limit:
            raise RuntimeOptionsError("run-invalid-options", f"{name} must be an integer from 1 to {limit}")
    for name, window in (
        ("context_window", options.context_window),
        ("max_output_tokens", options.max_output_tokens),
    ):
        if window is not None and (type(window) is not int or window < 1):
            raise RuntimeOptionsError("run-invalid-options", f"{name} must be a positive integer")
    if options.live_input is not None and not isinstance(options.live_input, LiveInput):
        raise RuntimeOptionsError("run-invalid-options", "live_input must be a LiveInput")
    if options.cancel is not None and not isinstance(options.cancel, anyio.Event):
        raise RuntimeOptionsError("run-invalid-options", "cancel must be an anyio.Event")
    allowed = _names(options.allowed_tools, "allowed_tools")
    denied = _names(options.disallowed_tools, "disallowed_tools") or ()
    cwd = Path(options.cwd) if options.cwd is not None else workspace
    if not cwd.is_absolute():
        cwd = workspace / cwd
    session_path = Path(options.session_path) if options.session_path is not None else None
    persist = options.persist if options.persist is not None else session_path is not None
    if persist and session_path is None:
        raise RuntimeOptionsError("run-invalid-options", "persist needs a session_path")
    summary = None
    if options.summary_model is not None:
        summary = parse_fallback_chain([options.summary_model])[0].model
        timeout = options.summary_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
            raise RuntimeOptionsError(
                "run-invalid-options", "summary_timeout_s must be from 0 to 3600 seconds"
            )
    return _Checked(
        chain=chain,
        references=tuple(entry.model for entry in chain),  # type: ignore[attr-defined]
        allowed=None if allowed is None or "*" in allowed else frozenset(allowed),
        denied=frozenset(denied),
        cwd=str(cwd),
        session_path=session_path,
        persist=bool(persist),
        summary=summary,
    )


def _message_from(raw: object, make: Callable[..., CanonicalMessage]) -> CanonicalMessage:
    if isinstance(raw, CanonicalMessage):
        return raw
    if isinstance(raw, Mapping):
        role, content = raw.get("role"), raw.get("content")
        if role in ("user", "assistant") and isinstance(content, str) and set(raw) <= {"role", "content"}:
            return make(role, (TextBlock(text=content),))
    raise RuntimeOptionsError(
        "run-invalid-options",
        'messages must be CanonicalMessage values or {"role": "user" | "assistant", "content": str}',
    )


def _bounded_text(text: object) -> str:
    if not isinstance(text, str):
        return ""
    if len(text) <= _TOOL_TEXT_MAX_CHARS:
        return text
    cut = len(text) - _TOOL_TEXT_MAX_CHARS
    return text[:_TOOL_TEXT_MAX_CHARS] + f"\n[ds4: {cut} more characters not shown]"


def _code(value: object) -> str | None:
    return value if isinstance(value, str) and _CODE.fullmatch(value) else None


class _Turn:
    """The state of one running turn. Built and used by :func:`run_turn` only."""

    def __init__(
        self, context: RunContext, system_prompt: str, options: RunOptions, checked: _Checked
    ) -> None:
        self.context = context
        self.system = system_prompt
        self.options = options
        self.checked = checked
        self.run_id = "run-" + secrets.token_hex(6)
        self.session_id = self.run_id
        self.counter = 0
        self.history: list[CanonicalMessage] = []
        self.produced: list[CanonicalMessage] = []
        self.unpersisted: list[CanonicalMessage] = []
        self.entry_ids: list[str] = []
        self.steps: list[RunStep] = []
        self.tools: list[RunToolRecord] = []
        self.failovers: list[FailoverRecord] = []
        self.used_call_ids: set[str] = set()
        self.state: PlanState | None = None
        self.cancel = options.cancel
        self.text = ""
        self.all_specs: Mapping[str, ToolSpecLike] = {}
        self.history_ids: set[str] = set()
        self.summary_group: TaskGroup | None = None
        self.summarizing = False
        self.summary_failed: set[str] = set()  # spans whose call failed in this turn: asked at a later one
        self.summary_seen: tuple[int, str, int] | None = None  # the cut last looked at, and the outcomes
        path = checked.session_path
        self.summary_key = str(path.resolve()) if path is not None else self.run_id

    # --- messages -------------------------------------------------------------------------------------

    def make(self, role: str, blocks: tuple[Any, ...], **extra: Any) -> CanonicalMessage:
        self.counter += 1
        entry = f"{self.run_id}-{self.counter}"
        atomic = any(type(block) is ToolCallBlock or type(block) is ToolResultBlock for block in blocks)
        return CanonicalMessage(
            id=entry,
            source_entry_id=entry,
            role=role,  # type: ignore[arg-type]
            blocks=blocks,
            provenance=Provenance(source="runtime-session", session_id=self.session_id, entry_id=entry),
            flags=MessageFlags(atomic=True if atomic else None),
            **extra,
        )

    def add(self, message: CanonicalMessage) -> None:
        self.history.append(message)
        self.history_ids.add(message.id)
        self.produced.append(message)
        self.unpersisted.append(message)

    def emit(self, event: RunEvent) -> None:
        on_event = self.options.on_event
        if on_event is None:
            return
        with contextlib.suppress(Exception):  # a broken display must not cost the user the turn
            on_event(event)

    # --- the Pi session -------------------------------------------------------------------------------

    async def load_session(self) -> None:
        path = self.checked.session_path
        if path is None:
            return
        from ds4_context_engine.pi import build_pi_context, create_pi_session, read_pi_session  # noqa: PLC0415

        def load() -> tuple[str, tuple[CanonicalMessage, ...]]:
            if not path.exists():
                if not self.checked.persist:
                    return self.run_id, ()
                header = create_pi_session(path, cwd=self.checked.cwd)
                return header.id, ()
            context = build_pi_context(read_pi_session(path))
            return context.session_id, context.messages

        try:
            session_id, messages = await anyio.to_thread.run_sync(load)
        except Exception as error:
            raise _Stop(
                "run-session-write-failed", f"the session could not be read ({type(error).__name__})"
            ) from None
        self.session_id = session_id
        self.history.extend(messages)
        self.history_ids.update(message.id for message in messages)
        # a model may reuse an id of an earlier turn ("call_1"): such a call gets a fresh id instead
        self.used_call_ids.update(call for message in messages for call in message.tool_call_ids)

    async def flush(self) -> None:
        if not self.checked.persist or not self.unpersisted:
            return
        path = self.checked.session_path
        assert path is not None
        from ds4_context_engine.pi import append_pi_entries, canonical_to_pi_message  # noqa: PLC0415

        entries = [("message", {"message": canonical_to_pi_message(message)}) for message in self.unpersisted]
        try:
            with anyio.CancelScope(shield=True):  # a step is written whole or not at all, even when cancelled
                written = await anyio.to_thread.run_sync(append_pi_entries, path, entries)
        except Exception as error:
            raise _Stop(
                "run-session-write-failed", f"the session append failed ({type(error).__name__})"
            ) from None
        self.entry_ids.extend(entry.id for entry in written)
        self.unpersisted.clear()

    # --- one model call -------------------------------------------------------------------------------

    async def cancellable(self, call: Callable[[], Awaitable[_T]]) -> tuple[bool, _T | None]:
        cancel = self.cancel
        if cancel is None:
            return True, await call()
        if cancel.is_set():
            return False, None
        box: list[_T] = []
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                await cancel.wait()
                group.cancel_scope.cancel()

            group.start_soon(watch)
            box.append(await call())
            group.cancel_scope.cancel()
        return (True, box[0]) if box else (False, None)

    def plan(
        self, step: int, descriptor: ModelDescriptor, fixed_tokens: int, destination: str | None
    ) -> ContextPlan:
        from ds4_context_core.planner import plan_context  # noqa: PLC0415

        primary = self.checked.references[0].reference
        calibrator = self.context.calibrators.get(primary)
        ratio = calibrator.calibration().planner_ratio() if calibrator is not None else None
        plan = plan_context(
            self.history,
            model=descriptor,
            fixed_tokens=fixed_tokens,
            state=self.state,
            calibration_ratio=ratio,
            destination=destination,
            supplemental=self.summary_items(),
        )
        fallback = plan.fallback
        if (fallback is not None and fallback.mode == "blocked") or not plan.messages:
            code = fallback.code if fallback is not None else "empty"
            raise _Stop("run-context-blocked", f"the planner sent nothing ({code[:64]})")
        self.state = plan.state
        self.start_summary(step, plan)
        self.emit(StepPlanned(step=step, plan=plan, context_window=descriptor.context_window))
        return plan

    # --- LLM summaries of what the plans cut (RunOptions.summary_model) ----------------------------------

    def _outcomes(self) -> dict[str, SummaryOutcome]:
        return self.context.summaries.setdefault(self.summary_key, {})

    def summary_items(self) -> tuple[SupplementalItem, ...]:
        """The accepted summaries whose whole span is on this history, oldest span first (by its order)."""
        if self.checked.summary is None:
            return ()
        items = []
        for outcome in self._outcomes().values():
            if outcome.status == "accepted" and self.history_ids.issuperset(outcome.source_ids):
                item = summary_supplement(outcome)
                if item is not None:
                    items.append(item)
        return tuple(items)

    def start_summary(self, step: int, plan: ContextPlan) -> None:
        """Ask, in the background, for the summary of what ``plan`` cuts that no accepted one covers."""
        reference, group = self.checked.summary, self.summary_group
        if reference is None or group is None or self.summarizing or plan.fallback is not None:
            return
        kept = [
            item.original_index
            for item in plan.items
            if item.kind in ("message", "trimmed-tool-result", "receipt") and item.original_index is not None
        ]
        cut = min(kept, default=0)
        if cut <= 0:
            return
        # the span is looked for once per cut (at a compaction), not at every step: it is a pass over it
        seen = (cut, self.history[cut - 1].id, len(self._outcomes()))
        if seen == self.summary_seen:
            return
        self.summary_seen = seen
        positions = {message.id: index for index, message in enumerate(self.history[:cut])}
        covered = 0
        for outcome in self._outcomes().values():
            at = [positions.get(source) for source in outcome.source_ids]
            if outcome.status == "accepted" and at and all(p is not None for p in at):
                covered = max(covered, max(p for p in at if p is not None) + 1)
        span = tuple(self.history[covered:cut])
        if not span:
            return
        span_hash = summary_span_hash(span)
        if span_hash in self._outcomes() or span_hash in self.summary_failed:
            return  # accepted or rejected already (one call per span), or failed in this turn
        transport = self.context.summary_transport(reference)
        complete = getattr(transport, "complete", None)
        if complete is None:
            return
        descriptor = self.context.describe_model(reference, self.options)
        self.summarizing = True
        group.start_soon(self.summarize, step, span, span_hash, complete, descriptor)

    async def summarize(
        self,
        step: int,
        span: tuple[CanonicalMessage, ...],
        span_hash: str,
        complete: Callable[[CompletionRequest], Awaitable[Any]],
        descriptor: ModelDescriptor,
    ) -> None:
        try:
            outcome = await summarize(
                span, complete, model=descriptor, timeout_s=self.options.summary_timeout_s
            )
        except Exception:  # summarize raises only for bad arguments; either way the turn goes on
            outcome = None
        finally:
            self.summarizing = False
        if outcome is None or outcome.status == "failed":
            self.summary_failed.add(span_hash)
        else:
            self._outcomes()[span_hash] = outcome  # accepted, or rejected with its code: never asked again
        status, code = (
            ("failed", "summary-transport-failed") if outcome is None else (outcome.status, outcome.code)
        )
        self.emit(SummaryFinished(step=step, status=status, code=code, messages=len(span)))

    async def call_model(
        self,
        *,
        step: int,
        router: ProviderRuntime,
        plan: ContextPlan,
        descriptor: ModelDescriptor,
        tools: tuple[ToolDefinition, ...],
        live: list[LiveInputMessage],
        live_messages: dict[int, CanonicalMessage],
    ) -> CompletionOutput:
        anonymous = {live_messages[item.sequence].id for item in live if item.id is None}
        request = CompletionRequest.from_messages(
            plan.messages,
            model=descriptor,
            system=self.system or None,
            tools=tools,
            max_output_tokens=self.options.max_output_tokens,
            temperature=self.options.temperature,
            estimated_input_tokens=plan.budget.total_tokens,
        )
        attempts_seen = [0]

        def prepare(attempt: CompletionRequest, _context: AttemptContext) -> CompletionRequest:
            attempts_seen[0] += 1
            if attempts_seen[0] == 1 or not anonymous:
                return attempt
            # a retried attempt does not replay anonymous live input: it is delivered at most once
            kept = tuple(message for message in attempt.messages if message.id not in anonymous)
            return msgspec.structs.replace(attempt, messages=kept)

        def on_delta(context: AttemptContext, event: Any) -> None:
            self.emit(
                ModelStreamed(
                    step=step, entry_index=context.entry_index, attempt=context.attempt, event=event
                )
            )

        finished, routed = await self.cancellable(lambda: router.stream(request, on_delta, prepare=prepare))
        live_input = self.options.live_input
        retried = attempts_seen[0] > 1
        if live_input is not None and live:
            if finished and routed is not None and isinstance(routed.result, CompletionCompleted):
                dropped = [item for item in live if item.id is None and retried]
                live_input.settle([item for item in live if item not in dropped], "acknowledged")
                live_input.settle(dropped, "uncertain")
                self.forget([live_messages[item.sequence] for item in dropped])
            else:
                sent = attempts_seen[0] > 0
                live_input.settle(live, "uncertain" if sent else "rejected")
                self.forget([live_messages[item.sequence] for item in live])
        if not finished or routed is None:
            raise _Stop("run-cancelled", "the turn was cancelled during a model call")
        self.failovers.extend(routed.failovers)
        result = routed.result
        if isinstance(result, CompletionFallback):
            failure = result.failure
            detail = f"{failure.kind}: {failure.reason}" if failure is not None else result.reason
            code = {
                "privacy-enforcement-failed": "run-privacy-failed",
                "invalid-request": "run-provider-invalid-request",
            }.get(result.code, "run-provider-failed")
            raise _Stop(code, detail[:300])
        output = result.output
        if not isinstance(output, CompletionOutput):
            raise _Stop("run-provider-failed", "the transport answered without a parsed output")
        usage = result.usage
        if usage is not None and usage.input_tokens > 0 and plan.budget.total_tokens > 0:
            key = routed.model.reference
            calibrator = self.context.calibrators.setdefault(key, TokenCalibrator())
            calibrator.record(estimated=plan.budget.total_tokens, actual=usage.input_tokens)
        self.steps.append(
            RunStep(
                step=step,
                model=routed.model.reference,
                attempts=routed.attempts,
                planned_tokens=plan.budget.total_tokens,
                hard_limit=plan.budget.hard_limit,
                fixed_tokens=plan.budget.fixed_tokens,
                messages_sent=len(plan.messages),
                tool_calls=len(output.tool_calls),
                usage=usage,
                stop_reason=output.stop_reason,
            )
        )
        return output

    def forget(self, messages: list[CanonicalMessage]) -> None:
        if not messages:
            return
        ids = {message.id for message in messages}
        self.history_ids -= ids
        for bucket in (self.history, self.produced, self.unpersisted):
            bucket[:] = [message for message in bucket if message.id not in ids]

    # --- tools ----------------------------------------------------------------------------------------

    def call_id(self, raw: str, step: int, index: int) -> str:
        candidate = raw if isinstance(raw, str) and _CALL_ID.fullmatch(raw) else ""
        if not candidate or candidate in self.used_call_ids:
            candidate = f"call_{self.run_id[4:]}_{step}_{index}"
        self.used_call_ids.add(candidate)
        return candidate

    def refusal(self, call: OutputToolCall, offered: Mapping[str, ToolSpecLike]) -> HostToolOutcome | None:
        if call.arguments_error is not None:
            return HostToolOutcome(
                text=f"the arguments of this {call.name} call were not a JSON object "
                f"({call.arguments_error}); "
                "send the call again with valid JSON arguments",
                is_error=True,
                code="tool-arguments-invalid",
                state="rejected",
            )
        if call.name not in offered:
            known = call.name in self.all_specs
            return HostToolOutcome(
                text=(
                    f"the tool {call.name} is not allowed in this turn"
                    if known
                    else f"there is no tool named {call.name}; "
                    f"use one of: {', '.join(sorted(offered)) or 'none'}"
                ),
                is_error=True,
                code="tool-not-allowed" if known else "tool-unknown",
                state="rejected",
            )
        return None

    async def record(self, event: ToolInvocationEvent | ToolResultEvent) -> str | None:
        sink = self.context.lifecycle_sink
        if sink is None:
            return None
        persistence: str = "failed"
        with anyio.CancelScope(shield=True):  # the trail stays whole when the turn is cancelled
            with contextlib.suppress(ToolLifecycleError):  # a conflict or bad event: reported as failed
                persistence = (await sink.record(event)).persistence
        return persistence

    async def run_call(
        self, pending: _Pending, results: list[tuple[ToolResultBlock, RunToolRecord] | None]
    ) -> None:
        step, call_id, call, refusal, index = (
            pending.step,
            pending.call_id,
            pending.call,
            pending.refusal,
            pending.index,
        )
        self.emit(ToolStarted(step=step, call_id=call_id, name=call.name, arguments=call.arguments))
        invocation = ToolInvocationEvent(
            tool_call_id=call_id, tool_name=call.name, arguments=dict(call.arguments)
        )
        persistence = await self.record(invocation)
        started = time.monotonic()
        outcome: ToolOutcomeLike | None = refusal
        if outcome is None and self.cancel is not None and self.cancel.is_set():
            outcome = HostToolOutcome(
                text="the turn was cancelled before this call ran",
                is_error=True,
                code="tool-cancelled",
                state="cancelled",
            )
        if outcome is None:
            try:
                finished, outcome = await self.cancellable(
                    lambda: self.context.toolbox.execute(
                        call.name, call.arguments, call_id=call_id, cwd=self.checked.cwd, cancel=self.cancel
                    )
                )
            except Exception as error:  # a toolbox must not raise; if it does, the call still gets a result
                finished, outcome = (
                    True,
                    HostToolOutcome(
                        text=f"the tool failed ({type(error).__name__})",
                        is_error=True,
                        code="tool-raised",
                        state="error",
                    ),
                )
            if not finished or outcome is None:
                outcome = HostToolOutcome(
                    text="the turn was cancelled while this call ran",
                    is_error=True,
                    code="tool-cancelled",
                    state="cancelled",
                )
        elapsed = round((time.monotonic() - started) * 1000, 3)
        state = _lifecycle_state(outcome)
        text = _bounded_text(outcome.text)
        code = _code(outcome.code)
        artifact = (
            outcome.artifact_id if isinstance(outcome.artifact_id, str) and outcome.artifact_id else None
        )
        result_event = ToolResultEvent(
            tool_call_id=call_id,
            tool_name=call.name,
            state=state,  # type: ignore[arg-type]
            content=text,
            detail_code=code,
            execution_ms=elapsed,
            artifacts=(artifact,) if artifact else (),
        )
        result_persistence = await self.record(result_event) if persistence != "failed" else "failed"
        record = RunToolRecord(
            step=step,
            call_id=call_id,
            name=call.name,
            state=state,
            is_error=bool(outcome.is_error),
            code=code,
            execution_ms=elapsed,
            artifact_id=artifact,
            persistence=result_persistence,
        )
        block = ToolResultBlock(
            tool_call_id=call_id, tool_name=call.name, content=text, is_error=bool(outcome.is_error)
        )
        results[index] = (block, record)
        self.emit(ToolFinished(step=step, record=record))

    async def run_tools(
        self,
        step: int,
        calls: Sequence[tuple[str, OutputToolCall]],
        offered: Mapping[str, ToolSpecLike],
        repeated: bool,
    ) -> None:
        results: list[tuple[ToolResultBlock, RunToolRecord] | None] = [None] * len(calls)
        refusals = [self.refusal(call, offered) for _, call in calls]
        if repeated:
            refusals = [
                refusal
                or HostToolOutcome(
                    text="this exact call was repeated too many times in a row; the turn stops here",
                    is_error=True,
                    code="tool-call-repeated",
                    state="rejected",
                )
                for refusal in refusals
            ]
        names = [call.name if refusals[index] is None else "" for index, (_, call) in enumerate(calls)]
        pending = [
            _Pending(step=step, call_id=call_id, call=call, refusal=refusals[index], index=index)
            for index, (call_id, call) in enumerate(calls)
        ]
        for batch in parallel_batches(names, offered, mode=self.options.tool_execution_mode):
            if len(batch) == 1:
                await self.run_call(pending[batch[0]], results)
                continue
            async with anyio.create_task_group() as group:
                for index in batch:
                    group.start_soon(self.run_call, pending[index], results)
        for entry in results:
            assert entry is not None
            block, record = entry
            self.tools.append(record)
            self.add(self.make("tool", (block,)))

    def result(self, code: str | None, detail: str | None) -> RunResult:
        return RunResult(
            text=self.text,
            messages=tuple(self.produced),
            steps=tuple(self.steps),
            tool_records=tuple(self.tools),
            failovers=tuple(self.failovers),
            stop_reason="completed" if code is None else "error",
            error=code,
            error_detail=detail,
            session_entry_ids=tuple(self.entry_ids),
        )


_STATE_NAMES: Final = {"ok": "success", "denied": "rejected"}


def _lifecycle_state(outcome: ToolOutcomeLike) -> str:
    """The lifecycle sink's state for an outcome (a toolbox may speak its own state words)."""
    declared = getattr(outcome, "lifecycle_state", None)
    if declared in TOOL_LIFECYCLE_STATES:
        return str(declared)
    state = _STATE_NAMES.get(outcome.state, outcome.state)
    if state in TOOL_LIFECYCLE_STATES:
        return state
    return "error" if outcome.is_error else "success"


def _fixed_tokens(system: str, tools: Sequence[ToolDefinition]) -> int:
    total = estimate_text_tokens(system) if system else 0
    for tool in tools:
        total += estimate_text_tokens(msgspec.json.encode(msgspec.to_builtins(tool)).decode())
    return total


def _overhead(
    turn: _Turn, reference: ModelReference, descriptor: ModelDescriptor, tools: Sequence[ToolDefinition]
) -> int:
    measured = turn.context.request_overhead(reference, descriptor, turn.system, tools)
    return _fixed_tokens(turn.system, tools) if measured is None else measured


def _step_signature(calls: Sequence[OutputToolCall]) -> bytes:
    return b"\x00".join(call.name.encode() + b"\x01" + _sorted_json.encode(call.arguments) for call in calls)


async def run_turn(context: RunContext, system_prompt: str, options: RunOptions) -> RunResult:
    """Run one agent turn (see the module docstring). Never raises for an expected failure."""
    try:
        if not isinstance(system_prompt, str):
            raise RuntimeOptionsError("run-invalid-options", "system_prompt must be text")
        checked = _check(options, context.workspace)
        turn = _Turn(context, system_prompt, options, checked)
        inputs = [_message_from(raw, turn.make) for raw in options.messages]
    except RuntimeOptionsError as error:
        return RunResult(
            text="",
            messages=(),
            steps=(),
            tool_records=(),
            failovers=(),
            stop_reason="error",
            error=error.code if error.code in _OPTION_CODES else "run-invalid-options",
            error_detail=str(error)[:300],
        )
    try:
        return await _drive(turn, inputs)
    except _Stop as stop:
        with contextlib.suppress(_Stop):  # the stop's own code says what went wrong first
            await turn.flush()
        return turn.result(stop.code, stop.detail)


_OPTION_CODES: Final = frozenset(
    {
        "run-invalid-options",
        "runtime-option-removed",
        "runtime-backend-unavailable",
        "fallback-attempts-out-of-range",
        "fallback-chain-empty",
        "fallback-invalid-effort",
        "fallback-invalid-entry",
        "fallback-invalid-model",
    }
)


class _Setup(msgspec.Struct, kw_only=True):
    """What stays the same for every step of a turn."""

    router: Any
    offered: dict[str, ToolSpecLike]
    tools: tuple[ToolDefinition, ...]
    descriptor: ModelDescriptor
    destination: str | None
    fixed_tokens: int


async def _set_up(turn: _Turn, inputs: list[CanonicalMessage]) -> _Setup:
    """The router, the tools on offer and the model's limits; the session read and the input written."""
    context, options, checked = turn.context, turn.options, turn.checked
    try:
        router = context.build_router(
            checked.chain,
            AttemptPolicy(
                allowed_tools=None if checked.allowed is None else tuple(sorted(checked.allowed)),
                disallowed_tools=tuple(sorted(checked.denied)) or None,
            ),
            options.attempt_timeout_s,
            options.deadline_s,
        )
    except RuntimeOptionsError as error:
        raise _Stop(
            error.code if error.code in _OPTION_CODES else "run-invalid-options", str(error)[:300]
        ) from None
    await turn.load_session()
    for message in inputs:
        turn.add(message)
    await turn.flush()
    specs = {spec.name: spec for spec in context.toolbox.specs()}
    turn.all_specs = specs
    offered = {
        name: spec
        for name, spec in specs.items()
        if (checked.allowed is None or name in checked.allowed) and name not in checked.denied
    }
    tools = tuple(
        ToolDefinition(name=spec.name, description=spec.description, parameters=dict(spec.parameters))
        for spec in offered.values()
    )
    # plan for the smallest window of the chain: a failover must not meet a context that does not fit
    descriptors = [context.describe_model(reference, options) for reference in checked.references]
    descriptor = min(descriptors, key=lambda described: described.context_window)
    descriptor = msgspec.structs.replace(
        descriptor, provider=checked.references[0].provider, id=checked.references[0].model
    )
    destination = context.wire_format(checked.references[0])
    return _Setup(
        router=router,
        offered=offered,
        tools=tools,
        descriptor=descriptor,
        destination=destination if destination in _WIRE_FORMATS else None,
        fixed_tokens=_overhead(turn, checked.references[0], descriptor, tools),
    )


async def _drive(turn: _Turn, inputs: list[CanonicalMessage]) -> RunResult:
    """The turn's steps; with summaries on, inside a task group for the background summary calls.

    The runtime's own group (when it is entered) lets a summary finish between turns; otherwise a
    summary still running when the turn ends is cancelled, and asked again at a later turn.
    """
    if turn.checked.summary is None:
        return await _steps(turn, inputs)
    if turn.context.background is not None:
        turn.summary_group = turn.context.background
        return await _steps(turn, inputs)
    ended: list[RunResult | _Stop] = []
    async with anyio.create_task_group() as group:
        turn.summary_group = group
        try:
            ended.append(await _steps(turn, inputs))
        except _Stop as stop:
            ended.append(stop)
        finally:
            turn.summary_group = None
            group.cancel_scope.cancel()  # the turn never waits for a summary
    if isinstance(ended[0], _Stop):
        raise ended[0]
    return ended[0]


async def _steps(turn: _Turn, inputs: list[CanonicalMessage]) -> RunResult:
    options = turn.options
    setup = await _set_up(turn, inputs)
    previous_signature: bytes | None = None
    repeats = 0
    for step in range(1, options.max_steps + 1):
        if turn.cancel is not None and turn.cancel.is_set():
            raise _Stop("run-cancelled", "the turn was cancelled")
        live: list[LiveInputMessage] = []
        live_messages: dict[int, CanonicalMessage] = {}
        if options.live_input is not None:
            live = options.live_input.take()
            for item in live:
                message = turn.make("user", (TextBlock(text=item.text),))
                live_messages[item.sequence] = message
                turn.add(message)
        try:
            plan = turn.plan(step, setup.descriptor, setup.fixed_tokens, setup.destination)
        except _Stop:
            if options.live_input is not None and live:
                options.live_input.settle(live, "rejected")
                turn.forget(list(live_messages.values()))
            raise
        output = await turn.call_model(
            step=step,
            router=setup.router,
            plan=plan,
            descriptor=setup.descriptor,
            tools=setup.tools,
            live=live,
            live_messages=live_messages,
        )
        calls = [(turn.call_id(call.id, step, index), call) for index, call in enumerate(output.tool_calls)]
        blocks: list[Any] = [TextBlock(text=output.text)] if output.text else []
        blocks.extend(
            ToolCallBlock(id=call_id, name=call.name, arguments=dict(call.arguments))
            for call_id, call in calls
        )
        provider, _, model_id = turn.steps[-1].model.partition(":")
        if blocks:  # an empty answer adds no message: providers refuse empty assistant turns later
            turn.add(turn.make("assistant", tuple(blocks), provider=provider, model=model_id))
        if not calls:
            turn.text = output.text
            await turn.flush()
            return turn.result(None, None)
        signature = _step_signature([call for _, call in calls])
        repeats = repeats + 1 if signature == previous_signature else 1
        previous_signature = signature
        looping = repeats > options.max_repeated_steps
        await turn.run_tools(step, calls, setup.offered, looping)
        await turn.flush()
        if looping:
            raise _Stop("run-tool-loop", f"the same tool calls were repeated {repeats} times in a row")
        if turn.cancel is not None and turn.cancel.is_set():
            raise _Stop("run-cancelled", "the turn was cancelled while tools ran")
    raise _Stop("run-max-steps", f"the turn used all {options.max_steps} steps")
