"""Run every fuzz target for a bounded time: ``python tests/fuzz/run_fuzz.py --minutes N``.

``nox -s fuzz -- --minutes N`` calls this. Each hypothesis fuzz test runs with the long ``fuzz`` profile,
in chunks, until its share of the time is used; then, when atheris is installed, each byte target of
``fuzz_targets.TARGETS`` runs under atheris (libFuzzer) for the same time. Exit status 1 means a crash.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _hypothesis(minutes: float, chosen: list[str]) -> list[str]:
    os.environ["DS4_FUZZ_PROFILE"] = "fuzz"
    sys.path.insert(0, str(HERE))
    module = importlib.import_module("test_fuzz_parsers")
    tests = {name: getattr(module, name) for name in dir(module) if name.startswith("test_")}
    tests = {name: test for name, test in tests.items() if hasattr(test, "hypothesis")}
    failures: list[str] = []
    for name, test in sorted(tests.items()):
        if chosen and not any(part in name for part in chosen):
            continue
        deadline = time.monotonic() + minutes * 60
        rounds = 0
        try:
            while time.monotonic() < deadline:
                test()
                rounds += 1
        except Exception as error:  # a crash: hypothesis has printed the minimal failing example
            failures.append(name)
            # The traceback ends with hypothesis's notes: the smallest failing input, ready to paste.
            print(f"FAIL {name}:", "".join(traceback.format_exception(error)), sep="\n", flush=True)
            continue
        print(f"ok   {name}: {rounds} rounds of up to 500 examples", flush=True)
    return failures


def _atheris_child(target: str, libfuzzer_args: list[str]) -> None:
    atheris: Any = importlib.import_module("atheris")
    sys.path.insert(0, str(HERE))
    with atheris.instrument_imports():
        targets = importlib.import_module("fuzz_targets").TARGETS
    atheris.Setup([sys.argv[0], *libfuzzer_args], targets[target])
    atheris.Fuzz()


def _atheris(minutes: float, chosen: list[str]) -> list[str]:
    try:
        importlib.import_module("atheris")
    except ImportError:
        print("atheris is not installed on this Python: hypothesis targets only", flush=True)
        return []
    sys.path.insert(0, str(HERE))
    names = sorted(importlib.import_module("fuzz_targets").TARGETS)
    seeds: dict[str, list[bytes]] = importlib.import_module("test_fuzz_parsers").ATHERIS_SEEDS
    failures: list[str] = []
    for name in names:
        if chosen and not any(part in name for part in chosen):
            continue
        corpus = HERE.parent.parent / ".fuzz-corpus" / name
        corpus.mkdir(parents=True, exist_ok=True, mode=0o700)
        for number, seed in enumerate(seeds.get(name, [])):
            (corpus / f"seed-{number}").write_bytes(seed)
        command = [
            sys.executable, str(Path(__file__)), "--atheris-child", name, "--",
            f"-max_total_time={max(1, int(minutes * 60))}", "-rss_limit_mb=4096", "-timeout=30", str(corpus),
        ]  # fmt: skip
        done = subprocess.run(command, check=False)
        print(f"{'ok  ' if done.returncode == 0 else 'FAIL'} atheris {name}", flush=True)
        if done.returncode != 0:
            failures.append(f"atheris:{name}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=1.0, help="time per target and engine")
    parser.add_argument("--engine", choices=("hypothesis", "atheris", "both"), default="both")
    parser.add_argument("--target", action="append", default=[], help="only targets whose name has this")
    parser.add_argument("--atheris-child", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.atheris_child:
        _atheris_child(args.atheris_child, [arg for arg in rest if arg != "--"])
        return 0
    failures: list[str] = []
    if args.engine in ("hypothesis", "both"):
        failures += _hypothesis(args.minutes, args.target)
    if args.engine in ("atheris", "both"):
        failures += _atheris(args.minutes, args.target)
    print("crashes: " + (", ".join(failures) if failures else "none"), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
