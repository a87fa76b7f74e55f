"""Pi reader memory and time on large files of small entries, against a peer in the same run.

Run: uv run --no-config --no-sync python benchmarks/bench_pi_reader.py [--mib 64] [--quick]

Each measurement runs in a fresh process and reports how far the read raised its peak resident set size
(``ru_maxrss`` after the read minus ``ru_maxrss`` after the imports), so neither run inherits the other's
heap and the interpreter's own ~40 MiB do not count against the file. The peer is the least a reader
that keeps every line decoded can do: the file read whole and every line decoded with msgspec into a
list. ``read_pi_session`` adds the entry objects, the id table and the checks; its ratio to the peer
is the figure to watch (issue 22 item 6).
Three shapes: ``label`` entries (~120 bytes a line, ids, parent ids and timestamps), ``tiny`` entries
(~27 bytes, an unknown type, so every line is also an issue) and ``messages`` (~1 KiB user messages).
A file with more than ``DEFAULT_MAX_PI_SESSION_ENTRIES`` entries is refused; the peak until the refusal
is reported then.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_MEASURE = """
import resource, sys, time
from pathlib import Path
import msgspec
from ds4_context_engine import PiSessionError
from ds4_context_engine.pi import read_pi_session
mode, path = sys.argv[1], sys.argv[2]
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the interpreter and the imports
start = time.perf_counter()
outcome = "ok"
if mode == "peer":
    decode = msgspec.json.decode
    values = [decode(line) for line in Path(path).read_bytes().splitlines() if line.strip()]
    count = len(values) - 1
else:
    try:
        count = len(read_pi_session(path).entries)
    except PiSessionError as error:
        count, outcome = 0, error.code
seconds = time.perf_counter() - start
print(count, outcome, f"{seconds:.2f}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline)
"""


def _line(shape: str, number: int) -> bytes:
    entry_id = f"{number:08x}"
    if shape == "tiny":
        return b'{"type":"x","id":"%x"}\n' % number
    parent = f"{number - 1:08x}" if number else None
    entry: dict[str, object] = {"id": entry_id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z"}
    if shape == "label":
        entry.update(type="label", targetId="x", label="y")
    else:
        entry.update(type="message", message={"role": "user", "content": "word " * 200, "timestamp": number})
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def write_session(path: Path, shape: str, mib: int) -> int:
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


def measure(mode: str, path: Path) -> tuple[int, str, float, float]:
    output = subprocess.run(
        [sys.executable, "-c", _MEASURE, mode, str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(output[0]), output[1], float(output[2]), int(output[3]) / 1024  # MiB (ru_maxrss is KiB)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64, help="size of each generated file")
    parser.add_argument("--quick", action="store_true", help="8 MiB files")
    parser.add_argument(
        "--shape", choices=("label", "tiny", "messages"), action="append", help="default: all three"
    )
    args = parser.parse_args()
    mib = 8 if args.quick else args.mib
    with tempfile.TemporaryDirectory() as directory:
        for shape in args.shape or ("label", "tiny", "messages"):
            path = Path(directory) / f"{shape}.jsonl"
            lines = write_session(path, shape, mib)
            size = path.stat().st_size / 1024 / 1024
            _, _, peer_seconds, peer_rss = measure("peer", path)
            count, outcome, seconds, rss = measure("reader", path)
            print(
                f"{shape:9} {size:6.1f} MiB {lines:>9} lines"
                f" | peer +{peer_rss:6.0f} MiB {peer_seconds:6.2f} s"
                f" | read_pi_session +{rss:6.0f} MiB ({rss / size:4.1f}x file, {rss / peer_rss:4.2f}x peer)"
                f" {seconds:6.2f} s ({seconds / peer_seconds:4.2f}x peer) {outcome} {count} entries"
            )


if __name__ == "__main__":
    main()
