"""Planner speed, with LangChain's ``trim_messages`` measured side by side in the same process.

    uv run --no-config --no-sync python benchmarks/bench_planner.py [--quick] [--cold]

The first line says whether the planner measured is the mypyc-compiled one (the core wheel on Linux
x86_64, CPython 3.11 to 3.13) or interpreted Python (the pure wheel, a source tree). ``--cold`` prints
table 1 only.

Prints four tables:

1. cold plan of a 4,000-message coding session into a 128k window vs ``trim_messages(strategy="last")``
   on the same messages converted to LangChain messages (conversion not timed; LangChain only counts
   and slices, it does not keep tool groups, trim, receipt or validate);
2. incremental re-plan after one appended message at 10,000 messages, vs a cold plan of the same history;
3. time against history length (cold and incremental), to show that re-planning does not grow with it;
4. a cold plan of 100,000 messages.

Timings are CPU time of this process (``time.process_time``), so other work on the machine does not
inflate them; the contenders are interleaved and each figure is the median of several runs.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from make_coding_session import generate

from ds4_context_core import ModelDescriptor, TextBlock, ToolCallBlock
from ds4_context_core._planner import _index
from ds4_context_core.planner import plan_context

MODEL = ModelDescriptor(provider="bench", id="bench-128k", context_window=128_000, max_tokens=16_384)


def implementation() -> str:
    """Whether the planner imported here is the compiled core wheel's or interpreted Python."""
    name = Path(str(_index.__file__)).name
    return f"{'interpreted' if name.endswith('.py') else 'compiled'} ({name})"


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _time(function: Callable[[], object]) -> float:
    start = time.process_time()
    function()
    return time.process_time() - start


def _to_langchain(messages):
    out = []
    for message in messages:
        text = "".join(block.text for block in message.blocks if isinstance(block, TextBlock))
        if message.role == "user":
            out.append(HumanMessage(content=text, id=message.id))
        elif message.role == "assistant":
            calls = [
                {"id": block.id, "name": block.name, "args": block.arguments}
                for block in message.blocks
                if isinstance(block, ToolCallBlock)
            ]
            out.append(AIMessage(content=text, id=message.id, tool_calls=calls))
        else:
            block = message.blocks[0]
            out.append(ToolMessage(content=block.content, tool_call_id=block.tool_call_id, id=message.id))
    return out


def cold_versus_langchain(rounds: int) -> None:
    messages = tuple(generate(4_000))
    converted = _to_langchain(messages)
    hard_limit = plan_context(messages, model=MODEL).budget.hard_limit
    ours: list[float] = []
    theirs: list[float] = []
    converting: list[float] = []
    for _ in range(rounds):
        converting.append(_time(lambda: _to_langchain(messages)))
        theirs.append(
            _time(
                lambda: trim_messages(
                    converted,
                    max_tokens=hard_limit,
                    strategy="last",
                    token_counter=count_tokens_approximately,
                )
            )
        )
        ours.append(_time(lambda: plan_context(messages, model=MODEL)))
    plan = plan_context(messages, model=MODEL)
    print(f"\n1. cold plan, {len(messages)} messages into a 128k window (median of {rounds})")
    print(f"{'contender':<44}{'ms':>10}{'ratio':>10}")
    print(f"{'langchain_core trim_messages(strategy=last)':<44}{_median_ms(theirs):>10.2f}{1.0:>10.2f}")
    ratio = _median_ms(theirs) / _median_ms(ours)
    print(f"{'ds4 plan_context (cold)':<44}{_median_ms(ours):>10.2f}{ratio:>9.2f}x")
    # A host whose history is canonical must also convert it before LangChain can trim it.
    both = _median_ms(converting) + _median_ms(theirs)
    print(
        f"{'langchain: convert canonical + trim_messages':<44}{both:>10.2f}{both / _median_ms(theirs):>10.2f}"
    )
    print(f"{'ds4 plan_context vs convert + trim':<44}{'':>10}{both / _median_ms(ours):>9.2f}x")
    print(
        f"   plan: {len(plan.messages)} messages, {plan.budget.total_tokens} tokens <= hard limit "
        f"{plan.budget.hard_limit}; fallback={plan.fallback}"
    )


def _incremental(history_length: int, steps: int) -> tuple[float, float, float]:
    """Median and p95 ms of a re-plan after one appended message, and the median cold plan ms."""
    messages = tuple(generate(history_length + steps + 50))
    base = history_length
    plan = plan_context(messages[:base], model=MODEL)
    warm: list[float] = []
    cold: list[float] = []
    for step in range(steps):
        history = messages[: base + step + 1]
        state = plan.state
        started = time.process_time()
        plan = plan_context(history, model=MODEL, state=state)
        warm.append(time.process_time() - started)
        if step % max(1, steps // 5) == 0:
            cold.append(_time(lambda history=history: plan_context(history, model=MODEL)))
    warm.sort()
    return _median_ms(warm), warm[int(0.95 * (len(warm) - 1))] * 1000, _median_ms(cold)


def incremental_at_10k(steps: int) -> None:
    median, p95, cold = _incremental(10_000, steps)
    print(f"\n2. re-plan after one appended message, 10,000-message history ({steps} steps)")
    print(f"{'contender':<44}{'ms':>10}{'ratio':>10}")
    print(f"{'cold plan of the same history':<44}{cold:>10.2f}{1.0:>10.2f}")
    print(f"{'incremental re-plan (median)':<44}{median:>10.3f}{cold / median:>9.1f}x")
    print(f"{'incremental re-plan (p95)':<44}{p95:>10.3f}")


def scaling(lengths: list[int], steps: int) -> None:
    print("\n3. time against history length (incremental = one appended message)")
    print(f"{'messages':>10}{'cold ms':>12}{'incr ms':>12}  incremental, scaled bar")
    rows = [(length, *_incremental(length, steps)) for length in lengths]
    widest = max(row[1] for row in rows)
    for length, median, _, cold in rows:
        bar = "#" * max(1, round(40 * median / widest))
        print(f"{length:>10}{cold:>12.2f}{median:>12.3f}  {bar}")


def cold_100k() -> None:
    messages = tuple(generate(100_000))
    elapsed = _time(lambda: plan_context(messages, model=MODEL))
    again = _time(lambda: plan_context(messages, model=MODEL))
    print("\n4. cold plan of 100,000 messages")
    print(f"{'messages':>10}{'ms (first)':>14}{'ms (second)':>14}")
    print(f"{len(messages):>10}{elapsed * 1000:>14.1f}{again * 1000:>14.1f}")


def main() -> None:
    quick = "--quick" in sys.argv
    print(f"planner measured: {implementation()}, Python {sys.version.split()[0]}")
    cold_versus_langchain(rounds=5 if quick else 15)
    if "--cold" in sys.argv:  # table 1 only
        return
    incremental_at_10k(steps=20 if quick else 100)
    scaling(
        [1_000, 2_000, 5_000, 10_000, 20_000] if quick else [1_000, 2_000, 5_000, 10_000, 20_000, 50_000], 20
    )
    cold_100k()


if __name__ == "__main__":
    main()
