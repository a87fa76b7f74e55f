"""Sandbox benchmark: start-up overhead per command under bubblewrap vs the same command unsandboxed.

Run: uv run --no-config --no-sync python benchmarks/bench_sandbox.py [--runs N] [--files N]

Target (issue 20): median overhead per command <= 20 ms. Each sample runs ``/bin/true`` to completion, so
the figure is all start-up: for the unsandboxed peer a fork and exec, for the sandboxed one
``prepare_sandboxed_command`` (validation, the deny-write scan of the writable root) plus bwrap building
its namespaces and mounts. The deny-write scan grows with the writable root, so it is also reported alone
for larger trees. A bare ``bwrap --unshare-all --ro-bind / /`` is timed in the same loop as the floor that
bubblewrap itself costs on this kernel (most of it creating and tearing down the network namespace).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ds4_context_engine.runtime import BubblewrapEngine, create_sandbox_policy, prepare_sandboxed_command

ENV = {"PATH": "/usr/bin:/bin"}
COMMAND = ["/bin/true"]


def make_workspace(root: Path, files: int) -> Path:
    """A source tree: ``files`` files in directories of 20, with a .git directory and one .env."""
    workspace = root / f"ws-{files}"
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / ".env").write_text("TOKEN=x\n")
    for index in range(files):
        directory = workspace / "src" / f"pkg{index // 20}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"module{index}.py").write_text("x = 1\n")
    return workspace


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_runs(runs: int, once) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        once()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--files", type=int, default=500, help="files in the benchmarked workspace")
    args = parser.parse_args()
    engine = BubblewrapEngine()
    if not engine.available():
        print(f"bubblewrap cannot run here: {engine.unavailable_reason()}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        workspace = make_workspace(Path(scratch), args.files)
        policy = create_sandbox_policy(root=workspace)

        def plain() -> None:
            subprocess.run(COMMAND, cwd=workspace, env=ENV, check=True)

        def sandboxed() -> None:
            prepared = prepare_sandboxed_command(policy, COMMAND, engine=engine, env=ENV)
            subprocess.run(prepared.argv, cwd=prepared.cwd, env=dict(prepared.env), check=True)

        floor_argv = [str(engine.binary), "--unshare-all", "--ro-bind", "/", "/", *COMMAND]

        def bwrap_floor() -> None:
            subprocess.run(floor_argv, env=ENV, check=True)

        def prepare_only() -> None:
            prepare_sandboxed_command(policy, COMMAND, engine=engine, env=ENV)

        for warm in (plain, sandboxed):
            time_runs(5, warm)
        # Interleaved, so both see the same machine load.
        plain_samples: list[float] = []
        sandboxed_samples: list[float] = []
        floor_samples: list[float] = []
        for _ in range(args.runs):
            plain_samples += time_runs(1, plain)
            sandboxed_samples += time_runs(1, sandboxed)
            floor_samples += time_runs(1, bwrap_floor)
        prepare_samples = time_runs(args.runs, prepare_only)
        plain_ms, sandboxed_ms = median_ms(plain_samples), median_ms(sandboxed_samples)
        print(f"bubblewrap {engine.version}, {args.runs} runs of {' '.join(COMMAND)}, {args.files} files")
        print(f"unsandboxed median            {plain_ms:7.2f} ms")
        print(f"sandboxed median (prepare+run) {sandboxed_ms:7.2f} ms  ({sandboxed_ms / plain_ms:.1f}x)")
        print(f"  of which prepare median      {median_ms(prepare_samples):7.2f} ms")
        print(f"bwrap floor (unshare-all, / read-only, nothing else) {median_ms(floor_samples):7.2f} ms")
        overhead = sandboxed_ms - plain_ms
        verdict = "meets" if overhead <= 20 else "MISSES"
        print(f"overhead per command           {overhead:7.2f} ms  ({verdict} the 20 ms target)")
        for files in (5_000, 20_000):
            large = create_sandbox_policy(root=make_workspace(Path(scratch), files))
            samples = time_runs(
                max(5, args.runs // 20),
                lambda large=large: prepare_sandboxed_command(large, COMMAND, engine=engine, env=ENV),
            )
            print(f"prepare median, {files:>6} files   {median_ms(samples):7.2f} ms (deny-write scan)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
