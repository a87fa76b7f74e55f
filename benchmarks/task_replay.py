"""Does a plan still hold the task? Replays a session at every model call and checks each plan.

    uv run --no-config --no-sync python benchmarks/replay.py SESSION.jsonl --task [--windows 32000,128000]
        [--max-tokens 16384] [--fixed 4000] [--sample 80]

Called by ``replay.py --task`` for a canonical (``ds4-runtime-session-v1``) or a Pi session. A model call
happens before every assistant message; for a Pi session the request is what Pi itself would send at that
point (``build_pi_context``: its own compaction summary, then the kept entries). Each call is planned
twice, with the state of the previous plan carried as a host does:

- *core*: ``ContextPlanner.plan`` alone (with its own task digest of what the cut left out);
- *engine*: as the engine's workspace plans (``settle_cut_supplements`` with the engine's task digest,
  read by a ``TaskDigestReader`` and carried from step to step, in place of core's).

Per step, a plan is checked against the whole branch so far (for a Pi session, also what Pi compacted):

- latest request: the current user message is in the plan verbatim;
- modified paths: every path an edit or write call named appears somewhere in the plan's text
  (a verbatim call, a receipt, the digest, a host summary);
- call identities: for every tool call of the request, its main argument (command, path, pattern ...;
  whitespace folded, the first 80 characters) appears in the plan's text, or the call is there verbatim;
- errors: for each of the last 10 tool results that failed (``is_error``, or a non-zero exit code), the
  result is there verbatim or its error line (80 characters) appears in the plan's text: the first line
  that reads like an error and names it (a ``==== FAILURES ====`` banner or a bare ``Traceback (most
  recent call last):`` header names nothing). The first version of this check took the first line that
  reads like an error at all; that figure is still reported (``... first matching line``);
- shared prefix (the issue's measure): the tokens of the messages a plan shares, as a prefix, with the
  previous plan, over this plan's history tokens (mean, median, p10; message by message, as the planner's
  manifest counts it). A step that appends a long tool result lowers it even when the previous plan is
  kept whole: what it appends is new content, not a broken cache;
- previous plan kept: the same shared tokens over the *previous* plan's history tokens, the share of the
  previous request a prompt cache can reuse (what the planner controls; mean, median, p10 over the steps
  that follow a plan), with the share of steps that compact (a compaction report that is not a dry run)
  and the same measure over the steps that do not;
- shared prefix ceiling: the most the shared prefix can be at a step whatever the planner does, when the
  messages appended since the previous call are sent whole: 1 - their tokens / the room for history (the
  hard limit less the fixed tokens), mean, median, p10 over the steps after the first. A goal above it
  cannot be met by any planner on that session and window. Why it binds every planner, compacting or
  not: a plan of ``P <= R`` history tokens that sends the ``a`` new tokens shares at most ``P - a`` of
  them, so its ratio is at most ``1 - a / P <= 1 - a / R``; a step that must drop tokens (the previous plan
  plus ``a`` pass ``R``) shares at most what comes before the first message it drops, which is again at
  most ``R - a`` (dropping right before the new messages reaches it; dropping earlier, as a cut from the
  front does, shares less). It is reached only by a plan that fills the room at every step, which is
  why a real planner, which compacts in batches down to a low-water mark, stays below it;
- tokens saved: 1 - planned / native tokens over the steps whose native request passes the hard limit;
- plan time per step (CPU).

The text checks run on ``--sample`` steps spread evenly over the session (and always on the last), the
prefix and time on every step. Runs against older versions of core too (``PYTHONPATH`` to another
checkout), to report "before".
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4_context_core import (
    CanonicalMessage,
    ModelDescriptor,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core.config import PlannerConfig
from ds4_context_core.planner import (
    ContextPlan,
    ContextPlanner,
    PlanState,
    SupplementalItem,
    fast_chars_v1,
    plan_context,
)
from ds4_context_core.pruning import normalize_tool_name
from ds4_context_engine.commands import SettledPlan, TaskDigestReader, settle_cut_supplements
from ds4_context_engine.pi import build_pi_context, read_pi_session

_WRITE_TOOLS = frozenset(
    {"edit", "write", "multiedit", "applypatch", "create", "notebookedit", "strreplaceeditor", "writefile"}
)
_MAIN_KEYS = ("command", "cmd", "file_path", "path", "notebook_path", "pattern", "query", "url", "glob")
_PATH_KEYS = ("file_path", "path", "notebook_path", "filename")
_EXIT = re.compile(r"\[exit code (-?\d+)\]|exit (?:code|status)[ =:]*(-?\d+)", re.IGNORECASE)
_ERROR_LINE = re.compile(r"error|fail|traceback|exception|panic", re.IGNORECASE)
_ARG_CHARS = 80


def _fold(text: str) -> str:
    return " ".join(text.split())


def main_argument(call: ToolCallBlock) -> str | None:
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    for key in _MAIN_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return _fold(value)[:_ARG_CHARS]
    return None


def _call_path(call: ToolCallBlock) -> str | None:
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    for key in _PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def message_text(message: CanonicalMessage) -> str:
    parts: list[str] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            arguments = block.arguments if isinstance(block.arguments, dict) else {}
            parts.append(block.name)
            parts.extend(str(v) for v in arguments.values() if isinstance(v, str | int | float))
        elif isinstance(block, ToolResultBlock):
            parts.append(block.content)
    return _fold("\n".join(parts))


def _says_which(line: str) -> bool:
    """Whether an error line names the error: not a banner (``==== FAILURES ====``) and not a bare
    ``Traceback (most recent call last):`` header, which only say that something failed."""
    words = re.sub(r"[=_*#~\-]{3,}", " ", line).strip()
    banner = words != line.strip() and len(words.split()) <= 2
    return bool(words) and not banner and not words.lower().startswith("traceback (most recent call last)")


def _failed(message: CanonicalMessage) -> tuple[str, str] | None:
    """The error line of a failed tool result (folded, 80 chars), or None when it did not fail: the
    first line that reads like an error and names it, and the first line that reads like an error at all
    (the rule of the first version of this check, still reported)."""
    for block in message.blocks:
        text = block.content if isinstance(block, ToolResultBlock) else getattr(block, "text", None)
        if not isinstance(text, str):
            continue
        exit_match = _EXIT.search(text)
        code = next((g for g in exit_match.groups() if g is not None), "0") if exit_match else "0"
        if (isinstance(block, ToolResultBlock) and block.is_error) or code != "0":
            lines = [line for line in text.splitlines() if line.strip()]
            matching = [line for line in lines if _ERROR_LINE.search(line)]
            first = matching[0] if matching else (lines[0] if lines else "")
            named = next((line for line in matching if _says_which(line)), first)
            return _fold(named)[:_ARG_CHARS], _fold(first)[:_ARG_CHARS]
    return None


@dataclass
class Step:
    history: list[CanonicalMessage]  # what the host would send natively
    modified: list[str]  # every path an edit or write named on the branch so far (compacted part too)


@dataclass
class Scores:
    request: list[float] = field(default_factory=list)
    paths: list[float] = field(default_factory=list)
    identities: list[float] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    errors_first_line: list[float] = field(default_factory=list)
    prefix: list[float] = field(default_factory=list)
    kept: list[float] = field(default_factory=list)  # shared tokens / the previous plan's history tokens
    kept_quiet: list[float] = field(default_factory=list)  # the same, steps that do not compact
    prefix_quiet: list[float] = field(default_factory=list)  # the measure, steps that do not compact
    # The most the measure can be at each step whatever the planner does (see ceiling_of).
    ceiling: list[float] = field(default_factory=list)
    compacting: int = 0
    planned_steps: int = 0
    previous_tokens: int | None = None  # history tokens of the previous plan (None: no previous plan)
    planned_over: int = 0
    native_over: int = 0
    planned_all: int = 0
    native_all: int = 0
    times: list[float] = field(default_factory=list)
    fallbacks: int = 0
    over_limit: int = 0
    orphans: int = 0


def _orphans(messages: Sequence[CanonicalMessage]) -> int:
    called: set[str] = set()
    answered: set[str] = set()
    bad = 0
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolCallBlock):
                called.add(block.id)
            elif isinstance(block, ToolResultBlock):
                if block.tool_call_id in called:
                    answered.add(block.tool_call_id)
                else:
                    bad += 1
    return bad + len(called - answered)


def record_prefix(plan: ContextPlan, scores: Scores, fixed: int) -> None:
    """Both prefix measures of one plan that is ``ok``: over its own history tokens and over the
    previous plan's."""
    history_tokens = plan.budget.total_tokens - fixed
    shared = plan.manifest.shared_prefix_tokens
    ratio = shared / history_tokens if history_tokens else 1.0
    scores.prefix.append(ratio)
    compaction = plan.manifest.compaction
    compacts = compaction is not None and not compaction.dry_run
    if not compacts:
        scores.prefix_quiet.append(ratio)
    scores.planned_steps += 1
    scores.compacting += compacts
    previous = scores.previous_tokens
    if previous is not None:
        kept = shared / previous if previous else 1.0
        scores.kept.append(kept)
        if not compacts:
            scores.kept_quiet.append(kept)
    scores.previous_tokens = history_tokens


