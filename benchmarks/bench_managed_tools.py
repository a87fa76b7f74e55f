"""Managed tools benchmark: what the bounds and checks cost against the plain operation, in the same run.

Run: uv run --no-config --no-sync python benchmarks/bench_managed_tools.py [--runs N] [--files N]

Each tool call goes through ``ManagedToolbox.execute`` (argument validation, both path checks, the
bounded walk, the output cap) and is timed next to a peer doing the same work without them: ``Read`` of a
2,000-line file against ``open().readlines()``, ``Glob **/*.py`` against ``pathlib.Path.glob``, ``Grep``
of a word against a ``re`` loop over the same files and against ``grep -rn``, and a sandboxed ``Bash
true`` against a plain ``subprocess.run`` (when bubblewrap runs here). Medians of N interleaved runs; the
ratios are what to compare across machines.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.from_thread

from ds4_context_engine.runtime import BubblewrapEngine, ManagedToolbox


def make_tree(root: Path, files: int) -> None:
    """``files`` Python files of 200 lines in directories of 20; one line in 50 names ``needle``."""
    for index in range(files):
        directory = root / f"pkg{index // 20}"
        directory.mkdir(exist_ok=True)
        lines = [f"value_{n} = {n}  # needle" if n % 50 == 0 else f"value_{n} = {n}" for n in range(200)]
        (directory / f"mod{index}.py").write_text("\n".join(lines) + "\n")
    (root / "big.txt").write_text("".join(f"line {n}\n" for n in range(2000)))


def timed(runs: int, work: Callable[[], object]) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--files", type=int, default=1000)
    args = parser.parse_args()
    engine = BubblewrapEngine()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve()
        make_tree(root, args.files)
        toolbox = ManagedToolbox(root, sandbox_engine=engine)

        portal = anyio.from_thread.start_blocking_portal()
        portal_context = portal.__enter__()

        def tool(name: str, arguments: dict[str, object]) -> Callable[[], object]:
            # One event loop for every call (as in a run loop): the figure is the call, not loop start-up.
            async def one() -> object:
                outcome = await toolbox.execute(name, arguments, call_id="bench")
                assert not outcome.is_error, outcome.text
                return outcome

            return lambda: portal_context.call(one)

        needle = re.compile("needle")

        def re_loop() -> int:
            hits = 0
            for path in root.rglob("*.py"):
                hits += sum(1 for line in path.read_text().splitlines() if needle.search(line))
            return hits

        pairs: list[tuple[str, Callable[[], object], str, Callable[[], object]]] = [
            (
                "Read 2,000 lines",
                tool("Read", {"path": "big.txt"}),
                "read + splitlines",
                lambda: (root / "big.txt").read_bytes().splitlines(),
            ),
            (
                "Glob **/*.py",
                tool("Glob", {"pattern": "**/*.py"}),
                "Path.glob",
                lambda: sorted(root.glob("**/*.py")),
            ),
            ("Grep needle", tool("Grep", {"pattern": "needle"}), "re loop", re_loop),
        ]
        grep = shutil.which("grep")
        if grep is not None:
            pairs.append(
                (
                    "Grep needle",
                    tool("Grep", {"pattern": "needle"}),
                    "grep -rn",
                    lambda: subprocess.run(
                        [grep, "-rn", "needle", str(root)], capture_output=True, check=False
                    ),
                )
            )
        if engine.available():
            pairs.append(
                (
                    "Bash true (bwrap)",
                    tool("Bash", {"command": "true"}),
                    "subprocess true",
                    lambda: subprocess.run(["true"], check=True),
                )
            )
        print(f"{args.files} files of 200 lines, median of {args.runs} interleaved runs")
        print(f"{'tool call':<20} {'ms':>9}   {'peer':<16} {'ms':>9}   ratio")
        for label, ours, peer_label, peer in pairs:
            ours(), peer()  # warm caches
            ours_ms = peer_ms = 0.0
            ours_samples: list[float] = []
            peer_samples: list[float] = []
            for _ in range(args.runs):
                ours_samples.append(timed(1, ours))
                peer_samples.append(timed(1, peer))
            ours_ms, peer_ms = statistics.median(ours_samples), statistics.median(peer_samples)
            print(
                f"{label:<20} {ours_ms:>9.2f}   {peer_label:<16} {peer_ms:>9.2f}   {ours_ms / peer_ms:5.2f}x"
            )
        portal.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
