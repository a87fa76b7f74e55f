"""Does the engine's plan still hold the task? The engine's workspace replayed at every model call.

    uv run --no-config --no-sync python benchmarks/engine_task_replay.py [SESSION.jsonl ...]
        [--windows 32000,128000] [--max-tokens 16384] [--sample 80] [--core-digest] [--config JSON]
        [--json OUT.json]

Each SESSION (default: the shipped ``fixtures/pi-shell-session.jsonl`` and ``fixtures/coding-session.jsonl``)
is written to a scratch Pi session file line by line, as a host appends it; a ``ds4-runtime-session-v1``
file is first turned into Pi entries (``canonical_to_pi_message``). Before every assistant message (a
model call) the engine plans as a host does: ``ContextWorkspace.refresh()`` (read the appended bytes, index
them in a SQLite derived store) then ``ContextWorkspace.plan()`` (task digest, retrieved history,
summaries), with the plan state carried from step to step.

Each plan is checked with the metrics of ``task_replay.py`` against the branch the workspace planned (what
Pi would send: its own compaction summary, then the kept entries), with the modified paths counted over
the whole file (what Pi compacted too): latest request, modified paths, call identities, errors of the
last 10 results, shared prefix (mean, median, p10, over every step) and previous plan kept (the same
shared tokens over the previous plan's, with the share of steps that compact), the shared prefix ceiling
(the most any planner could share, given what each step appends), tokens saved, plans over
the window, and the CPU time of ``plan()`` alone and of refresh + plan. The text checks run on
``--sample`` steps spread evenly (and the last); the rest on every step. ``--core-digest`` turns core's
own task digest on in the workspace's configuration (``planner.task_digest``), as when core enables it
by default;
``--config`` adds any other configuration (JSON), e.g. ``'{"planner": {"compaction_batch_ratio": 0.4}}'``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_coding_session import read_session
from task_replay import (
    _WRITE_TOOLS,
    Scores,
    Step,
    _orphans,
    _times,
    appended_since,
    ceiling_of,
    check,
    prefix_summary,
    record_prefix,
)

from ds4_context_core import ModelDescriptor
from ds4_context_core.pruning import normalize_tool_name
from ds4_context_engine.commands import ContextWorkspace
from ds4_context_engine.pi import append_pi_entries, canonical_to_pi_message, create_pi_session
from ds4_context_engine.store import open_derived_store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEFAULT_SESSIONS = (FIXTURES / "pi-shell-session.jsonl", FIXTURES / "coding-session.jsonl")


def pi_lines(session: Path, scratch: Path) -> list[bytes]:
    """The lines of ``session`` as a Pi session file (converted when it is a canonical session)."""
    first = session.open("rb").readline()
    if b'"type":"session"' in first.replace(b" ", b""):
        return session.read_bytes().splitlines(keepends=True)
    converted = scratch / "converted.jsonl"
    create_pi_session(converted, cwd="/project", session_id="converted")
    entries = [("message", {"message": canonical_to_pi_message(m)}) for m in read_session(session)]
    append_pi_entries(converted, entries)
    return converted.read_bytes().splitlines(keepends=True)


def _modified_of(message: dict[str, Any], modified: dict[str, None]) -> None:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return
    for block in content:
        if not (isinstance(block, dict) and block.get("type") == "toolCall"):
            continue
        name, arguments = block.get("name"), block.get("arguments")
        if (
            isinstance(name, str)
            and normalize_tool_name(name) in _WRITE_TOOLS
            and isinstance(arguments, dict)
        ):
            value = arguments.get("path") or arguments.get("file_path")
            if isinstance(value, str) and value:
                modified[value] = None


def replay(
    session: Path, window: int, max_tokens: int | None, sample: int, config: dict[str, Any]
) -> tuple[Scores, list[float]]:
    model = ModelDescriptor(provider="openai", id="replay", context_window=window, max_tokens=max_tokens)
    scores = Scores()
    plan_times: list[float] = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        lines = pi_lines(session, scratch)
        calls = sum(
            1
            for line in lines[1:]
            if (entry := json.loads(line)).get("type") == "message"
            and entry["message"].get("role") == "assistant"
        )
        every = max(1, calls // max(1, sample))
        path = scratch / "session.jsonl"
        path.write_bytes(lines[0])
        store = open_derived_store(scratch / "derived.sqlite3")
        workspace = ContextWorkspace(path, store=store, model=model, config=config)
        modified: dict[str, None] = {}
        number = 0
        previous_history: list[Any] | None = None
        try:
            with path.open("ab") as handle:
                for line in lines[1:]:
                    entry = json.loads(line)
                    message = entry.get("message") if entry.get("type") == "message" else None
                    if isinstance(message, dict) and message.get("role") == "assistant":
                        started = time.process_time()
                        workspace.refresh()
                        planned = time.process_time()
                        plan = workspace.plan()
                        done = time.process_time()
                        scores.times.append(done - started)
                        plan_times.append(done - planned)
                        history = list(workspace.context.messages)
                        appended = appended_since(previous_history, history)
                        first, previous_history = previous_history is None, history
                        if history and not plan.ok:
                            scores.fallbacks += 1
                            scores.previous_tokens = None
                        elif history:
                            budget = plan.budget
                            fixed = budget.fixed_tokens
                            scores.over_limit += budget.total_tokens > budget.hard_limit
                            scores.orphans += _orphans(plan.messages)
                            record_prefix(plan, scores, fixed)
                            if not first:
                                scores.ceiling.append(ceiling_of(appended, budget.hard_limit - fixed))
                            native = plan.manifest.native_tokens + fixed
                            scores.native_all += native
                            scores.planned_all += budget.total_tokens
                            if native > budget.hard_limit:
                                scores.native_over += native
                                scores.planned_over += budget.total_tokens
                            if number % every == 0 or number == calls - 1:
                                check(Step(history=history, modified=list(modified)), plan, scores)
                        number += 1
                    handle.write(line)
                    handle.flush()
                    if isinstance(message, dict):
                        _modified_of(message, modified)
        finally:
            workspace.close()
    return scores, plan_times


def _pct(values: list[float]) -> str:
    return f"{100 * statistics.fmean(values):.1f}%" if values else "-"


def summary(scores: Scores, plan_times: list[float]) -> dict[str, str]:
    total = sorted(1000 * t for t in scores.times)
    alone = sorted(1000 * t for t in plan_times)
    return {
        "latest request": _pct(scores.request),
        "modified paths": _pct(scores.paths),
        "call identities": _pct(scores.identities),
        "errors of last 10 results": _pct(scores.errors),
        **prefix_summary(scores),
        "tokens saved (steps past limit)": f"{100 * (1 - scores.planned_over / scores.native_over):.1f}%"
        if scores.native_over
        else "-",
        "plan ms mean/p50/p95": _times(alone),
        "refresh+plan ms mean/p50/p95": _times(total),
        "fallbacks / over limit / orphans": f"{scores.fallbacks}/{scores.over_limit}/{scores.orphans}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions", nargs="*", type=Path, default=list(DEFAULT_SESSIONS))
    parser.add_argument("--windows", default="32000,128000")
    parser.add_argument("--max-tokens", type=int, default=16_384)
    parser.add_argument("--sample", type=int, default=80)
    parser.add_argument("--core-digest", action="store_true", help="turn core's task digest on as well")
    parser.add_argument("--config", default="{}", help="more configuration, as JSON: '{\"planner\": {...}}'")
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON")
    args = parser.parse_args()
    config: dict[str, Any] = json.loads(args.config)
    if args.core_digest:
        config.setdefault("planner", {})["task_digest"] = True
    max_tokens = args.max_tokens if args.max_tokens > 0 else None
    table: dict[str, dict[str, str]] = {}
    for session in args.sessions:
        for window in (int(w) for w in args.windows.split(",") if w):
            scores, plan_times = replay(session, window, max_tokens, args.sample, config)
            table[f"{session.stem[:14]} {window // 1000}k"] = summary(scores, plan_times)
    print(f"engine workspace replay; max output {max_tokens}; config {config or 'default'}")
    columns = list(table)
    metrics = list(next(iter(table.values())))
    print(f"{'metric':<32}" + "".join(f"{c:>19}" for c in columns))
    for metric in metrics:
        print(f"{metric:<32}" + "".join(f"{table[c][metric]:>19}" for c in columns))
    if args.json:
        args.json.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