def appended_since(
    previous: list[CanonicalMessage] | None, history: list[CanonicalMessage]
) -> list[CanonicalMessage]:
    """The messages of ``history`` after what it shares, as a prefix, with the previous call's (compared
    by message id: a host that rewrites its history, as Pi's compaction does, gives the new ones new ids)."""
    if previous is None:
        return history
    common = 0
    for old, new in zip(previous, history, strict=False):
        if old.id != new.id:
            break
        common += 1
    return history[common:]


def ceiling_of(appended: list[CanonicalMessage], room: int) -> float:
    """The largest shared prefix (the issue's measure) a plan of at most ``room`` history tokens can have
    when it sends the newly appended messages whole: ``1 - appended / room``. A planner that keeps the
    whole previous plan and fills the room reaches it; only a plan that trims what was just appended
    (a new result too large for the room) can pass it."""
    tokens = sum(fast_chars_v1(message) for message in appended)
    return max(0.0, 1.0 - tokens / room) if room > 0 else 0.0


def prefix_summary(scores: Scores) -> dict[str, str]:
    """The rows of both prefix measures, the share of compacting steps and the prefix kept without one."""

    def three(values: list[float]) -> str:
        if not values:
            return "-"
        return f"{statistics.fmean(values):.3f}/{statistics.median(values):.3f}/{_quantile(values, 0.1):.3f}"

    return {
        "shared prefix mean": f"{statistics.fmean(scores.prefix):.3f}" if scores.prefix else "-",
        "shared prefix median": f"{statistics.median(scores.prefix):.3f}" if scores.prefix else "-",
        "shared prefix p10": f"{_quantile(scores.prefix, 0.1):.3f}",
        "prev. plan kept mean/med/p10": three(scores.kept),
        "steps that compact": f"{100 * scores.compacting / scores.planned_steps:.1f}%"
        if scores.planned_steps
        else "-",
        "  kept, no compaction m/med/p10": three(scores.kept_quiet),
        "  shared, no compaction m/med/p10": three(scores.prefix_quiet),
        "shared prefix ceiling m/med/p10": three(scores.ceiling),
    }


