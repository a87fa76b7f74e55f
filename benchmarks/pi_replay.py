"""Replay a Pi session against the usage it reports: calibration accuracy, and plans against the window.

Called by ``replay.py`` for a Pi session. A model call happens at every assistant message; the request
it answered is the branch up to its parent (``build_pi_context``), which is what the engine plans from.

1. Calibration, online, as the engine does it: a sample pairs two consecutive calls whose later request
   extends the earlier one (estimated = ``chars-v1`` of the messages added, actual = how much more input
   the provider reported). Before call i only the samples of calls < i are known; the ratio is what
   ``TokenCalibrator`` publishes (``None`` under 5 samples: the provider family's prior applies). The
   fixed overhead (system prompt and tools, not in the file) is taken from the first call that reports
   usage: ``reported - ratio * estimate``, when the request is almost all overhead. The calibrated
   estimate of call i is
   ``ratio * estimate + overhead``; its error against the reported input is reported as the median
   over the calls after the first 5.
2. Plans: at each window, every call is planned (state carried, as a host does) with that ratio and,
   as ``fixed_tokens``, the overhead learnt so far (``--fixed N`` until a call has reported usage, or
   always with ``--fixed-constant``). A step's *calibrated size* is what the plan holds in provider tokens as
   the planner sees them (its estimate times its ratio); its *real size* uses the session's hindsight
   yardstick: the median delta ratio of the whole session and the overhead measured with it. A step is
   over the window when size + output reserve > window. A fallback sends the native history: its size
   is that of the native history.

Runs against older versions of core too (``PYTHONPATH`` to another checkout), to report "before".
"""

from __future__ import annotations

import csv
import itertools
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import ContextPlanner, fast_chars_v1
from ds4_context_core.tokens import TokenCalibrator
from ds4_context_engine.pi import build_pi_context, read_pi_session

try:  # core's reader of every usage shape; older versions only had the engine's Pi reader
    from ds4_context_core.tokens import read_reported_input

    def reported_input(usage: object) -> int | None:
        return read_reported_input(usage).input_tokens

except ImportError:  # pragma: no cover - the "before" run
    from ds4_context_engine.commands._calibrate import pi_usage_input_tokens as reported_input

try:
    from ds4_context_core.tokens import calibration_prior
except ImportError:  # pragma: no cover - the "before" run: no priors
    calibration_prior = None  # type: ignore[assignment]

_NO_SIGNAL = {"aborted", "error"}
_WARMUP_CALLS = 5


@dataclass
class Call:
    entry_id: str
    ids: tuple[str, ...]
    estimate: int  # chars-v1 of the request's messages
    reported: int | None  # the provider's input count, when usable
    history: list[Any]


def _calls(path: Path) -> tuple[list[Call], str, str]:
    session = read_pi_session(path)
    calls: list[Call] = []
    provider = model_id = ""
    for entry in session.entries:
        message = entry.data.get("message") if entry.type == "message" else None
        if not isinstance(message, dict) or message.get("role") != "assistant" or entry.parent_id is None:
            continue
        provider = str(message.get("provider") or provider)
        model_id = str(message.get("model") or model_id)
        history = list(build_pi_context(session, entry.parent_id).messages)
        if not history:
            continue
        usable = message.get("stopReason") not in _NO_SIGNAL
        calls.append(
            Call(
                entry_id=entry.id,
                ids=tuple(m.id for m in history),
                estimate=sum(map(fast_chars_v1, history)),
                reported=reported_input(message.get("usage")) if usable else None,
                history=history,
            )
        )
    return calls, provider, model_id


def _planner_ratio(calibration: Any) -> float | None:
    """The ratio learnt from usage, or None under the minimum (core before planner_ratio existed too)."""
    method = getattr(calibration, "planner_ratio", None)
    if method is not None:
        return method()
    return calibration.ratio if calibration.status == "calibrated" else None


