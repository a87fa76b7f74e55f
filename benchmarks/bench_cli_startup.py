"""CLI start-up: what a short command costs in a new process, against a plain script as the peer.

Run: uv run --no-config --no-sync python benchmarks/bench_cli_startup.py [--runs N]

Targets (issue 23, item 5): ``ds4-context version`` <= 80 ms; ``plan --json`` of a 1,000-message session
<= 200 ms. Each figure is the median wall and CPU time of N new processes (bytecode cached in a scratch
``PYTHONPYCACHEPREFIX``, written by one warm-up run), next to two peers measured in the same run: an
interpreter that does nothing, and a plain script that reads and decodes every line of the same session
file. The ratios against the peers are what to compare across machines.

Measured (issue 23; 2 cores under a load of 8-13, median CPU time of 21-31 runs, before = a0d5d65):
``version`` 22-25 -> 21-25 ms; ``plan --json`` of the 1,000-message session 330-385 -> 120-175 ms (best
wall 120-136 ms in the quieter runs), against 30-35 ms for the plain read and 10-12 ms for an empty
interpreter. Wall times on that machine were 2-4x the CPU times (waiting for a core).

Measured again (issue 23, a slower machine under a load of 9-10: empty interpreter 23 ms, plain read 74 ms
of CPU; 15 runs, ``--before`` c648fcc): ``version`` 47 -> 47 ms; ``plan --json`` 467 -> 394 ms (0.84x).

``--before SRC[:SRC...]`` also times the same commands, interleaved with the current ones, with those
source directories first on ``PYTHONPATH``, so a change is measured before and after in one run on the
same machine load. For the ``src`` directories of core and the engine at an earlier commit::

    git archive <commit> packages/ds4-context-core/src packages/ds4-context-engine/src | tar -x -C /tmp/b
    ... --before /tmp/b/packages/ds4-context-core/src:/tmp/b/packages/ds4-context-engine/src
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_engine import PLAN_ARGS, write_session

_ENTRY = "from ds4_context_engine.cli import main; main()"
_PLAIN_READ = (
    "import json, sys\n"
    "with open(sys.argv[1], 'rb') as handle:\n"
    "    entries = [json.loads(line) for line in handle if line.strip()]\n"
    "print(len(entries))\n"
)


Figures = tuple[float, float, float]


def interleaved_ms(commands: list[tuple[list[str], dict[str, str]]], runs: int) -> list[Figures]:
    """For each command: median wall time, median CPU time (user + system) and best wall time, in ms.

    The commands run in turn, ``runs`` rounds, so that a change of machine load weighs on all of them
    alike. CPU time is the steadier figure on a shared machine: waiting for a core does not count in it.
    The best wall time is the run that waited least, the nearest to what a quiet machine gives.
    """
    for arguments, environment in commands:  # warm the bytecode cache
        subprocess.run(arguments, capture_output=True, env=environment, check=False)
    samples: list[tuple[list[float], list[float]]] = [([], []) for _ in commands]
    for _ in range(runs):
        for (arguments, environment), (walls, cpus) in zip(commands, samples, strict=True):
            started = time.perf_counter()
            child = subprocess.Popen(
                arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment
            )
            _, _, usage = os.wait4(child.pid, 0)
            child.returncode = 0  # reaped by wait4 above
            walls.append((time.perf_counter() - started) * 1000)
            cpus.append((usage.ru_utime + usage.ru_stime) * 1000)
    return [(statistics.median(walls), statistics.median(cpus), min(walls)) for walls, cpus in samples]


def median_ms(arguments: list[str], environment: dict[str, str], runs: int) -> Figures:
    """:func:`interleaved_ms` of one command."""
    return interleaved_ms([(arguments, environment)], runs)[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument(
        "--before", default=None, help="source directories to compare against, separated by os.pathsep"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = write_session(Path(directory) / "bench.jsonl")
        environment = {
            **{name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"},
            "PYTHONPYCACHEPREFIX": str(Path(directory) / "pycache"),
        }
        python = sys.executable
        nothing = median_ms([python, "-c", "pass"], environment, args.runs)
        plain = median_ms([python, "-c", _PLAIN_READ, str(path)], environment, args.runs)

        def cli(*arguments: str) -> tuple[float, float, float]:
            return median_ms([python, "-c", _ENTRY, *arguments], environment, args.runs)

        before: dict[str, tuple[Figures, Figures]] = {}
        if args.before is not None:
            earlier = {
                **environment,
                "PYTHONPATH": os.pathsep.join(
                    str(Path(part).resolve()) for part in args.before.split(os.pathsep)
                ),
                "PYTHONPYCACHEPREFIX": str(Path(directory) / "pycache-before"),
            }
            for label, arguments in (
                ("version", ["version"]),
                ("plan --json", ["plan", str(path), *PLAN_ARGS]),
            ):
                command = [python, "-c", _ENTRY, *arguments]
                now, then = interleaved_ms([(command, environment), (command, earlier)], args.runs)
                before[label] = (now, then)

        rows = [
            ("python -c pass (peer)", nothing, None),
            ("plain script reads the session (peer)", plain, None),
            ("ds4-context version", cli("version"), 80),
            ("ds4-context --version", cli("--version"), 80),
            ("ds4-context --help", cli("--help"), None),
            ("ds4-context plan --json (1,000 messages)", cli("plan", str(path), *PLAN_ARGS), 200),
        ]
        print(f"{'':42} {'wall':>9} {'cpu':>9} {'best wall':>9}  cpu vs the plain read")
        for name, (wall, cpu, best), target in rows:
            goal = f"  (target <= {target} ms)" if target else ""
            print(f"{name:42} {wall:6.1f} ms {cpu:6.1f} ms {best:6.1f} ms  {cpu / plain[1]:5.2f}x{goal}")
        if before:
            print("\nbefore and after, interleaved:")
        for label, (now, then) in before.items():
            for when, (wall, cpu, best) in (("before", then), ("after", now)):
                print(
                    f"{when + ': ds4-context ' + label:42} {wall:6.1f} ms {cpu:6.1f} ms {best:6.1f} ms"
                    f"  {cpu / plain[1]:5.2f}x"
                )
            print(f"{'':42} cpu now {now[1] / then[1]:4.2f}x of before")


if __name__ == "__main__":
    main()
