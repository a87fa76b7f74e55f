"""Reference adapter benchmark: snapshot of a 100,000-message history and fsync'd append throughput.

Run: uv run --no-config --no-sync python benchmarks/bench_reference.py [--messages N] [--appends N]

Peers, measured in the same run on the same file:
* snapshot: a plain stdlib reader (read bytes, sha256, ``json.loads`` of every line, no checks);
* append: a plain ``open(..., "ab")`` + write + fsync loop (no lock, no checks, no index).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import msgspec

from ds4_context_core import (
    CanonicalMessage,
    MessageFlags,
    Provenance,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_reference_adapter import (
    ReferenceHistoryLimits,
    ReferenceRuntimeAdapter,
    append_reference_history_message,
    create_reference_history,
    read_reference_history,
)

SESSION = "bench-session"
RUNTIME = "jsonl-reference"


def message(number: int) -> CanonicalMessage:
    entry = f"e{number:07d}"
    kind = number % 4
    if kind == 0:
        role, blocks = (
            "user",
            (TextBlock(text=f"please look at module {number} and fix the failing test " * 3),),
        )
    elif kind == 1:
        role = "assistant"
        blocks = (ToolCallBlock(id=f"call-{number}", name="read", arguments={"path": f"src/m{number}.py"}),)
    elif kind == 2:
        role = "tool"
        blocks = (
            ToolResultBlock(
                tool_call_id=f"call-{number - 1}", tool_name="read", content="def f():\n    return 1\n" * 8
            ),
        )
    else:
        role, blocks = "assistant", (TextBlock(text="The test fails because f returns 1; changing it now."),)
    return CanonicalMessage(
        id=f"{SESSION}:{entry}",
        source_entry_id=entry,
        role=role,  # type: ignore[arg-type]
        blocks=blocks,
        provenance=Provenance(
            source="runtime-session", session_id=SESSION, entry_id=entry, runtime_id=RUNTIME
        ),
        flags=MessageFlags(atomic=True) if kind in (1, 2) else MessageFlags(),
    )


def build_file(path: Path, project: Path, count: int) -> None:
    create_reference_history(path, session_id=SESSION, project_root=project)
    encoder = msgspec.json.Encoder()
    with path.open("ab") as handle:
        for number in range(count):
            handle.write(encoder.encode({"type": "message", "message": message(number)}) + b"\n")


def stdlib_reader(path: Path) -> tuple[str, int]:
    data = path.read_bytes()
    revision = hashlib.sha256(data).hexdigest()
    lines = data.split(b"\n")[:-1]
    json.loads(lines[0])
    records = [json.loads(line) for line in lines[1:]]
    return revision, len(records)


def best_of(runs: int, function, *args):
    timings = []
    result = None
    for _ in range(runs):
        started = time.perf_counter()
        result = function(*args)
        timings.append(time.perf_counter() - started)
    return min(timings), statistics.median(timings), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--appends", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        project = root / "project"
        project.mkdir()
        path = root / "history" / "session.jsonl"
        build_file(path, project, options.messages)
        size_mib = path.stat().st_size / (1024 * 1024)

        ours_best, ours_median, history = best_of(options.runs, read_reference_history, path)
        peer_best, peer_median, (peer_revision, peer_count) = best_of(options.runs, stdlib_reader, path)
        assert history.revision == peer_revision
        assert len(history.messages) == peer_count == options.messages

        print(
            f"snapshot of {options.messages:,} messages ({size_mib:.1f} MiB), "
            f"best/median of {options.runs} runs"
        )
        print(f"{'reader':<44}{'best s':>9}{'median s':>10}{'ratio':>8}")
        print(
            f"{'read_reference_history (hash+decode+validate)':<44}{ours_best:>9.3f}{ours_median:>10.3f}"
            f"{ours_best / peer_best:>8.2f}"
        )
        print(
            f"{'stdlib json.loads per line + sha256 (no checks)':<44}{peer_best:>9.3f}{peer_median:>10.3f}"
            f"{1.0:>8.2f}"
        )
        # Room above the default 100,000-message limit for the appended rounds below.
        roomy = ReferenceHistoryLimits(max_messages=options.messages + 100 * options.runs)
        adapter = ReferenceRuntimeAdapter(path, transport=lambda request: None, limits=roomy)
        adapter.snapshot_history()
        cached_best, cached_median, _ = best_of(options.runs, adapter.snapshot_history)
        print(
            f"{'adapter.snapshot_history, file unchanged':<44}{cached_best:>9.3f}{cached_median:>10.3f}"
            f"{cached_best / peer_best:>8.2f}"
        )
        encoder = msgspec.json.Encoder()
        grown_timings = []
        for round_number in range(options.runs):
            with path.open("ab") as handle:  # another writer appended 100 messages since the last snapshot
                for number in range(100):
                    item = message(options.messages + round_number * 100 + number)
                    handle.write(encoder.encode({"type": "message", "message": item}) + b"\n")
            started = time.perf_counter()
            adapter.snapshot_history()
            grown_timings.append(time.perf_counter() - started)
        grown_best = min(grown_timings)
        print(
            f"{'adapter.snapshot_history, 100 appended':<44}{grown_best:>9.3f}"
            f"{statistics.median(grown_timings):>10.3f}{grown_best / peer_best:>8.2f}"
        )
        print(f"budget 2.0 s: {'met' if ours_best <= 2.0 else 'MISSED'}")
        del history
        tracemalloc.start()
        read_reference_history(path)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        ratio = peak / path.stat().st_size
        print(f"tracemalloc peak of read_reference_history: {ratio:.2f}x the file (target < 3x)")
        print("(benchmarks/bench_reader_memory.py measures every reader in fresh processes)")
        print()

        # Rounds alternate between the two writers so that drift in the disk's speed (other processes
        # syncing) hits both alike.
        append_path = root / "history" / "appends.jsonl"
        create_reference_history(append_path, session_id=SESSION, project_root=project)
        messages = [message(number) for number in range(options.appends)]
        records = [encoder.encode({"type": "message", "message": item}) + b"\n" for item in messages]
        plain_path = root / "history" / "plain.jsonl"
        rounds = 5
        per_round = options.appends // rounds
        ours_seconds = plain_seconds = 0.0
        with plain_path.open("ab") as handle:
            for round_number in range(rounds):
                chunk = slice(round_number * per_round, (round_number + 1) * per_round)
                started = time.perf_counter()
                for item in messages[chunk]:
                    append_reference_history_message(append_path, item)
                ours_seconds += time.perf_counter() - started
                started = time.perf_counter()
                for record in records[chunk]:
                    handle.write(record)
                    handle.flush()
                    os.fsync(handle.fileno())
                plain_seconds += time.perf_counter() - started
        ours = rounds * per_round / ours_seconds
        plain = rounds * per_round / plain_seconds

        print(f"append with fsync, {options.appends:,} records")
        print(f"{'writer':<44}{'records/s':>12}{'ratio':>8}")
        print(f"{'append_reference_history_message':<44}{ours:>12,.0f}{ours / plain:>8.2f}")
        print(f"{'plain write + fsync (no lock, no checks)':<44}{plain:>12,.0f}{1.0:>8.2f}")
        print(
            "target 2,000 records/s:",
            "met"
            if ours >= 2000
            else "MISSED (compare the plain fsync rate above: that is the disk's bound)",
        )


if __name__ == "__main__":
    main()