def _prior(provider: str, model_id: str) -> float:
    """The ratio core assumes before usage (1 in versions without priors)."""
    if calibration_prior is None:
        return 1.0
    return calibration_prior(ModelDescriptor(provider=provider, id=model_id, context_window=1)).ratio


def _online(calls: list[Call], prior: float) -> tuple[list[float | None], list[float], list[int]]:
    """Per call: the ratio known before it (None: too few samples), the ratio it was estimated with
    (the prior before that), and the overhead learnt so far."""
    calibrator = TokenCalibrator()
    ratios: list[float | None] = []
    used: list[float] = []
    overheads: list[int] = []
    previous: Call | None = None
    overhead = 0
    for call in calls:
        ratio = _planner_ratio(calibrator.calibration())
        effective = float(ratio) if ratio is not None else prior
        ratios.append(ratio)
        used.append(effective)
        overheads.append(overhead)
        if call.reported is not None:
            if (
                previous is not None
                and previous.reported is not None
                and call.ids[: len(previous.ids)] == previous.ids
                and call.estimate > previous.estimate
                and call.reported > previous.reported
            ):
                calibrator.record(
                    estimated=call.estimate - previous.estimate, actual=call.reported - previous.reported
                )
            if previous is None:
                # the first call's request is almost all system prompt and tools: its overhead is the
                # most precise (the ratio's error applies to a few hundred tokens only)
                overhead = max(0, round(call.reported - effective * call.estimate))
            previous = call
    return ratios, used, overheads


class Yardstick:
    """Provider tokens per message, from the usage itself: the real size of any plan of the session.

    Between two consecutive calls whose later request extends the earlier one, the provider counted
    ``reported - previous reported`` more tokens for the messages added; each of them gets that delta's
    ratio to our estimate. Messages no delta covers (the first request, the first after a compaction)
    get the session's median delta ratio; the overhead (system prompt, tools) is what the first call
    reported beyond its messages. A plan's real size is then the sum over its items.
    """

    def __init__(self, calls: list[Call]) -> None:
        self.ratio_of: dict[str, float] = {}
        deltas: list[float] = []
        previous: Call | None = None
        for call in calls:
            if call.reported is None:
                continue
            if (
                previous is not None
                and previous.reported is not None
                and call.ids[: len(previous.ids)] == previous.ids
                and call.estimate > previous.estimate
                and call.reported > previous.reported
            ):
                ratio = (call.reported - previous.reported) / (call.estimate - previous.estimate)
                deltas.append(ratio)
                for message_id in call.ids[len(previous.ids) :]:
                    self.ratio_of.setdefault(message_id, ratio)
            previous = call
        self.median = statistics.median(deltas)
        first = next(call for call in calls if call.reported is not None)
        self.overhead = first.reported - sum(
            self.ratio_of.get(m.id, self.median) * fast_chars_v1(m) for m in first.history
        )

    def plan_tokens(self, items: Any) -> float:
        real = self.overhead
        for item in items:
            source = item.source_ids[0] if item.source_ids else item.message_id
            real += self.ratio_of.get(source, self.ratio_of.get(item.message_id, self.median)) * item.tokens
        return real


