"""The options of one agent turn, what it returns, and the events it reports while it runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import anyio
import msgspec

from ds4_context_core import CanonicalMessage
from ds4_context_core.adapter import CompletionUsage
from ds4_context_engine.providers import ModelReference, StreamEvent

from ._fallback import FailoverRecord
from ._live_input import LiveInput

if TYPE_CHECKING:
    from ds4_context_core.planner import ContextPlan

__all__ = [
    "REMOVED_RUN_OPTIONS",
    "RUN_DEFAULT_MAX_STEPS",
    "RUN_ERROR_CODES",
    "RUN_MAX_STEPS_LIMIT",
    "RUN_STOP_REASONS",
    "RUN_SUMMARY_TIMEOUT_S",
    "TOOL_EXECUTION_MODES",
    "ModelStreamed",
    "RunEvent",
    "RunOptions",
    "RunResult",
    "RunStep",
    "RunToolRecord",
    "StepPlanned",
    "SummaryFinished",
    "ToolExecutionMode",
    "ToolFinished",
    "ToolStarted",
]

ToolExecutionMode: TypeAlias = Literal["safe-parallel", "sequential"]
TOOL_EXECUTION_MODES: Final = ("safe-parallel", "sequential")
RUN_DEFAULT_MAX_STEPS: Final = 50
RUN_MAX_STEPS_LIMIT: Final = 10_000
RUN_DEFAULT_MAX_REPEATED_STEPS: Final = 4
RUN_STOP_REASONS: Final = ("completed", "error")
RUN_SUMMARY_TIMEOUT_S: Final = 60.0

# What the seed's facade took away on purpose: project discovery and provider-owned behaviour. Each is
# refused with ``runtime-option-removed`` rather than silently ignored; the docs name the replacement.
REMOVED_RUN_OPTIONS: Final = (
    "codex_load_project_docs",
    "codex_sandbox_network_access",
    "fast_mode",
    "native_subagents",
    "setting_sources",
)

RUN_ERROR_CODES: Final = (
    "run-cancelled",
    "run-context-blocked",
    "run-invalid-options",
    "run-max-steps",
    "run-privacy-failed",
    "run-provider-failed",
    "run-provider-invalid-request",
    "run-session-write-failed",
    "run-tool-loop",
    "runtime-backend-unavailable",
    "runtime-option-removed",
)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """One turn: the model, the new messages and how tools may run.

    ``model`` is ``"<provider>:<model>"``; ``fallback_chain`` (entries as for
    :func:`parse_fallback_chain`) replaces it as the route list when given. ``messages`` are the turn's
    new input (canonical messages or ``{"role": "user" | "assistant", "content": str}``), appended after
    the session's history when ``session_path`` names a Pi session. With ``persist`` (the default when a
    session is given) the turn's messages are appended to it through the Pi writer, one locked write per
    completed step, so the file never holds a tool call without its results.

    ``cancel`` ends the turn cleanly when set (tools running are cancelled and answered as such).
    ``allowed_tools`` / ``disallowed_tools`` filter what is offered and what may run (``"*"`` in the allow
    list means all). ``max_steps`` bounds model calls; ``max_repeated_steps`` bounds identical
    consecutive tool-call steps (a model stuck in a loop). ``attempt_timeout_s`` bounds each model call
    attempt, ``deadline_s`` each model call over all its attempts. ``context_window`` and
    ``max_output_tokens`` describe the model when the runtime has no descriptor for it. ``on_event`` gets
    the turn's events as they happen (deltas, plans, tools).

    ``summary_model`` (``"<provider>:<model>"``, off by default) turns on LLM summaries of what the plans
    cut: when a plan leaves out history that no accepted summary covers, the runtime asks that model
    (through its transport for the provider) for the ``summary-contract-v1`` summary of the span in the
    background, within ``summary_timeout_s``, and the next plans place an accepted one in front of the
    history. The turn never waits for it: a summary that fails, is rejected or is not back in time leaves
    the plans with their receipts and digest.

    The five removed options of the seed's facade are declared so that passing one is refused with a
    coded error, not ignored.
    """

    model: str | ModelReference | None = None
    messages: Sequence[CanonicalMessage | Mapping[str, Any]] = ()
    cancel: anyio.Event | None = None
    cwd: str | Path | None = None
    allowed_tools: Sequence[str] | None = None
    disallowed_tools: Sequence[str] | None = None
    tool_execution_mode: ToolExecutionMode = "safe-parallel"
    max_steps: int = RUN_DEFAULT_MAX_STEPS
    max_repeated_steps: int = RUN_DEFAULT_MAX_REPEATED_STEPS
    fallback_chain: Sequence[object] | None = None
    live_input: LiveInput | None = None
    session_path: str | Path | None = None
    persist: bool | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    attempt_timeout_s: float | None = None
    deadline_s: float | None = 600.0
    on_event: Callable[[RunEvent], object] | None = None
    summary_model: str | ModelReference | None = None
    summary_timeout_s: float = RUN_SUMMARY_TIMEOUT_S
    # removed: see REMOVED_RUN_OPTIONS
    setting_sources: object = None
    codex_load_project_docs: object = None
    codex_sandbox_network_access: object = None
    fast_mode: object = None
    native_subagents: object = None


class RunToolRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of the turn: what ran, how it ended, and what the lifecycle sink said."""

    step: int
    call_id: str
    name: str
    state: str
    is_error: bool
    code: str | None = None
    execution_ms: float = 0.0
    artifact_id: str | None = None
    persistence: str | None = None


