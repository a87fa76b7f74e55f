"""Replay the long sessions of ``benchmarks/fixtures`` call by call for each destination format and
window, and count what issue 15 promises never happens: a plan over its hard limit, a plan whose
calibrated size plus reserve passes the window, a fallback that sends more than the window, a plan the
destination rejects once converted, and a silent drop (a history message neither sent, restorable from
what is sent, nor counted in the manifest's exclusions). Also times planning with and without a
destination (the self-check converts the plan).

    uv run --no-config --no-sync python benchmarks/bench_fits.py [--steps N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from make_coding_session import read_session

from ds4_context_core import CanonicalMessage, ModelDescriptor
from ds4_context_core._planner._structure import structure_problem
from ds4_context_core.planner import ContextPlan, ContextPlanner, restore
from ds4_context_engine.pi import build_pi_context, read_pi_session

FIXTURES = Path(__file__).parent / "fixtures"
WINDOWS = (8_000, 32_000, 128_000, 200_000)
DESTINATIONS = (None, "anthropic", "openai-chat", "openai-responses")


def _sessions() -> dict[str, tuple[list[CanonicalMessage], str]]:
    pi = build_pi_context(read_pi_session(FIXTURES / "pi-usage-session.jsonl")).messages
    return {
        "coding-session": (read_session(FIXTURES / "coding-session.jsonl"), "anthropic"),
        "pi-usage-session": (list(pi), "anthropic"),
    }


def _silent_drops(plan: ContextPlan, prefix: list[CanonicalMessage]) -> int:
    sent = {message.id for message in plan.messages}
    missing = sum(1 for m in prefix if m.id not in sent and not restore(plan, m.id))
    return max(0, missing - sum(exclusion.count for exclusion in plan.manifest.exclusions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=0, help="replay only the last N calls (0: all)")
    parser.add_argument("--fixed", type=int, default=1_000, help="system prompt and tool tokens")
    args = parser.parse_args()
    print(
        f"{'session':<18}{'window':>8}{'destination':>18}{'steps':>7}{'over-hard':>10}{'over-win':>9}"
        f"{'fb-over':>8}{'rejected':>9}{'drops':>6}{'ms/step':>9}"
    )
    for name, (history, provider) in _sessions().items():
        calls = [i for i, m in enumerate(history) if m.role == "assistant" and i > 0]
        if args.steps:
            calls = calls[-args.steps :]
        for window in WINDOWS:
            model = ModelDescriptor(provider=provider, id="claude-sonnet-4-5", context_window=window)
            timings: dict[str | None, float] = {}
            for destination in DESTINATIONS:
                planner = ContextPlanner()
                over_hard = over_window = fallback_over = rejected = drops = 0
                elapsed = []
                for call in calls:
                    prefix = history[:call]
                    started = time.perf_counter()
                    plan = planner.plan(prefix, model=model, fixed_tokens=args.fixed, destination=destination)
                    elapsed.append(time.perf_counter() - started)
                    budget = plan.budget
                    size = budget.total_tokens * budget.calibration_ratio + budget.output_reserve
                    if plan.ok and budget.total_tokens > budget.hard_limit:
                        over_hard += 1
                    if plan.messages and size > window:
                        over_window += 1
                        fallback_over += plan.fallback is not None
                    if destination is not None and plan.messages:
                        rejected += structure_problem(plan.messages, destination) is not None
                    drops += _silent_drops(plan, prefix)
                timings[destination] = statistics.median(elapsed) * 1000
                print(
                    f"{name:<18}{window:>8}{destination or '-':>18}{len(calls):>7}{over_hard:>10}"
                    f"{over_window:>9}{fallback_over:>8}{rejected:>9}{drops:>6}{timings[destination]:>9.2f}"
                )


if __name__ == "__main__":
    main()