def check(step: Step, plan: ContextPlan, scores: Scores) -> None:
    """The text checks of one plan against its step."""
    history = step.history
    sent_ids = {id(m) for m in plan.messages}
    sent_equal = {m.id: m for m in plan.messages}

    def verbatim(message: CanonicalMessage) -> bool:
        return id(message) in sent_ids or sent_equal.get(message.id) == message

    text = "\n".join(message_text(m) for m in plan.messages)
    current = next(
        (
            m
            for m in reversed(history)
            if m.role == "user" and not m.tool_result_ids and not m.flags.synthetic
        ),
        None,
    )
    scores.request.append(1.0 if current is None or verbatim(current) else 0.0)
    verbatim_calls: set[str] = set()
    for message in plan.messages:
        verbatim_calls.update(message.tool_call_ids)
    if step.modified:
        present = sum(1 for path in step.modified if path in text)
        scores.paths.append(present / len(step.modified))
    identities: dict[tuple[str, str], bool] = {}
    for message in history:
        for block in message.blocks:
            if isinstance(block, ToolCallBlock):
                argument = main_argument(block)
                if argument is None:
                    continue
                key = (normalize_tool_name(block.name), argument)
                found = block.id in verbatim_calls and verbatim(message)
                identities[key] = identities.get(key, False) or found
    if identities:
        recovered = sum(1 for (_, argument), found in identities.items() if found or argument in text)
        scores.identities.append(recovered / len(identities))
    results = [m for m in history if m.role == "tool"][-10:]
    failed = [(m, lines) for m in results if (lines := _failed(m)) is not None]
    if failed:
        present = sum(1 for m, (line, _) in failed if verbatim(m) or (line and line in text))
        scores.errors.append(present / len(failed))
        present = sum(1 for m, (_, line) in failed if verbatim(m) or (line and line in text))
        scores.errors_first_line.append(present / len(failed))


