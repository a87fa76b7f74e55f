"""Peak memory of every history reader against the size of the file it reads (issue 22: within 3x).

Run: uv run --no-config --no-sync python benchmarks/bench_reader_memory.py [--mib 16] [--shape S] [--reader R]

Readers: ``core`` (``decode_canonical_messages_jsonl`` of the file's bytes), ``reference``
(``read_reference_history``: read, hash, decode, group, validate), ``pi`` (``read_pi_session``) and
``view`` (``PiSessionView``: the session, the branch's model context and its ``runtime-history-v1``
snapshot with the revision) and ``view-3x`` (the same with
``min_line_bytes=PI_VIEW_3X_MIN_LINE_BYTES``, the line limit that keeps a view within 3x its file). A
refused file is reported as such, with the reader's code.
Each is measured twice in a fresh process, as a multiple of the file size:

- ``traced``: the tracemalloc peak from before the file is read to the end (exact; the file's own bytes
  count, they are part of what the reader holds);
- ``rss``: how far the peak resident set grew (``ru_maxrss`` after minus after the imports, so the
  interpreter's ~40 MiB do not count), which also sees what tracemalloc cannot (allocator slack).

``peer`` is the same file read whole and every line given to ``json.loads`` into a list, in a third
fresh process: its CPU time is the yardstick (``ratio`` = reader CPU / peer CPU; < 1 is faster).

Shapes (canonical messages for core and reference, Pi entries for pi and view):
``tiny`` (the smallest messages a history can hold: a few characters of text), ``small`` (~200-byte
messages, a mix of text, tool calls and results), ``calls`` (tool-call turns, ~600 bytes a message),
``edge`` (text messages of 640-byte lines, the shortest average ``view-3x`` accepts past its first 10,000
lines), ``medium`` (~1 KiB text messages).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_SHAPES = ("tiny", "small", "calls", "edge", "medium")
_READERS = ("core", "reference", "pi", "view", "view-3x")
_SESSION = "bench"
_RUNTIME = "jsonl-reference"
# text of the ``edge`` shape: Pi lines averaging just over PI_VIEW_3X_MIN_LINE_BYTES (640)
_EDGE_TEXT = 490

_CHILD = r"""
import json, resource, sys, time, tracemalloc
from pathlib import Path

reader, path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
project = sys.argv[4]
if reader == "core":
    from ds4_context_core.history import decode_canonical_messages_jsonl
    def run():
        return len(decode_canonical_messages_jsonl(Path(path).read_bytes()))
elif reader == "reference":
    from ds4_context_reference_adapter import ReferenceHistoryLimits, read_reference_history
    limits = ReferenceHistoryLimits(max_messages=10_000_000, max_file_bytes=1 << 40)
    def run():
        return len(read_reference_history(path, limits=limits).messages)
elif reader == "pi":
    from ds4_context_engine.pi import read_pi_session
    def run():
        return len(read_pi_session(path).entries)
elif reader in ("view", "view-3x"):
    from ds4_context_engine.pi import PiSessionView, PI_VIEW_3X_MIN_LINE_BYTES
    def run():
        limits = {"min_line_bytes": PI_VIEW_3X_MIN_LINE_BYTES} if reader == "view-3x" else {}
        view = PiSessionView(path, **limits)
        context = view.context()
        return len(view.snapshot(context, runtime_id="pi", project_root=project).messages)
else:
    loads = json.loads
    def run():
        return len([loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()])

def refused(error):
    code = getattr(error, "code", None)
    if code is None:
        raise error
    print("refused", code, 0)
    sys.exit(0)

if kind == "traced":
    tracemalloc.start()
    try:
        count = run()
    except Exception as error:
        refused(error)
    print(count, tracemalloc.get_traced_memory()[1], 0)
else:
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.process_time()
    try:
        count = run()
    except Exception as error:
        refused(error)
    seconds = time.process_time() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) * 1024
    print(count, grown, f"{seconds:.4f}")
