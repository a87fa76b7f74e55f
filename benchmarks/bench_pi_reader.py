"""Pi reader memory and time on large files, from tiny entries to 10 KiB messages, against a peer.

Run: uv run --no-config --no-sync python benchmarks/bench_pi_reader.py [--mib 64] [--quick] [--shape S]

Each measurement runs in a fresh process and reports, as a multiple of the file's size:

- ``rss``: how far the read raised the peak resident set size (``ru_maxrss`` after the read minus after
  the imports, so the interpreter's own ~40 MiB do not count against the file);
- ``traced``: the tracemalloc peak of the same read (exact; a second run, since tracing is slow);

and the CPU time per MiB (``time.process_time``, so the load of other processes does not count).
Modes: ``peer`` is the least a reader that keeps every line decoded can do (the file read whole and
every line decoded with msgspec into a list); ``read`` is ``read_pi_session``; ``view`` is what the
runtime adapter and the workspace do with a session: ``PiSessionView`` read, the branch's model context
and the ``runtime-history-v1`` snapshot with its revision.

Shapes: ``tiny`` (27-byte entries: refused, ``pi-session-too-many-entries``, before anything is decoded),
``label`` (label entries padded to 128 bytes, the shortest average a session may have), ``messages``
(~1 KiB user messages) and ``large`` (~10 KiB user messages).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_MEASURE = """
import resource, sys, time, tracemalloc
from pathlib import Path
import msgspec
from ds4_context_engine import PiSessionError
from ds4_context_engine.pi import PiSessionView, read_pi_session
mode, path, traced = sys.argv[1], sys.argv[2], sys.argv[3] == "traced"


def run():
    if mode == "peer":
        decode = msgspec.json.decode
        values = [decode(line) for line in Path(path).read_bytes().splitlines() if line.strip()]
        return len(values) - 1, "ok"
    try:
        if mode == "read":
            return len(read_pi_session(path).entries), "ok"
        view = PiSessionView(path)
        context = view.context()
        view.snapshot(context, runtime_id="pi-session", project_root="/")
        return len(context.messages), "ok"
    except PiSessionError as error:
        return 0, error.code


if traced:
    tracemalloc.start()
    count, outcome = run()
    print(count, outcome, 0, tracemalloc.get_traced_memory()[1])
else:
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the interpreter and the imports
    start = time.process_time()
    count, outcome = run()
    seconds = time.process_time() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) * 1024
    print(count, outcome, f"{seconds:.3f}", grown)
"""

_SHAPES = ("tiny", "label", "messages", "large")


def _line(shape: str, number: int) -> bytes:
    entry_id = f"{number:08x}"
    if shape == "tiny":
        return b'{"type":"x","id":"%x"}\n' % number
    parent = f"{number - 1:08x}" if number else None
    entry: dict[str, object] = {"id": entry_id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z"}
    if shape == "label":
        entry.update(type="label", targetId="00000000", label="y" * 9)  # 128 bytes a line
    else:
        words = 200 if shape == "messages" else 2_000
        entry.update(
            type="message", message={"role": "user", "content": "word " * words, "timestamp": number}
        )
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def write_session(path: Path, shape: str, mib: float) -> int:
    header = {"type": "session", "version": 3, "id": "bench", "timestamp": "", "cwd": str(path.parent)}
    limit = int(mib * 1024 * 1024)
    with path.open("wb") as handle:
        handle.write(json.dumps(header).encode() + b"\n")
        written = number = 0
        while written < limit:
            line = _line(shape, number)
            handle.write(line)
            written += len(line)
            number += 1
    return number


def measure(mode: str, path: Path) -> tuple[int, str, float, float, float]:
    """(count, outcome, CPU seconds, rss / size, traced peak / size)."""
    runs = [
        subprocess.run(
            [sys.executable, "-c", _MEASURE, mode, str(path), kind],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for kind in ("rss", "traced")
    ]
    size = path.stat().st_size
    count, outcome, seconds, rss = runs[0]
    return int(count), outcome, float(seconds), int(rss) / size, int(runs[1][3]) / size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64, help="size of each generated file")
    parser.add_argument("--quick", action="store_true", help="8 MiB files")
    parser.add_argument("--shape", choices=_SHAPES, action="append", help="default: all four")
    args = parser.parse_args()
    mib = 8 if args.quick else args.mib
    with tempfile.TemporaryDirectory() as directory:
        for shape in args.shape or _SHAPES:
            path = Path(directory) / f"{shape}.jsonl"
            lines = write_session(path, shape, mib)
            size = path.stat().st_size / 1024 / 1024
            print(f"{shape:9} {size:6.1f} MiB {lines:>9} lines")
            for mode in ("peer", "read", "view"):
                count, outcome, seconds, rss, traced = measure(mode, path)
                cpu = seconds * 1000 / size
                ratios = f"rss {rss:5.2f}x  traced {traced:5.2f}x"
                print(f"    {mode:5} {ratios}  {cpu:6.1f} ms/MiB CPU  {outcome} ({count})")


if __name__ == "__main__":
    main()