def canonical_steps(history: list[CanonicalMessage]) -> list[Step]:
    steps: list[Step] = []
    modified: dict[str, None] = {}
    for end, message in enumerate(history):
        if message.role == "assistant" and end > 0:
            steps.append(Step(history=history[:end], modified=list(modified)))
        for block in message.blocks:
            if isinstance(block, ToolCallBlock) and normalize_tool_name(block.name) in _WRITE_TOOLS:
                path = _call_path(block)
                if path:
                    modified[path] = None
    return steps


def pi_steps(path: Path) -> list[Step]:
    session = read_pi_session(path)
    steps: list[Step] = []
    modified: dict[str, None] = {}
    for entry in session.entries:
        message = entry.data.get("message") if entry.type == "message" else None
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and entry.parent_id is not None:
            history = list(build_pi_context(session, entry.parent_id).messages)
            if history:
                steps.append(Step(history=history, modified=list(modified)))
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            for block in content:
                if not (isinstance(block, dict) and block.get("type") == "toolCall"):
                    continue
                name, arguments = block.get("name"), block.get("arguments")
                if isinstance(name, str) and normalize_tool_name(name) in _WRITE_TOOLS:
                    value = arguments.get("path") if isinstance(arguments, dict) else None
                    value = value or (arguments.get("file_path") if isinstance(arguments, dict) else None)
                    if isinstance(value, str) and value:
                        modified[value] = None
    return steps


# Core's own task digest, where the core under test has one (the "before" run has not).
CONFIG: dict[str, Any] = (
    {"planner": {"task_digest": True}} if "task_digest" in PlannerConfig.model_fields else {}
)


ENGINE_CONFIG: dict[str, Any] = {**CONFIG, "planner": {"task_digest": False}} if CONFIG else {}


def _core_planner(model: ModelDescriptor, fixed: int) -> Callable[[list[CanonicalMessage]], ContextPlan]:
    planner = ContextPlanner(config=CONFIG)

    def plan(history: list[CanonicalMessage]) -> ContextPlan:
        return planner.plan(history, model=model, fixed_tokens=fixed)

    return plan


def _engine_planner(model: ModelDescriptor, fixed: int) -> Callable[[list[CanonicalMessage]], ContextPlan]:
    """Plans as the engine's workspace does: the engine's digest instead of core's, read incrementally
    and kept byte for byte while the cut does not move (one plan per step between compactions)."""
    state: PlanState | None = None
    settled: SettledPlan | None = None
    reader = TaskDigestReader()
    # validated once, as a workspace does; the engine's digest holds core's facts: one digest is sent
    config = ContextPlanner(config=ENGINE_CONFIG).config

    def plan(history: list[CanonicalMessage]) -> ContextPlan:
        nonlocal state, settled

        def replan(extra: tuple[SupplementalItem, ...]) -> ContextPlan:
            return plan_context(
                history,
                model=model,
                fixed_tokens=fixed,
                state=state,
                supplemental=extra,
                config=config,
            )

        def digest_of(cut: ContextPlan) -> list[SupplementalItem]:
            digest = reader.digest(history, cut)
            return [digest] if digest is not None else []

        carried = settled.extra if settled is not None else ()
        settled = settle_cut_supplements(
            history,
            replan(carried),
            digest_of,
            replan,
            planned_with=carried,
            planned_for=settled.key if settled is not None else None,
        )
        state = settled.plan.state
        return settled.plan

    return plan


