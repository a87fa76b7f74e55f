"""Run-loop overhead per step on a 1,000-message Pi session, excluding model and tool time.

Run: uv run --no-config --no-sync python benchmarks/bench_run_loop.py [--steps N] [--runs R]

Wall time counts waiting for a core; on a shared machine the CPU-time figures are the ones to compare
(the in-process model and the tools take microseconds, so CPU time between plans is the loop's).

Target (issue 19): <= 5 ms per step. A turn of N tool-calling steps runs over the session's history
(1,000 messages) against an in-process model that answers at once (its time is measured and
subtracted, and so is the tools' time); what is left is the loop: planning the whole history with the
carried plan state, building the request, dispatching and answering the tool call, the lifecycle
bookkeeping and the events. Peers measured in the same run on the same data:

- ``plan_context`` alone, per step, over the same growing history with the carried state (the part of
  the loop that is the planner), and
- the same planning without the carried state (every step plans from scratch: the before-state of an
  incremental planner), to show what carrying the state saves.

Separately reported, because it runs inside the transport (model time above): the HTTP transport's own
preparation of each step's request (conversion to the OpenAI chat format, then privacy enforcement).
The persisted variant appends each step to the session file (one locked write with fsync per step).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from bench_engine import write_session

from ds4_context_core import ModelDescriptor
from ds4_context_core.adapter import CompletionCompleted, CompletionRequest
from ds4_context_core.planner import plan_context
from ds4_context_core.privacy import PrivacySummary, enforce_payload_privacy
from ds4_context_engine.pi import build_pi_context, read_pi_session
from ds4_context_engine.providers import (
    CompletionOutput,
    CompletionUsage,
    OpenAIChatTransport,
    OutputToolCall,
)
from ds4_context_engine.runtime import HostTool, RunOptions, StepPlanned, ToolFinished, create_runtime

WINDOW = 200_000


class InstantModel:
    """Answers each step with one tool call (the last step with text); counts the time spent inside."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.calls = 0
        self.seconds = 0.0
        self.durations: list[float] = []
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Any:
        started = time.perf_counter()
        self.calls += 1
        self.requests.append(request)
        if self.calls > self.steps:
            output = CompletionOutput(text="done")
        else:
            call = OutputToolCall(id=f"b{self.calls}", name="probe", arguments={"n": self.calls})
            output = CompletionOutput(text="", tool_calls=(call,))
        privacy = PrivacySummary(
            provider="bench", destination="remote", changed=False, blocked_blocks=0, secret_redactions=0
        )
        result = CompletionCompleted(
            output=output, privacy=privacy, usage=CompletionUsage(input_tokens=1000, output_tokens=5)
        )
        self.durations.append(time.perf_counter() - started)
        self.seconds += self.durations[-1]
        return result


def probe(arguments: dict[str, Any], context: Any) -> str:
    return f"probe {arguments['n']} ok"


async def one_turn(session: Path, steps: int, *, persist: bool) -> tuple[list[float], list[float], Any]:
    """Per-step loop overhead in seconds: the time between two consecutive plans, less model and tools.

    Measuring between plans leaves out what a turn pays once (reading the session, the first import of
    the planner), which is not per step.
    """
    model = InstantModel(steps)
    planned_at: list[float] = []
    planned_cpu: list[float] = []
    tool_s: dict[int, float] = {}

    def on_event(event: Any) -> None:
        if isinstance(event, StepPlanned):
            planned_at.append(time.perf_counter())
            planned_cpu.append(time.process_time())
        elif isinstance(event, ToolFinished):
            tool_s[event.step] = tool_s.get(event.step, 0.0) + event.record.execution_ms / 1000

    runtime = create_runtime(
        workspace=session.parent,
        tools=[HostTool(name="probe", function=probe, read_only=True)],
        managed_tools=False,
        transports={"bench": model},
    )
    result = await runtime.run(
        "You are a benchmark.",
        RunOptions(
            model="bench:instant",
            messages=[{"role": "user", "content": "probe everything"}],
            session_path=session,
            persist=persist,
            context_window=WINDOW,
            max_steps=steps + 1,
            on_event=on_event,
        ),
    )
    assert result.error is None, result.error_detail
    overheads = [
        planned_at[step] - planned_at[step - 1] - model.durations[step - 1] - tool_s.get(step, 0.0)
        for step in range(1, len(planned_at))
    ]
    # CPU time is the steadier figure on a shared machine (waiting for a core does not count in it); the
    # in-process model and the tools take microseconds, so they are left in
    cpu = [planned_cpu[step] - planned_cpu[step - 1] for step in range(1, len(planned_cpu))]
    return overheads, cpu, result


