"""Replay a session call by call and report what the planner would have sent.

    uv run --no-config --no-sync python benchmarks/replay.py [SESSION.jsonl] [--window 128000]
        [--max-tokens 16384] [--fixed 4000] [--generate MESSAGES] [--digest]
    uv run --no-config --no-sync python benchmarks/replay.py PI-SESSION.jsonl
        [--windows 8000,32000,128000,200000] [--max-tokens 0] [--fixed 4000] [--calibration usage]
        [--steps STEPS.csv]

SESSION is a ``ds4-runtime-session-v1`` JSONL file (default: the shipped fixture
``benchmarks/fixtures/coding-session.jsonl``); ``--generate N`` builds an N-message session in memory
instead. A model call happens before every assistant message; each call is planned with the previous
plan's state, exactly as a host would. A sliding window (newest complete tool groups that fit the same
hard limit) runs on the same calls for comparison. ``--digest`` plans as the engine's workspace does:
with the task digest of what each plan cuts in front (``ds4_context_engine.commands.TaskDigestReader``),
kept from step to step while the cut does not move.

Reported: largest plan against the hard limit, orphaned tool results or unanswered calls sent (must be 0),
mean shared-prefix ratio between consecutive plans (shared tokens / plan tokens), tokens saved against
sending everything, and plan time per step.

A Pi session (header ``"type":"session"``; ``fixtures/pi-usage-session.jsonl`` is one) is replayed
against the usage its assistant messages report; see ``pi_replay.py``. ``--task`` checks instead what
each plan keeps of the task (latest request, modified paths, call identities, recent errors, shared
prefix and previous plan kept, tokens saved; core alone and as the engine plans), for either kind of
session; see ``task_replay.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))

from _plot import ReplayStep, write_replay_svg
from make_coding_session import generate, read_session
from pi_replay import replay_pi
from task_replay import replay_task

from ds4_context_core import CanonicalMessage, ModelDescriptor, ToolCallBlock, ToolResultBlock
from ds4_context_core.planner import (
    ContextPlan,
    ContextPlanner,
    PlanState,
    SupplementalItem,
    fast_chars_v1,
    plan_context,
)
from ds4_context_engine.commands import SettledPlan, TaskDigestReader, settle_cut_supplements

DEFAULT_SESSION = Path(__file__).resolve().parent / "fixtures" / "coding-session.jsonl"


def is_pi_session(path: Path) -> bool:
    with path.open("rb") as handle:
        return b'"type":"session"' in handle.readline().replace(b" ", b"")


def orphans(messages: tuple[CanonicalMessage, ...]) -> int:
    """Results without an earlier call plus calls without a result: what a provider rejects."""
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


def sliding_window(history: list[CanonicalMessage], tokens: list[int], limit: int) -> list[CanonicalMessage]:
    """The newest messages that fit ``limit``, never starting inside a tool step."""
    used = 0
    start = len(history)
    while start > 0 and used + tokens[start - 1] <= limit:
        used += tokens[start - 1]
        start -= 1
    while start < len(history) and history[start].role == "tool":
        start += 1
    return history[start:]


def shared_prefix(
    previous: list[CanonicalMessage], current: list[CanonicalMessage], tokens: dict[str, int]
) -> int:
    shared = 0
    for old, new in zip(previous, current, strict=False):
        if old is not new and old != new:
            break
        shared += tokens.get(new.id, 0)
    return shared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("session", nargs="?", type=Path, default=DEFAULT_SESSION)
    parser.add_argument("--window", type=int, default=128_000)
    parser.add_argument("--max-tokens", type=int, default=16_384)
    parser.add_argument("--fixed", type=int, default=4_000, help="system prompt and tool schema tokens")
    parser.add_argument("--generate", type=int, default=0, help="build an N-message session in memory")
    parser.add_argument("--digest", action="store_true", help="add the engine's task digest of the cut")
    parser.add_argument(
        "--ratio", type=float, default=None, help="calibration ratio to plan with (default: the prior)"
    )
    parser.add_argument("--windows", default="8000,32000,128000,200000", help="Pi sessions: the windows")
    parser.add_argument(
        "--calibration",
        choices=["usage", "default", "one"],
        default="usage",
        help="Pi sessions: the ratio each plan gets (usage: learnt from the calls so far; default: none "
        "passed, the library decides; one: 1.0)",
    )
    parser.add_argument(
        "--fixed-constant", action="store_true", help="Pi sessions: pass --fixed, not the overhead learnt"
    )
    parser.add_argument("--steps", type=Path, default=None, help="Pi sessions: write every step to this CSV")
    parser.add_argument(
        "--task", action="store_true", help="check what each plan keeps of the task (see task_replay.py)"
    )
    parser.add_argument("--sample", type=int, default=80, help="--task: steps whose text is checked")
    parser.add_argument("--json", type=Path, default=None, help="--task: also write the table as JSON")
    parser.add_argument(
        "--plot", type=Path, default=None, help="write an SVG of tokens per step to this file"
    )
    args = parser.parse_args()

    if args.task:
        pi = not args.generate and is_pi_session(args.session)
        if not args.windows or args.windows == parser.get_default("windows"):
            args.windows = "32000,128000"
        loaded = (
            None if pi else (list(generate(args.generate)) if args.generate else read_session(args.session))
        )
        replay_task(args, pi=pi, history=loaded)
        return

    if not args.generate and is_pi_session(args.session):
        replay_pi(args)
        return

    history = list(generate(args.generate)) if args.generate else read_session(args.session)
    source = f"generated ({args.generate} messages)" if args.generate else str(args.session)
    model = ModelDescriptor(
        provider="replay", id="replay", context_window=args.window, max_tokens=args.max_tokens
    )
    planner = ContextPlanner()
    token_of = [fast_chars_v1(message) for message in history]

    calls = [i for i, message in enumerate(history) if message.role == "assistant" and i > 0]
    times: list[float] = []
    ratios: list[float] = []
    slide_ratios: list[float] = []
    over: list[bool] = []  # whether the full history no longer fit at that step
    largest = 0
    hard_limit = 0
    orphan_count = 0
    fallbacks = 0
    native_total = 0
    planned_total = 0
    compactions = 0
    previous_slide: list[CanonicalMessage] = []
    slide_tokens = {message.id: token for message, token in zip(history, token_of, strict=True)}
    state: PlanState | None = None
    plotted: list[ReplayStep] = []  # for --plot

    settled: SettledPlan | None = None
    reader = TaskDigestReader()  # as the workspace: each cut message read once, whatever the steps

    def digest_plan(prefix: list[CanonicalMessage]) -> ContextPlan:
        nonlocal state, settled

        def replan(extra: tuple[SupplementalItem, ...]) -> ContextPlan:
            return plan_context(
                prefix,
                model=model,
                fixed_tokens=args.fixed,
                state=state,
                supplemental=extra,
                calibration_ratio=args.ratio,
                task_digest=False,  # the engine's digest holds core's facts: one digest is sent
            )

        def digest_of(cut: ContextPlan) -> list[SupplementalItem]:
            digest = reader.digest(prefix, cut)
            return [digest] if digest is not None else []

        carried = settled.extra if settled is not None else ()
        settled = settle_cut_supplements(
            prefix,
            replan(carried),
            digest_of,
            replan,
            planned_with=carried,
            planned_for=settled.key if settled is not None else None,
        )
        state = settled.plan.state
        return settled.plan

    for end in calls:
        prefix = history[:end]
        started = time.process_time()  # CPU time: other load on the machine does not count
        plan = (
            digest_plan(prefix)
            if args.digest
            else planner.plan(prefix, model=model, fixed_tokens=args.fixed, calibration_ratio=args.ratio)
        )
        times.append(time.process_time() - started)
        if not plan.ok:
            fallbacks += 1
            continue
        hard_limit = plan.budget.hard_limit
        largest = max(largest, plan.budget.total_tokens)
        orphan_count += orphans(plan.messages)
        history_tokens = plan.budget.total_tokens - args.fixed
        ratios.append(plan.manifest.shared_prefix_tokens / history_tokens if history_tokens else 1.0)
        native_total += plan.manifest.native_tokens
        planned_total += plan.budget.total_tokens
        compactions += plan.manifest.compaction is not None
        slide = sliding_window(prefix, token_of[:end], hard_limit - args.fixed)
        slide_size = sum(slide_tokens[m.id] for m in slide)
        slide_ratios.append(
            shared_prefix(previous_slide, slide, slide_tokens) / slide_size if slide_size else 1.0
        )
        previous_slide = slide
        over.append(plan.manifest.native_tokens > hard_limit)
        plotted.append(ReplayStep(plan.budget.total_tokens, plan.manifest.native_tokens, ratios[-1]))

    times.sort()
    ms = [t * 1000 for t in times]
    print(f"session: {source}: {len(history)} messages, {len(calls)} model calls")
    print(f"model window {args.window}, max output {args.max_tokens}, fixed overhead {args.fixed} tokens")
    print()
    print(f"{'metric':<44}{'ds4 planner':>16}{'sliding window':>16}")
    print(f"{'largest plan (tokens)':<44}{largest:>16}{'':>16}")
    print(f"{'hard limit (tokens)':<44}{hard_limit:>16}{hard_limit:>16}")
    print(f"{'orphaned results / unanswered calls sent':<44}{orphan_count:>16}{'':>16}")
    mean_ratio = statistics.fmean(ratios) if ratios else 0.0
    mean_slide = statistics.fmean(slide_ratios) if slide_ratios else 0.0
    print(f"{'mean shared-prefix ratio':<44}{mean_ratio:>16.3f}{mean_slide:>16.3f}")
    full = [r for r, o in zip(ratios, over, strict=True) if o]
    full_slide = [r for r, o in zip(slide_ratios, over, strict=True) if o]
    if full:
        label = f"  ... over the {len(full)} steps past the window"
        print(f"{label:<44}{statistics.fmean(full):>16.3f}{statistics.fmean(full_slide):>16.3f}")
    saved = 1 - planned_total / native_total if native_total else 0.0
    print(f"{'tokens sent / tokens of full history':<44}{planned_total:>8}/{native_total:<7}{'':>16}")
    print(f"{'tokens saved against sending everything':<44}{saved:>15.1%}{'':>16}")
    print(f"{'compactions':<44}{compactions:>16}{'':>16}")
    print(f"{'fallbacks':<44}{fallbacks:>16}{'':>16}")
    if ms:
        p50, p95 = ms[len(ms) // 2], ms[int(0.95 * (len(ms) - 1))]
        timing = f"{statistics.fmean(ms):.2f}/{p50:.2f}/{p95:.2f}/{ms[-1]:.2f}"
        print(f"{'plan time per step ms (mean/p50/p95/max)':<44}{timing:>16}")
    if args.plot and plotted:
        title = f"{source}: window {args.window:,}, {len(plotted)} steps"
        write_replay_svg(args.plot, plotted, window=args.window, hard_limit=hard_limit, title=title)
        print(f"plot: {args.plot}")
    elif args.plot:
        print("plot: not written, every step fell back")


if __name__ == "__main__":
    main()
