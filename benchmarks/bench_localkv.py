"""Local KV eligibility speed for a 32,000-token prompt prefix (about 128,000 characters under chars-v1).

    uv run --no-config --no-sync python benchmarks/bench_localkv.py [--quick]

Contenders, measured interleaved in one process on the same input:

* ``evaluate_local_kv_eligibility`` (ours): every rule in order, five component hashes and the fingerprint;
* naive stdlib peer: the same hashes computed with ``json.dumps(sort_keys=True)`` and ``hashlib`` but
  without validation (what a host writes by hand);
* sha256 floor: ``hashlib.sha256(prefix.encode())`` alone, the unavoidable cost of hashing the prefix.

Target (issue 4): <= 0.3 ms; the TypeScript original reported about 0.26 ms.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ds4_context_core.localkv import LocalKvEligibilityInput, evaluate_local_kv_eligibility

PREFIX_TOKENS = 32_000


def make_input() -> LocalKvEligibilityInput:
    rng = random.Random(3)
    words = (
        "def",
        "return",
        "import",
        "class",
        "self",
        "value",
        "path",
        "module",
        "test",
        "assert",
        "build",
        "cache",
        "token",
    )
    text = ""
    while len(text) < PREFIX_TOKENS * 4:
        text += " ".join(rng.choice(words) for _ in range(64)) + "\n"
    return LocalKvEligibilityInput(
        enabled=True,
        capability_enabled=True,
        capability_version="local-kv-runtime-port-v1",
        destination="local",
        runtime_id="llama-box",
        runtime_revision="rev-7",
        provider="llama-cpp",
        model="qwen3-8b",
        model_revision="q4_k_m",
        privacy_policy_version="ds4-privacy-policy-v1:0123456789abcdef",
        prompt_prefix=text[: PREFIX_TOKENS * 4],
        system_options={"temperature": 0.0, "top_p": 1.0},
        tool_options={"tools": ["read", "grep", "edit"]},
        prefix_token_count=PREFIX_TOKENS,
        context_token_count=PREFIX_TOKENS + 2_000,
    )


def _h(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def naive(item: LocalKvEligibilityInput) -> str:
    prefix = hashlib.sha256(str(item.prompt_prefix).encode()).hexdigest()
    return _h(
        {
            "version": "local-kv-eligibility-v1",
            "prefixHash": prefix,
            "providerModelHash": _h([item.provider, item.model, item.model_revision]),
            "optionsHash": _h([item.system_options, item.tool_options]),
            "privacyHash": _h([item.destination, item.privacy_policy_version]),
            "runtimeHash": _h([item.runtime_id, item.runtime_revision, item.capability_version]),
        }
    )


def measure(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, function in contenders.items():
            start = time.perf_counter()
            function()
            samples[name].append(time.perf_counter() - start)
    return samples


def main() -> None:
    quick = "--quick" in sys.argv
    item = make_input()
    result = evaluate_local_kv_eligibility(item)
    assert result.eligible
    prefix = str(item.prompt_prefix)
    contenders: dict[str, Callable[[], object]] = {
        "ds4 evaluate_local_kv_eligibility": lambda: evaluate_local_kv_eligibility(item),
        "naive json + hashlib peer": lambda: naive(item),
        "sha256(prefix) floor": lambda: hashlib.sha256(prefix.encode()).hexdigest(),
    }
    for function in contenders.values():
        function()
    samples = measure(contenders, 200 if quick else 2000)
    ours = statistics.fmean(samples["ds4 evaluate_local_kv_eligibility"])
    print(f"local KV eligibility: {PREFIX_TOKENS:,}-token prefix ({len(prefix):,} characters)")
    print(f"{'contender':<36}{'mean ms':>10}{'p50 ms':>10}{'p99 ms':>10}{'vs ds4':>10}")
    for name, values in samples.items():
        ordered = sorted(values)
        mean = statistics.fmean(values)
        p99 = ordered[min(len(ordered) - 1, round(len(ordered) * 0.99))]
        print(
            f"{name:<36}{mean * 1000:>10.4f}{statistics.median(values) * 1000:>10.4f}"
            f"{p99 * 1000:>10.4f}{mean / ours:>9.2f}x"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"1-minute load average during the run: {load:.2f} on {os.cpu_count()} CPUs")
    print(f"target: mean <= 0.3 ms -> {'met' if ours * 1000 <= 0.3 else 'NOT met'} on this machine")


if __name__ == "__main__":
    main()