def planner_only(session: Path, produced: tuple[Any, ...], *, carry: bool) -> float:
    """Seconds per step for planning the same histories the loop planned, with or without the state."""
    history = list(build_pi_context(read_pi_session(session)).messages)
    model = ModelDescriptor(provider="bench", id="instant", context_window=WINDOW, max_tokens=4096)
    cuts = [len(history) + index for index, message in enumerate(produced) if message.role == "assistant"]
    history.extend(produced)
    state = None
    started = time.process_time()
    for cut in cuts:
        plan = plan_context(history[:cut], model=model, state=state if carry else None)
        state = plan.state
    return (time.process_time() - started) / len(cuts)


def transport_preparation(session: Path, produced: tuple[Any, ...]) -> float:
    """Seconds per request for the chat transport's conversion and privacy pass over the whole history."""
    history = (*build_pi_context(read_pi_session(session)).messages, *produced)
    model = ModelDescriptor(provider="openai", id="gpt-4o-mini", context_window=WINDOW, max_tokens=4096)
    transport = OpenAIChatTransport(base_url="http://127.0.0.1:9/v1", api_key="k", api_key_env=None)
    runs = 10
    started = time.process_time()
    for _ in range(runs):
        payload = transport._wire_payload(CompletionRequest.from_messages(history, model=model))
        enforce_payload_privacy(payload, provider="openai")
    return (time.process_time() - started) / runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        base = write_session(Path(directory) / "base.jsonl")
        messages = len(build_pi_context(read_pi_session(base)).messages)
        results: dict[str, list[float]] = {"memory": [], "persisted": [], "cpu": []}
        produced: tuple[Any, ...] = ()
        for run in range(args.runs):
            for variant in ("memory", "persisted"):
                session = Path(directory) / f"{variant}-{run}.jsonl"
                session.write_bytes(base.read_bytes())
                overheads, cpu, result = anyio.run(
                    lambda s=session, v=variant: one_turn(s, args.steps, persist=v == "persisted")
                )
                produced = result.messages
                results[variant].extend(value * 1000 for value in overheads)
                if variant == "memory":
                    results["cpu"].extend(value * 1000 for value in cpu)
        with_state = planner_only(base, produced, carry=True) * 1000
        without_state = planner_only(base, produced, carry=False) * 1000
        preparation = transport_preparation(base, produced) * 1000
    memory = statistics.median(results["memory"])
    persisted = statistics.median(results["persisted"])
    memory_p90 = statistics.quantiles(results["memory"], n=10)[-1]
    memory_mean = statistics.fmean(results["memory"])
    cpu_mean = statistics.fmean(results["cpu"])
    print(f"session: {messages} messages; turn: {args.steps} tool steps (+1 final answer); runs: {args.runs}")
    print(
        f"loop overhead per step, in memory:        {memory_mean:7.3f} ms mean (target <= 5 ms); "
        f"{memory:.3f} ms median, {memory_p90:.3f} ms p90"
    )
    print(f"loop overhead per step, in memory, CPU time: {cpu_mean:6.3f} ms mean")
    print(f"loop overhead per step, persisted (fsync): {persisted:7.3f} ms")
    print("peers and the transport in CPU time:")
    print(
        f"peer: plan_context per step, state carried:   {with_state:7.3f} ms  "
        f"(loop/planner {cpu_mean / with_state:.2f}x)"
    )
    print(
        f"peer: plan_context per step, from scratch:    {without_state:7.3f} ms  "
        f"(state saves {without_state / with_state:.1f}x)"
    )
    print(f"transport preparation per step (convert + privacy, inside model time): {preparation:7.3f} ms")


if __name__ == "__main__":
    main()