def replay_pi(args: Any) -> None:
    calls, provider, model_id = _calls(args.session)
    ratios, used, overheads = _online(calls, _prior(provider, model_id))
    yardstick = Yardstick(calls)
    reported = [(i, c) for i, c in enumerate(calls) if c.reported is not None]
    errors = [
        abs(used[i] * c.estimate + overheads[i] - c.reported) / c.reported
        for i, c in reported[_WARMUP_CALLS:]
    ]
    raw_errors = [
        abs(c.estimate + overheads[i] - c.reported) / c.reported for i, c in reported[_WARMUP_CALLS:]
    ]
    print(
        f"session: {args.session}: {len(calls)} model calls, {len(reported)} with usable usage "
        f"({provider}:{model_id})"
    )
    print(
        f"yardstick from the usage: median delta {yardstick.median:.3f} provider tokens per chars-v1 token, "
        f"{yardstick.overhead:.0f} tokens of system prompt and tools"
    )
    published = sorted({round(r, 4) for r in ratios if r is not None})
    print(f"ratios published online: {published} (changes: {_changes(ratios)})")
    print(
        f"median |calibrated estimate - reported| / reported after {_WARMUP_CALLS} calls: "
        f"{statistics.median(errors):.2%} (p90 {_quantile(errors, 0.9):.2%}); "
        f"ratio 1 with the same overhead: {statistics.median(raw_errors):.2%}"
    )
    print()
    max_tokens = args.max_tokens if args.max_tokens and args.max_tokens > 0 else None
    windows = [int(w) for w in args.windows.split(",") if w]
    header = f"{'window':>8}{'steps':>7}{'fallbk':>7}{'over(cal)':>10}{'over(real)':>11}"
    header += f"{'max real+res/win':>17}{'reserve':>9}{'ratio source':>18}{'ms/step':>9}"
    fixed_rule = f"{args.fixed}" if args.fixed_constant else f"learnt from usage ({args.fixed} before)"
    print(f"ratio passed to the planner: {args.calibration}; max_tokens {max_tokens}; fixed {fixed_rule}")
    print(header)
    rows = []
    for window in windows:
        model = ModelDescriptor(provider=provider, id=model_id, context_window=window, max_tokens=max_tokens)
        planner = ContextPlanner()
        over_cal = over_real = fallbacks = 0
        worst = 0.0
        reserve = 0
        sources: set[str] = set()
        elapsed = 0.0
        for i, call in enumerate(calls):
            ratio: float | None = {"usage": ratios[i], "default": None, "one": 1.0}[args.calibration]
            started = time.process_time()
            fixed = args.fixed if args.fixed_constant or i == 0 or not overheads[i] else max(0, overheads[i])
            plan = planner.plan(call.history, model=model, fixed_tokens=fixed, calibration_ratio=ratio)
            elapsed += time.process_time() - started
            budget = plan.budget
            sources.add(getattr(budget, "calibration_source", "explicit" if ratio is not None else "none"))
            if plan.ok:
                reserve = budget.output_reserve
                calibrated = budget.calibration_ratio * budget.total_tokens
                real = yardstick.plan_tokens(plan.items)
            else:  # the native history goes out: the provider's own count of it, where reported
                fallbacks += 1
                calibrated = call.estimate + fixed
                real = call.reported
                if real is None:
                    real = yardstick.plan_tokens(()) + yardstick.median * call.estimate
            over_cal += calibrated + reserve > window
            over_real += real + reserve > window
            worst = max(worst, (real + reserve) / window)
            rows.append(
                {
                    "window": window,
                    "call": i,
                    "entry": call.entry_id,
                    "ok": plan.ok,
                    "fallback": plan.fallback.code if plan.fallback else "",
                    "ratio": budget.calibration_ratio,
                    "ratio_source": getattr(budget, "calibration_source", ""),
                    "plan_estimate": budget.total_tokens,
                    "calibrated_size": round(calibrated),
                    "real_size": round(real),
                    "reserve": reserve,
                    "native_reported": call.reported if call.reported is not None else "",
                    "over_window": real + reserve > window,
                }
            )
        ms = 1000 * elapsed / max(1, len(calls))
        print(
            f"{window:>8}{len(calls):>7}{fallbacks:>7}{over_cal:>10}{over_real:>11}{worst:>17.3f}{reserve:>9}"
            f"{'/'.join(sorted(sources)):>18}{ms:>9.2f}"
        )
    if args.steps:
        with args.steps.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _changes(ratios: list[float | None]) -> int:
    known = [r for r in ratios if r is not None]
    return sum(1 for a, b in itertools.pairwise(known) if a != b)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
