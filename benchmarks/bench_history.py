"""Decode, validate and group a 100,000-message canonical history (about 58 MiB of JSONL).

Compares ds4-context-core (msgspec decode + C-level checks) with the same decoding and checks written
over the stdlib ``json`` module, in the same process on the same bytes. Not a test; run it with:

    uv run --no-config --no-sync python benchmarks/bench_history.py [--messages N] [--repeat R]

The data file is generated once under benchmarks/.data/ (gitignored, 0600 in a 0700 directory).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import re
import resource
import time
import tracemalloc
from pathlib import Path

import msgspec

from ds4_context_core.history import (
    build_runtime_history_snapshot,
    decode_canonical_messages_jsonl,
    validate_runtime_history_snapshot,
)

DATA_DIR = Path(__file__).resolve().parent / ".data"
SESSION = "bench-session-0001"
RUNTIME = "jsonl-reference"
WORDS = [
    "the",
    "a",
    "file",
    "read",
    "edit",
    "test",
    "function",
    "class",
    "module",
    "import",
    "return",
    "value",
    "error",
    "context",
    "token",
    "plan",
    "budget",
    "tool",
    "call",
    "result",
    "python",
    "json",
    "history",
    "message",
    "assistant",
    "user",
    "provider",
    "cache",
    "window",
    "summary",
    "group",
    "parse",
    "decode",
    "encode",
    "validate",
    "stream",
    "buffer",
    "request",
    "response",
    "retry",
    "timeout",
    "config",
    "path",
    "line",
    "column",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def generate(path: Path, count: int, seed: int = 7) -> None:
    """A coding-agent history: user asks, assistant thinks and calls two tools in parallel, results
    come back (one of them large), assistant answers. Five messages per turn."""
    rng = random.Random(seed)
    DATA_DIR.mkdir(mode=0o700, exist_ok=True)
    os.chmod(DATA_DIR, 0o700)
    encoder = msgspec.json.Encoder()
    call = 0
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        for index in range(count):
            entry = f"entry-{index:07d}"
            record: dict[str, object] = {
                "id": f"{SESSION}:{entry}",
                "sourceEntryId": entry,
                "createdAt": 1_760_000_000_000 + index * 1000,
                "provenance": {
                    "source": "runtime-session",
                    "sessionId": SESSION,
                    "entryId": entry,
                    "runtimeId": RUNTIME,
                },
            }
            step = index % 5
            if step == 0:
                record |= {
                    "role": "user",
                    "blocks": [{"type": "text", "text": _text(rng, rng.randint(15, 70))}],
                    "flags": {},
                }
            elif step == 1:
                calls = [
                    {
                        "type": "toolCall",
                        "id": f"call-{call + k}",
                        "name": rng.choice(["read", "grep", "bash"]),
                        "arguments": {
                            "path": f"src/pkg/module_{rng.randint(0, 999)}.py",
                            "limit": rng.randint(1, 400),
                        },
                    }
                    for k in range(2)
                ]
                thinking = {"type": "thinking", "thinking": _text(rng, rng.randint(15, 40))}
                record |= {
                    "role": "assistant",
                    "blocks": [thinking, *calls],
                    "provider": "openai",
                    "model": "gpt-5",
                    "flags": {"atomic": True},
                }
            elif step in (2, 3):
                size = rng.randint(10, 30) if step == 2 else rng.randint(20, 80)
                result = {
                    "type": "toolResult",
                    "toolCallId": f"call-{call + step - 2}",
                    "toolName": "read",
                    "content": "\n".join(_text(rng, 10) for _ in range(size // 10)),
                    "isError": False,
                }
                record |= {"role": "tool", "blocks": [result], "flags": {"atomic": True}}
                if step == 3:
                    call += 2
            else:
                record |= {
                    "role": "assistant",
                    "blocks": [{"type": "text", "text": _text(rng, rng.randint(15, 70))}],
                    "provider": "openai",
                    "model": "gpt-5",
                    "flags": {},
                }
            out.write(encoder.encode(record))
            out.write(b"\n")
    path.with_suffix(".tmp").replace(path)


# ------------------------------------------------------------------ ours


def ours(data: bytes) -> tuple[int, int, int]:
    messages = decode_canonical_messages_jsonl(data)
    snapshot = build_runtime_history_snapshot(
        runtime_id=RUNTIME,
        session_id=SESSION,
        revision=hashlib.sha256(data).hexdigest(),
        project_root="/work",
        messages=messages,
    )
    issues = validate_runtime_history_snapshot(
        snapshot, expected_runtime_id=RUNTIME, trusted_project_root="/work"
    )
    return len(messages), len(snapshot.tool_atomic_groups), len(issues)


def ours_cold_validation(data: bytes) -> tuple[int, int, int]:
    """The same, but validating a copy: nothing is reused from building, as for a decoded snapshot."""
    messages = decode_canonical_messages_jsonl(data)
    snapshot = build_runtime_history_snapshot(
        runtime_id=RUNTIME,
        session_id=SESSION,
        revision=hashlib.sha256(data).hexdigest(),
        project_root="/work",
        messages=messages,
    )
    issues = validate_runtime_history_snapshot(msgspec.structs.replace(snapshot), expected_runtime_id=RUNTIME)
    return len(messages), len(snapshot.tool_atomic_groups), len(issues)


# ------------------------------------------------------------------ the same over stdlib json

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ROLES = {"system", "user", "assistant", "tool", "custom"}
_BLOCK_FIELDS = {
    "text": {"text": str},
    "thinking": {"thinking": str},
    "toolCall": {"id": str, "name": str, "arguments": dict},
    "toolResult": {"toolCallId": str, "toolName": str, "content": str},
    "image": {},
    "fileReference": {"path": str},
    "artifactReference": {"artifactId": str},
    "summaryReference": {"summaryId": str},
    "opaqueProvider": {},
}


class InvalidRecordError(ValueError):
    pass


def _identifier(value: object) -> str:
    if not isinstance(value, str) or len(value) > 512 or _CONTROL.search(value):
        raise InvalidRecordError("identifier")
    return value


def _check_message(record: object) -> dict:
    if not isinstance(record, dict):
        raise InvalidRecordError("record")
    _identifier(record.get("id"))
    _identifier(record.get("sourceEntryId"))
    if record.get("role") not in _ROLES:
        raise InvalidRecordError("role")
    provenance = record.get("provenance")
    if not isinstance(provenance, dict) or provenance.get("source") not in ("pi-session", "runtime-session"):
        raise InvalidRecordError("provenance")
    _identifier(provenance.get("sessionId"))
    _identifier(provenance.get("entryId"))
    if "runtimeId" in provenance:
        _identifier(provenance["runtimeId"])
    for key in ("provider", "model"):
        if key in record:
            _identifier(record[key])
    if not isinstance(record.get("flags", {}), dict):
        raise InvalidRecordError("flags")
    blocks = record.get("blocks")
    if not isinstance(blocks, list):
        raise InvalidRecordError("blocks")
    for block in blocks:
        if not isinstance(block, dict):
            raise InvalidRecordError("block")
        fields = _BLOCK_FIELDS.get(block.get("type"))  # type: ignore[arg-type]
        if fields is None:
            raise InvalidRecordError("block type")
        for name, kind in fields.items():
            if not isinstance(block.get(name), kind):
                raise InvalidRecordError(name)
        if block["type"] == "toolCall":
            _identifier(block["id"])
            _identifier(block["name"])
        elif block["type"] == "toolResult":
            _identifier(block["toolCallId"])
            _identifier(block["toolName"])
            if not isinstance(block.get("isError", False), bool):
                raise InvalidRecordError("isError")
    return record


def _groups(messages: list[dict]) -> list[dict]:
    calls: dict[str, list[int]] = {}
    results: dict[str, list[int]] = {}
    for position, message in enumerate(messages):
        for block in message["blocks"]:
            if block["type"] == "toolCall":
                calls.setdefault(block["id"], []).append(position)
            elif block["type"] == "toolResult":
                results.setdefault(block["toolCallId"], []).append(position)
    parent = list(range(len(messages)))

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    def link(positions: list[int]) -> None:
        first = root(positions[0])
        for other in positions[1:]:
            r = root(other)
            if r < first:
                parent[first] = r
                first = r
            elif r != first:
                parent[r] = first

    for call_id, positions in calls.items():
        link(positions + results.get(call_id, []))
    for call_id, positions in results.items():
        if call_id not in calls:
            link(positions)
    members: dict[int, list[int]] = {}
    for position in sorted({p for ps in (*calls.values(), *results.values()) for p in ps}):
        members.setdefault(root(position), []).append(position)
    ids: dict[int, set[str]] = {r: set() for r in members}
    for call_id, positions in (*calls.items(), *results.items()):
        ids[root(positions[0])].add(call_id)
    groups = []
    for r, positions in members.items():
        message_ids = [messages[p]["id"] for p in positions]
        group_ids = sorted(ids[r])
        groups.append(
            {
                "id": "runtime-tool-group:"
                + hashlib.sha256("\0".join(message_ids).encode()).hexdigest()[:16],
                "messageIds": message_ids,
                "toolCallIds": group_ids,
                "complete": all(len(calls.get(i, ())) == 1 and i in results for i in group_ids),
            }
        )
    groups.sort(key=lambda g: g["messageIds"][0])
    return groups


def _validate(messages: list[dict], groups: list[dict]) -> list[str]:
    issues = []
    seen: set[str] = set()
    for message in messages:
        if message["id"] in seen:
            issues.append("history-message-id-duplicate")
        seen.add(message["id"])
        provenance = message["provenance"]
        if (
            provenance["sessionId"] != SESSION
            or message["sourceEntryId"] != provenance["entryId"]
            or (provenance["source"] == "runtime-session" and provenance.get("runtimeId") != RUNTIME)
        ):
            issues.append("history-provenance-invalid")
    declared = {call_id: group for group in groups for call_id in group["toolCallIds"]}
    for group in _groups(messages):
        for call_id in group["toolCallIds"]:
            if declared.get(call_id) != group:
                issues.append("tool-atomic-group-mismatch")
    return issues


def stdlib(data: bytes) -> tuple[int, int, int]:
    messages = [_check_message(json.loads(line)) for line in data.splitlines() if line.strip()]
    groups = _groups(messages)
    issues = _validate(messages, groups)
    return len(messages), len(groups), len(issues)


# ------------------------------------------------------------------ driver


def best_of(repeat: int, function, data: bytes) -> tuple[float, float, tuple[int, int, int]]:
    """Best wall time and best CPU time of this process over ``repeat`` runs. On a busy machine the CPU
    time is the honest figure: wall time then also counts the time other processes held the cores."""
    best_wall = best_cpu = float("inf")
    result = (0, 0, 0)
    for _ in range(repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        result = function(data)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path = DATA_DIR / f"history-{args.messages}.jsonl"
    if not path.exists():
        generate(path, args.messages)
    data = path.read_bytes()
    size_mib = len(data) / 2**20
    print(f"history: {args.messages:,} messages, {size_mib:.1f} MiB JSONL ({path.name})")

    ours_wall, ours_time, ours_result = best_of(args.repeat, ours, data)
    cold_wall, cold_time, cold_result = best_of(args.repeat, ours_cold_validation, data)
    peer_wall, peer_time, peer_result = best_of(max(1, args.repeat - 1), stdlib, data)
    assert ours_result[:2] == peer_result[:2] == cold_result[:2], (ours_result, peer_result, cold_result)
    assert ours_result[2] == cold_result[2] == peer_result[2] == 0

    tracemalloc.start()
    ours(data)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print()
    print(f"{'pipeline (decode + validate + group)':<40}{'cpu s':>8}{'wall s':>8}{'vs stdlib (cpu)':>17}")
    print(f"{'ds4-context-core':<40}{ours_time:>8.3f}{ours_wall:>8.3f}{peer_time / ours_time:>16.2f}x")
    cold_label = "ds4-context-core, validating a copy"
    print(f"{cold_label:<40}{cold_time:>8.3f}{cold_wall:>8.3f}{peer_time / cold_time:>16.2f}x")
    print(f"{'stdlib json, same checks':<40}{peer_time:>8.3f}{peer_wall:>8.3f}{1.0:>16.2f}x")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print()
    print(f"groups: {ours_result[1]:,}   issues: {ours_result[2]}")
    ratio = peak / len(data)
    print(f"peak traced memory of the ds4 pipeline: {peak / 2**20:.1f} MiB = {ratio:.2f}x the JSON size")
    print(f"max RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    verdicts = (
        f"<= 1.5 s cpu {'met' if ours_time <= 1.5 else 'MISSED'}",
        f"peak < 3x {'met' if peak < 3 * len(data) else 'MISSED'}",
        f">= 2x stdlib {'met' if peer_time / ours_time >= 2 else 'MISSED'}",
    )
    print("targets: " + "; ".join(verdicts))


if __name__ == "__main__":
    main()