def run(
    steps: list[Step], plan_of: Callable[[list[CanonicalMessage]], ContextPlan], fixed: int, sample: int
) -> Scores:
    scores = Scores()
    every = max(1, len(steps) // max(1, sample))
    previous_history: list[CanonicalMessage] | None = None
    for number, step in enumerate(steps):
        appended = appended_since(previous_history, step.history)
        previous_history = step.history
        started = time.process_time()
        plan = plan_of(step.history)
        scores.times.append(time.process_time() - started)
        if not plan.ok:
            scores.fallbacks += 1
            scores.previous_tokens = None
            continue
        budget = plan.budget
        scores.over_limit += budget.total_tokens > budget.hard_limit
        scores.orphans += _orphans(plan.messages)
        record_prefix(plan, scores, fixed)
        if number > 0:
            scores.ceiling.append(ceiling_of(appended, budget.hard_limit - fixed))
        native = plan.manifest.native_tokens + fixed
        scores.native_all += native
        scores.planned_all += budget.total_tokens
        if native > budget.hard_limit:
            scores.native_over += native
            scores.planned_over += budget.total_tokens
        if number % every == 0 or number == len(steps) - 1:
            check(step, plan, scores)
    return scores


def _pct(values: list[float]) -> str:
    return f"{100 * statistics.fmean(values):.1f}%" if values else "-"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _times(ms: list[float]) -> str:
    if not ms:
        return "-"
    return f"{statistics.fmean(ms):.2f}/{ms[len(ms) // 2]:.2f}/{ms[int(0.95 * (len(ms) - 1))]:.2f}"


def summary(scores: Scores) -> dict[str, Any]:
    ms = sorted(1000 * t for t in scores.times)
    return {
        "latest request": _pct(scores.request),
        "modified paths": _pct(scores.paths),
        "call identities": _pct(scores.identities),
        "errors of last 10 results": _pct(scores.errors),
        "  ... first matching line": _pct(scores.errors_first_line),
        **prefix_summary(scores),
        "tokens saved (steps past limit)": f"{100 * (1 - scores.planned_over / scores.native_over):.1f}%"
        if scores.native_over
        else "-",
        "tokens saved (all steps)": f"{100 * (1 - scores.planned_all / scores.native_all):.1f}%"
        if scores.native_all
        else "-",
        "plan ms mean/p50/p95": _times(ms),
        "fallbacks / over limit / orphans": f"{scores.fallbacks}/{scores.over_limit}/{scores.orphans}",
    }


def replay_task(args: Any, *, pi: bool, history: list[CanonicalMessage] | None) -> None:
    steps = pi_steps(args.session) if pi else canonical_steps(history or [])
    windows = [int(w) for w in args.windows.split(",") if w]
    max_tokens = args.max_tokens if args.max_tokens and args.max_tokens > 0 else None
    print(
        f"session: {args.session}: {len(steps)} model calls; max output {max_tokens}, fixed {args.fixed}; "
        f"core config {CONFIG or 'default'}"
    )
    table: dict[str, dict[str, Any]] = {}
    for window in windows:
        model = ModelDescriptor(provider="replay", id="replay", context_window=window, max_tokens=max_tokens)
        for label, factory in (("core", _core_planner), ("engine", _engine_planner)):
            table[f"{label} {window // 1000}k"] = summary(
                run(steps, factory(model, args.fixed), args.fixed, args.sample)
            )
    columns = list(table)
    metrics = list(next(iter(table.values())))
    print(f"{'metric':<34}" + "".join(f"{c:>20}" for c in columns))
    for metric in metrics:
        print(f"{metric:<34}" + "".join(f"{table[c][metric]:>20}" for c in columns))
    if args.json:
        args.json.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
