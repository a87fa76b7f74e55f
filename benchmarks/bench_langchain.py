"""A LangChain user's path: plan a LangChain history with ds4-context, conversion included, against
LangChain's own ``trim_messages`` on the same messages, in the same process.

    uv run --no-config --no-sync python benchmarks/bench_langchain.py [--quick]

The history is the 4,000-message coding session of ``bench_planner.py`` as LangChain messages. Ours is
``ds4_context_core.integrations.langchain.plan_langchain``: LangChain messages -> canonical -> a plan
that keeps every tool group whole -> LangChain messages (the caller's own objects where unchanged).
Theirs only counts and slices (``strategy="last"``). CPU time of this process, median of several runs.
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

from ds4_context_core import ModelDescriptor, TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_core.integrations.langchain import plan_langchain

MODEL = ModelDescriptor(provider="bench", id="bench-128k", context_window=128_000, max_tokens=16_384)


def to_langchain_messages(count: int) -> list[object]:
    """The benchmark session as a LangChain user holds it."""
    out: list[object] = []
    for message in generate(count):
        if message.role == "user":
            out.append(HumanMessage("".join(b.text for b in message.blocks if isinstance(b, TextBlock))))
        elif message.role == "assistant":
            text = "".join(b.text for b in message.blocks if isinstance(b, TextBlock))
            calls = [
                {"id": b.id, "name": b.name, "args": b.arguments}
                for b in message.blocks
                if isinstance(b, ToolCallBlock)
            ]
            out.append(AIMessage(text, tool_calls=calls))
        else:
            out.extend(
                ToolMessage(b.content, tool_call_id=b.tool_call_id)
                for b in message.blocks
                if isinstance(b, ToolResultBlock)
            )
    return out


def _time(function: Callable[[], object]) -> float:
    start = time.process_time()
    function()
    return time.process_time() - start


def main() -> None:
    rounds = 3 if "--quick" in sys.argv else 9
    messages = to_langchain_messages(4_000)
    planned = plan_langchain(messages, model=MODEL)
    hard_limit = planned.plan.budget.hard_limit
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        theirs.append(
            _time(
                lambda: trim_messages(
                    messages, max_tokens=hard_limit, strategy="last", token_counter=count_tokens_approximately
                )
            )
        )
        ours.append(_time(lambda: plan_langchain(messages, model=MODEL)))
    mine, peer = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
    print(f"{len(messages)} LangChain messages into a 128k window (median of {rounds}, CPU ms)")
    print(f"{'contender':<52}{'ms':>10}{'ratio':>10}")
    print(f"{'langchain_core trim_messages(strategy=last)':<52}{peer:>10.2f}{1.0:>10.2f}")
    print(f"{'ds4 plan_langchain (conversion both ways included)':<52}{mine:>10.2f}{peer / mine:>9.2f}x")
    print(f"sent {len(planned.messages)} messages; plan ok={planned.plan.ok}")


if __name__ == "__main__":
    main()