class RunStep(msgspec.Struct, frozen=True, kw_only=True):
    """One model call: which route answered, the plan's size against the window, the usage."""

    step: int
    model: str
    attempts: int
    planned_tokens: int
    hard_limit: int
    messages_sent: int
    tool_calls: int
    usage: CompletionUsage | None = None
    stop_reason: str | None = None
    # what the system prompt and tool schemas add to the request, budgeted before the history
    fixed_tokens: int = 0


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn produced. ``error`` is a code from ``RUN_ERROR_CODES`` (``None`` when it completed).

    ``messages`` are the turn's messages in order (its input, live input, answers and tool results),
    owned by the runtime; ``session_entry_ids`` are the Pi entries written for them.
    """

    text: str
    messages: tuple[CanonicalMessage, ...]
    steps: tuple[RunStep, ...]
    tool_records: tuple[RunToolRecord, ...]
    failovers: tuple[FailoverRecord, ...]
    stop_reason: Literal["completed", "error"]
    error: str | None = None
    error_detail: str | None = None
    session_entry_ids: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def usage(self) -> CompletionUsage:
        """The turn's total usage (steps without a report count as zero)."""
        reported = [step.usage for step in self.steps if step.usage is not None]
        return CompletionUsage(
            input_tokens=sum(usage.input_tokens for usage in reported),
            output_tokens=sum(usage.output_tokens for usage in reported),
            cache_read_input_tokens=sum(usage.cache_read_input_tokens for usage in reported),
            cache_creation_input_tokens=sum(usage.cache_creation_input_tokens for usage in reported),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPlanned:
    """A model call is about to be sent with this plan (its items give the context bar)."""

    step: int
    plan: ContextPlan = field(repr=False)
    context_window: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelStreamed:
    """A delta of the answer; a new ``(entry_index, attempt)`` starts the answer over."""

    step: int
    entry_index: int
    attempt: int
    event: StreamEvent


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolStarted:
    step: int
    call_id: str
    name: str
    arguments: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolFinished:
    step: int
    record: RunToolRecord


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryFinished:
    """A background summary of a cut span came back (``summary_model``): ``accepted`` (the next plans
    place it), ``rejected`` (its check's code; never asked again) or ``failed`` (asked at a later turn).
    Metadata only: the summary's text is in the plans that place it."""

    step: int
    status: str
    code: str | None
    messages: int


RunEvent: TypeAlias = StepPlanned | ModelStreamed | ToolStarted | ToolFinished | SummaryFinished