"""


def _canonical(shape: str, number: int) -> dict[str, object]:
    entry = f"e{number:07d}"
    record: dict[str, object] = {
        "id": f"{_SESSION}:{entry}",
        "sourceEntryId": entry,
        "provenance": {
            "source": "runtime-session",
            "sessionId": _SESSION,
            "entryId": entry,
            "runtimeId": _RUNTIME,
        },
    }
    if shape == "tiny":
        return record | {"role": "user", "blocks": [{"type": "text", "text": "ok"}]}
    if shape == "medium":
        return record | {"role": "user", "blocks": [{"type": "text", "text": "word " * 180}]}
    if shape == "edge":
        return record | {"role": "user", "blocks": [{"type": "text", "text": "w" * _EDGE_TEXT}]}
    step = number % 4
    call = f"call-{number - step + 1}"
    if step == 0:
        return record | {"role": "user", "blocks": [{"type": "text", "text": "fix the test " * 3}]}
    if step == 1:
        arguments: dict[str, object] = {"path": f"src/m{number}.py"}
        if shape == "calls":
            arguments |= {"limit": 400, "pattern": "def " * 40, "options": {"context": [2, 3]}}
        calls = [{"type": "toolCall", "id": call, "name": "read", "arguments": arguments}]
        if shape == "calls":
            calls.insert(0, {"type": "thinking", "thinking": "look at the module first " * 4})
        return record | {"role": "assistant", "blocks": calls, "provider": "openai", "model": "gpt-5"}
    if step == 2:
        content = "def f():\n    return 1\n" * (2 if shape == "small" else 12)
        result = {"type": "toolResult", "toolCallId": call, "toolName": "read", "content": content}
        return record | {"role": "tool", "blocks": [result | {"isError": False}], "flags": {"atomic": True}}
    return record | {"role": "assistant", "blocks": [{"type": "text", "text": "done, f returns 1."}]}


def _pi(shape: str, number: int) -> dict[str, object]:
    entry: dict[str, object] = {
        "type": "message",
        "id": f"{number:08x}",
        "parentId": f"{number - 1:08x}" if number else None,
        "timestamp": "2026-01-01T00:00:00.000Z",
    }
    if shape == "tiny":
        return entry | {"message": {"role": "user", "content": "ok", "timestamp": number}}
    if shape == "medium":
        return entry | {"message": {"role": "user", "content": "word " * 190, "timestamp": number}}
    if shape == "edge":
        return entry | {"message": {"role": "user", "content": "w" * _EDGE_TEXT, "timestamp": number}}
    step = number % 4
    call = f"call-{number - step + 1}"
    if step == 0:
        message: dict[str, object] = {"role": "user", "content": "fix the test " * 3}
    elif step == 1:
        arguments: dict[str, object] = {"path": f"src/m{number}.py"}
        blocks: list[dict[str, object]] = [
            {"type": "toolCall", "id": call, "name": "read", "arguments": arguments}
        ]
        if shape == "calls":
            arguments |= {"limit": 400, "pattern": "def " * 40, "options": {"context": [2, 3]}}
            blocks.insert(0, {"type": "thinking", "thinking": "look at the module first " * 4})
        message = {"role": "assistant", "content": blocks, "provider": "openai", "model": "gpt-5"}
    elif step == 2:
        text = "def f():\n    return 1\n" * (2 if shape == "small" else 12)
        message = {
            "role": "toolResult",
            "toolCallId": call,
            "toolName": "read",
            "content": [{"type": "text", "text": text}],
            "isError": False,
        }
    else:
        message = {"role": "assistant", "content": [{"type": "text", "text": "done, f returns 1."}]}
    return entry | {"message": message | {"timestamp": number}}


def write_file(path: Path, reader: str, shape: str, mib: float, project: Path) -> int:
    """A file of ``mib`` MiB for ``reader``; the number of messages (entries) in it."""
    limit = int(mib * 1024 * 1024)
    with path.open("wb") as handle:
        if reader == "reference":
            header = {
                "type": "ds4-runtime-session-v1",
                "runtimeId": _RUNTIME,
                "sessionId": _SESSION,
                "projectRoot": os.path.realpath(project),
            }
            handle.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        elif reader in ("pi", "view", "view-3x"):
            header = {"type": "session", "version": 3, "id": _SESSION, "timestamp": "", "cwd": str(project)}
            handle.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        written = number = 0
        while written < limit:
            if reader in ("pi", "view", "view-3x"):
                record: object = _pi(shape, number)
            elif reader == "reference":
                record = {"type": "message", "message": _canonical(shape, number)}
            else:
                record = _canonical(shape, number)
            line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
            handle.write(line)
            written += len(line)
            number += 1
    return number


def _child(reader: str, path: Path, kind: str, project: Path) -> tuple[int | str, int, float]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, reader, str(path), kind, str(project)],
        capture_output=True,
        text=True,
        check=True,
    )
    count, memory, seconds = done.stdout.split()
    if count == "refused":  # the reader's refusal code in place of the memory
        return memory, 0, 0.0
    return int(count), int(memory), float(seconds)


def measure(reader: str, path: Path, project: Path, repeat: int) -> dict[str, float] | str:
    """Traced and rss peaks (x the file size), bytes per message beyond the file, CPU against the peer;
    or the reader's refusal code."""
    size = path.stat().st_size
    count, traced, _ = _child(reader, path, "traced", project)
    if isinstance(count, str):
        return count
    runs = [
        (_child(reader, path, "rss", project), _child("peer", path, "rss", project)) for _ in range(repeat)
    ]
    rss = min(int(run[0][1]) for run in runs)
    seconds = min(run[0][2] for run in runs)
    peer = min(run[1][2] for run in runs)
    return {
        "count": int(count),
        "traced": traced / size,
        "rss": rss / size,
        "per_message": (traced - size) / max(count, 1),
        "cpu": seconds,
        "ratio": seconds / peer if peer else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=16, help="size of each generated file")
    parser.add_argument("--shape", choices=_SHAPES, action="append", help="default: all")
    parser.add_argument("--reader", choices=_READERS, action="append", help="default: all")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each (best is reported)")
    args = parser.parse_args()
    print(f"{'reader':16}{'shape':8}{'MiB':>6}{'messages':>10}{'bytes/msg':>10}", end="")
    print(f"{'traced':>8}{'rss':>7}{'extra B/msg':>12}{'cpu s':>8}{'vs json.loads':>14}")
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch) / "project"
        project.mkdir()
        for reader in args.reader or _READERS:
            for shape in args.shape or _SHAPES:
                path = Path(scratch) / f"{reader}-{shape}.jsonl"
                write_file(path, reader, shape, args.mib, project)
                size = path.stat().st_size
                result = measure(reader, path, project, args.repeat)
                if isinstance(result, str):
                    print(f"{reader:16}{shape:8}{size / 2**20:6.1f}  refused: {result}", flush=True)
                    path.unlink()
                    continue
                line = f"{reader:16}{shape:8}{size / 2**20:6.1f}{result['count']:>10,}"
                line += f"{size / max(result['count'], 1):>10.0f}"
                line += f"{result['traced']:>7.2f}x{result['rss']:>6.2f}x"
                line += f"{result['per_message']:>12.0f}{result['cpu']:>8.3f}{result['ratio']:>13.2f}x"
                print(line, flush=True)
                path.unlink()


if __name__ == "__main__":
    main()
