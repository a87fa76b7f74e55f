"""Engine plans against core plans, step by step: shared prefix (all steps, new user turns) and plan time.

    uv run --no-config --no-sync python benchmarks/bench_engine_plans.py [PI-SESSION.jsonl]
        [--windows 32000,128000] [--max-tokens 16384] [--profile]

A Pi session (default: the shipped ``fixtures/pi-usage-session.jsonl``, which holds Pi compaction
entries) is written to a scratch file line by line, as a host appends it. Before every assistant message
(a model call) the engine plans it as a host does: ``ContextWorkspace.refresh()`` (read the appended
bytes, index them in a SQLite derived store) and ``ContextWorkspace.plan()`` (task digest, retrieved
history, summaries). Core plans the very same messages with ``plan_context`` and its own carried state.

Per planner and window: the shared-prefix ratio between consecutive plans (tokens of the leading
messages both plans hold byte for byte / tokens of the plan), mean and p10, over all steps, over steps
that answer a new user message, and over steps where the plan compacted or Pi compacted; and the CPU
time per step (p50, p95). The engine's time is given for refresh + plan (what a host pays) and for the
plan alone. ``--profile`` prints the engine's top functions by cumulative time at the first window.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ds4_context_core import CanonicalMessage, ModelDescriptor
from ds4_context_core.planner import ContextPlan, PlanState, plan_context
from ds4_context_engine.commands import ContextWorkspace
from ds4_context_engine.store import open_derived_store

DEFAULT_SESSION = Path(__file__).resolve().parent / "fixtures" / "pi-usage-session.jsonl"


@dataclass
class Series:
    ratios: list[float] = field(default_factory=list)
    turn_ratios: list[float] = field(default_factory=list)
    compaction_ratios: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    plan_times: list[float] = field(default_factory=list)
    previous: tuple[CanonicalMessage, ...] = ()


def shared_ratio(previous: tuple[CanonicalMessage, ...], plan: ContextPlan) -> float:
    tokens = [item.tokens for item in plan.items]
    total = sum(tokens)
    shared = 0
    for old, new, weight in zip(previous, plan.messages, tokens, strict=False):
        if old is not new and old != new:
            break
        shared += weight
    return shared / total if total else 1.0


def record(series: Series, plan: ContextPlan, *, new_turn: bool, compacted: bool) -> None:
    if series.previous:
        ratio = shared_ratio(series.previous, plan)
        series.ratios.append(ratio)
        if new_turn:
            series.turn_ratios.append(ratio)
        if compacted:
            series.compaction_ratios.append(ratio)
    series.previous = plan.messages


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))] if ordered else float("nan")


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def replay(session: Path, window: int, max_tokens: int, profile: bool) -> tuple[Series, Series, int]:
    lines = session.read_bytes().splitlines(keepends=True)
    model = ModelDescriptor(provider="openai", id="replay", context_window=window, max_tokens=max_tokens)
    engine, core = Series(), Series()
    core_state: PlanState | None = None
    steps = 0
    profiler = cProfile.Profile() if profile else None
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "session.jsonl"
        path.write_bytes(lines[0])
        store = open_derived_store(Path(scratch) / "derived.sqlite3")
        workspace = ContextWorkspace(path, store=store, model=model)
        try:
            last_role: str | None = None
            pi_compacted = False
            with path.open("ab") as handle:
                for line in lines[1:]:
                    entry = json.loads(line)
                    message = entry.get("message") if entry.get("type") == "message" else None
                    if isinstance(message, dict) and message.get("role") == "assistant" and steps:
                        started = time.process_time()
                        if profiler is not None:
                            profiler.enable()
                        workspace.refresh()
                        planned = time.process_time()
                        plan = workspace.plan()
                        if profiler is not None:
                            profiler.disable()
                        done = time.process_time()
                        engine.times.append(done - started)
                        engine.plan_times.append(done - planned)
                        new_turn = last_role == "user"
                        compacted = pi_compacted or plan.manifest.compaction is not None
                        record(engine, plan, new_turn=new_turn, compacted=compacted)
                        messages = workspace.context.messages
                        started = time.process_time()
                        core_plan = plan_context(messages, model=model, state=core_state)
                        core.times.append(time.process_time() - started)
                        core_state = core_plan.state
                        compacted = pi_compacted or core_plan.manifest.compaction is not None
                        record(core, core_plan, new_turn=new_turn, compacted=compacted)
                        pi_compacted = False
                    handle.write(line)
                    handle.flush()
                    if isinstance(message, dict):
                        last_role = message.get("role")
                        steps += 1
                    elif entry.get("type") == "compaction":
                        pi_compacted = True
        finally:
            workspace.close()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    return engine, core, len(engine.times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("session", nargs="?", type=Path, default=DEFAULT_SESSION)
    parser.add_argument("--windows", default="32000,128000")
    parser.add_argument("--max-tokens", type=int, default=16_384)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(f"session: {args.session}")
    header = (
        f"{'window':>7} {'planner':<8}{'steps':>6}{'prefix mean':>12}{'p10':>6}{'turn mean':>10}"
        f"{'p10':>6}{'compact mean':>13}{'ms p50':>8}{'p95':>7}{'plan p50':>9}"
    )
    print(header)
    for number, window in enumerate(int(w) for w in args.windows.split(",")):
        engine, core, steps = replay(args.session, window, args.max_tokens, args.profile and number == 0)
        for name, series in (("engine", engine), ("core", core)):
            plan_ms = p(series.plan_times, 0.5) * 1000 if series.plan_times else p(series.times, 0.5) * 1000
            print(
                f"{window:>7} {name:<8}{steps:>6}{mean(series.ratios):>12.3f}{p(series.ratios, 0.1):>6.2f}"
                f"{mean(series.turn_ratios):>10.3f}{p(series.turn_ratios, 0.1):>6.2f}"
                f"{mean(series.compaction_ratios):>13.3f}"
                f"{p(series.times, 0.5) * 1000:>8.2f}{p(series.times, 0.95) * 1000:>7.2f}{plan_ms:>9.2f}"
            )


if __name__ == "__main__":
    main()
