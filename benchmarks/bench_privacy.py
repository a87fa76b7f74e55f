"""Privacy enforcement speed on a 1,000-message provider payload bound for a remote provider.

    uv run --no-config --no-sync python benchmarks/bench_privacy.py [--quick] [--baseline REV | --no-baseline]

Contenders, measured in one process on the same payload, in turns of ten calls in a row each:

* ``enforce_payload_privacy`` (ours): markers, secret redaction, content-key traversal, a new payload;
  the first line says whether its hot path (``ds4_context_core._privacy._walk``) is the mypyc-compiled
  extension module (the optional compiled wheel) or interpreted Python (the pure wheel, a source tree);
* when it is compiled: the same function with the same module's ``.py`` source run interpreted, loaded
  from beside the extension module, so pure and compiled are measured in one run;
* the same function as it was at git revision ``REV`` (default: the last one before the copy-on-write
  traversal and the memchr batch screen), loaded from ``git show`` so no copy of old code lives here
  (interpreted; for a revision of the ``_privacy`` package, its ``_rules``, ``_scan``, ``_walk``,
  ``_cache`` and ``_policy`` modules); skipped with a note when git or the revision is unavailable. A
  revision named with ``--baseline`` is measured on the real-shaped payload (below) too;
* naive stdlib peer: ``json`` round-trip copy, then every string of the copy run through each secret
  ``re`` pattern and a marker ``re`` one by one (what a host writes when it "just redacts");
* ``copy.deepcopy``: a floor for "copy the payload and do nothing else".

The machine this runs on may be shared: absolute times move with its load, so the ratios between
contenders measured in the same run are the figures to compare; the load average is printed with them.

The payload is an OpenAI-style chat: mostly user/assistant text (100-400 characters), every third
assistant turn with a tool call and a tool result, 2 % of messages holding a marked private span and
1 % holding a credential. Target (issue 4): mean <= 2 ms; the TypeScript original reported 1.75 ms.

Next to it, the real-shaped payload of ``fixtures/privacy-coding-payloads.json`` (1,000 messages of source
files, diffs, shell output and JSON configs, made by ``fixtures/make_privacy_payloads.py``) with its
planted secrets: how many reach the remote provider (misses), how many redactions hit no planted secret
(false redactions), and the time ours takes on it. The lines of core's
``tests/fixtures/privacy-code-corpus.txt`` (code that names secrets without holding one) must each come
out unchanged. Targets (issue 17): no
miss, <= 1 % false redactions (0 on the corpus), mean <= 5 ms compiled, <= 10 ms interpreted.

Last, a turn of tool steps over that history (each step sends it all again with one message more), CPU
per step without and with a ``PrivacyCache``, as the engine's HTTP transports keep one.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import ds4_context_core
from ds4_context_core._history import _stable_json as stable_json_module
from ds4_context_core._privacy import _walk as _privacy_walk
from ds4_context_core.privacy import PrivacyCache, enforce_payload_privacy

WORDS = [
    "the",
    "build",
    "fails",
    "because",
    "the",
    "import",
    "path",
    "in",
    "src/index.ts",
    "points",
    "at",
    "a",
    "module",
    "that",
    "was",
    "renamed",
    "during",
    "the",
    "refactor",
    "so",
    "we",
    "update",
    "the",
    "test",
    "fixture",
    "and",
    "rerun",
    "the",
    "suite",
    "then",
    "check",
    "coverage",
    "numbers",
    "before",
    "we",
    "open",
    "the",
    "pull",
    "request",
    "and",
    "ask",
    "for",
    "review",
    "of",
    "the",
    "parser",
    "changes",
]


def make_payload(messages: int = 1000, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful coding assistant."}]
    for index in range(messages - 1):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(18, 70)))
        if index % 50 == 0:
            text += " [ds4:local-only]customer list lives on the NAS[/ds4:local-only]"
        if index % 100 == 7:
            text += " token sk-proj-" + "".join(rng.choice("abcdef0123456789") for _ in range(32))
        if index % 3 == 2:
            call_id = f"call_{index}"
            out.append(
                {
                    "role": "assistant",
                    "content": text,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"path": "src/index.ts"}'},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": call_id, "content": "export const ready = true;"})
        else:
            out.append({"role": "user" if index % 2 else "assistant", "content": text})
        if len(out) >= messages:
            break
    return {"model": "gpt-4.1", "messages": out[:messages], "temperature": 0.2}


_NAIVE_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
    re.compile(r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?<![A-Za-z0-9])(?:sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,})"),
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"(?i)(api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|password)([=:]\s*)\S+"),
]
_NAIVE_MARKER = re.compile(r"(?is)\[ds4:(sensitive|local-only)\].*?\[/ds4:\1\]")


def naive(payload: dict[str, Any]) -> Any:
    def walk(value: Any) -> Any:
        if isinstance(value, str):
            value = _NAIVE_MARKER.sub("[excluded]", value)
            for pattern in _NAIVE_PATTERNS:
                value = pattern.sub("[redacted]", value)
            return value
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(json.loads(json.dumps(payload)))


BASELINE_REVISION = "6520108"  # the batch screen over a full Python copy, before copy-on-write
PRIVACY_SOURCE = "packages/ds4-context-core/src/ds4_context_core/_privacy.py"
PRIVACY_ROOM = "packages/ds4-context-core/src/ds4_context_core/_privacy"


def git_show(root: Path, spec: str) -> str:
    """The text of ``revision:path`` in the repository at ``root`` (``git show``)."""
    return subprocess.run(
        ["git", "show", spec], cwd=root, capture_output=True, text=True, check=True, timeout=30
    ).stdout


def load_baseline(revision: str) -> ModuleType | str:
    """The privacy module as it was at ``revision``, or why it could not be loaded.

    A revision since privacy became the ``_privacy`` package gives its ``_policy`` module, run on that
    revision's ``_rules``, ``_scan`` (where it has one), ``_walk`` and ``_cache`` (interpreted, as
    :func:`load_interpreted` loads today's);
    an older one its single ``_privacy.py``.
    """
    root = Path(__file__).resolve().parent.parent
    sources: dict[str, str] = {}
    for module in (*INTERPRETED_MODULES, "_policy"):
        try:
            sources[module] = git_show(root, f"{revision}:{PRIVACY_ROOM}/{module}.py")
        except (OSError, subprocess.SubprocessError):
            if module in LATER_MODULES:
                continue  # the revision predates it: its screen searched without it
            break
    else:
        return load_package_sources(sources, revision)
    try:
        source = git_show(root, f"{revision}:{PRIVACY_SOURCE}")
    except (OSError, subprocess.SubprocessError) as error:
        return f"baseline {revision} unavailable ({type(error).__name__})"
    spec = importlib.util.spec_from_loader("ds4_context_core._privacy_baseline", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "ds4_context_core"  # its relative imports resolve against today's package
    # It predates the private rooms: its sibling ``._stable_json`` now lives in ``_history``.
    moved = "ds4_context_core._stable_json"
    sys.modules[moved] = stable_json_module
    try:
        exec(compile(source, f"{revision}:{PRIVACY_SOURCE}", "exec"), module.__dict__)
    finally:
        del sys.modules[moved]
    return module


def load_package_sources(sources: dict[str, str], revision: str) -> ModuleType:
    """``_policy`` executed from ``sources`` (module name -> source), its siblings from ``sources`` too."""
    modules = [module for module in INTERPRETED_MODULES if module in sources]
    names = [f"ds4_context_core._privacy.{module}" for module in modules]
    saved = {name: sys.modules[name] for name in names}
    try:
        for module, name in zip(modules, names, strict=True):
            sys.modules[name] = exec_source(name, sources[module], f"{revision}:{PRIVACY_ROOM}/{module}.py")
        return exec_source(
            "ds4_context_core._privacy._policy", sources["_policy"], f"{revision}:{PRIVACY_ROOM}/_policy.py"
        )
    finally:
        sys.modules.update(saved)


def exec_source(name: str, source: str, filename: str) -> ModuleType:
    """A fresh module object named ``name`` (in the ``_privacy`` package), executed from ``source``."""
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "ds4_context_core._privacy"
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def implementation() -> str:
    """Whether the privacy hot path imported here is compiled or interpreted, and from which file."""
    name = Path(str(_privacy_walk.__file__)).name
    return f"{'interpreted' if name.endswith('.py') else 'compiled'} ({name})"


def load_source(name: str, path: Path) -> ModuleType:
    """A fresh module object named ``name``, executed from the source file ``path``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INTERPRETED_MODULES = ("_rules", "_scan", "_walk", "_cache")  # in import order: each imports those before it
LATER_MODULES = frozenset(("_scan",))  # modules a ``--baseline`` revision may predate


def load_interpreted() -> ModuleType:
    """``ds4_context_core._privacy._policy`` run on the interpreted ``_rules.py``, ``_scan.py``, ``_walk.py``
    and ``_cache.py`` beside it.

    Every module is loaded from its ``.py`` file into a fresh module object; the imports between them are
    pointed at the interpreted ones for the time of loading only.
    """
    room = Path(str(ds4_context_core.__file__)).parent / "_privacy"
    names = [f"ds4_context_core._privacy.{module}" for module in INTERPRETED_MODULES]
    saved = {name: sys.modules[name] for name in names}
    try:
        for module, name in zip(INTERPRETED_MODULES, names, strict=True):
            sys.modules[name] = load_source(name, room / f"{module}.py")
        return load_source("ds4_context_core._privacy._policy", room / "_policy.py")
    finally:
        sys.modules.update(saved)


BLOCK = 10


def measure(
    contenders: dict[str, Callable[[], object]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``rounds`` timed calls of each contender, in blocks of :data:`BLOCK` calls in a row: wall and CPU.

    A block is what a host does: one payload sanitized right after another, its code and data warm. The
    contenders' blocks take turns, so a slow spell of a shared machine falls on all of them alike. The
    CPU time of the measuring thread is taken too: where it is well below the wall time, the process
    waited for a CPU that other work held.
    """
    wall: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(max(1, rounds // BLOCK)):
        for name, function in contenders.items():
            for _ in range(BLOCK):
                start_cpu = time.thread_time()
                start = time.perf_counter()
                function()
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.thread_time() - start_cpu)
    return wall, cpu


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORE_TEST_FIXTURES = (
    Path(__file__).resolve().parent.parent / "packages" / "ds4-context-core" / "tests" / "fixtures"
)
PLACEHOLDER_HEAD = "[DS4 REDACTED "


def load_real() -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """The real-shaped payload, its planted secrets and the code corpus lines."""
    data = json.loads((FIXTURES / "privacy-coding-payloads.json").read_text(encoding="utf-8"))
    corpus = (CORE_TEST_FIXTURES / "privacy-code-corpus.txt").read_text(encoding="utf-8").splitlines()
    lines = [line for line in corpus if line and not line.startswith("# ")]
    return {"model": data["model"], "messages": data["messages"]}, data["planted"], lines


def accuracy(
    enforce: Callable[..., Any], redact: Callable[[str], tuple[str, int]]
) -> tuple[int, int, int, int, int, list[str]]:
    """``(planted, missed, redactions, false, false that are key-shaped, corpus lines changed)``.

    A redaction is counted where a placeholder appears that the message did not hold before (the docs
    the fixture quotes show placeholders themselves). A false one is *key-shaped* when the message holds,
    besides its planted secret, a literal of an issued token's shape (an example key in a test or in the
    docs that is no placeholder: counted ones such as ``sk-live-0123…`` are left alone by the rules).
    """
    from ds4_context_core._privacy._rules import _TOKENS  # noqa: PLC0415

    payload, planted, lines = load_real()
    sent = enforce(payload, provider="openai").payload["messages"]
    by_message: dict[int, list[dict[str, Any]]] = {}
    for entry in planted:
        by_message.setdefault(int(entry["message"]), []).append(entry)
    missed: list[str] = []
    redactions = false = shaped = 0
    for index, message in enumerate(sent):
        text = json.dumps(message)
        original = json.dumps(payload["messages"][index])
        found = text.count(PLACEHOLDER_HEAD) - original.count(PLACEHOLDER_HEAD)
        mine = by_message.get(index, [])
        # A secret counts as missed when any 12-character piece of it after its prefix is still sent.
        missed.extend(entry["format"] for entry in mine if _leaks(entry, text))
        redactions += found
        extra = max(0, found - len(mine))
        false += extra
        if extra:
            rest = original
            for entry in mine:
                rest = rest.replace(json.dumps(str(entry["secret"]))[1:-1], "")
            if any(pattern.search(rest) for _gates, pattern in _TOKENS):
                shaped += extra
    changed = [line for line in lines if redact(line)[1]]
    return len(planted), len(missed), redactions, false, shaped, changed


def _leaks(entry: dict[str, Any], sent: str) -> bool:
    """Whether the secret part of a planted entry (not the name or URL around it) reaches ``sent``."""
    secret = str(entry["secret"])
    if entry["format"] == "credential-url":
        return secret.split("@", maxsplit=1)[0].rsplit(":", 1)[-1] in sent
    tail = secret.split("=", 1)[-1] if secret.startswith(("AWS_", "password")) else secret
    tail = tail.rsplit(" ", 1)[-1].strip('"')
    pieces = [tail[start : start + 12] for start in range(8, max(9, len(tail) - 11), 6)]
    return any(piece in sent for piece in pieces if len(piece) == 12 and "[DS4" not in piece)


def real_section(quick: bool, baseline: ModuleType | str, revision: str) -> None:
    """Accuracy and speed on the real-shaped coding payload, compiled (if so) and interpreted, and as at
    ``revision`` when its code (``baseline``) was loaded."""
    from ds4_context_core.privacy import redact_secrets  # noqa: PLC0415

    payload, _planted, _lines = load_real()
    size = len(json.dumps(payload))
    planted, missed, redactions, false, shaped, changed = accuracy(enforce_payload_privacy, redact_secrets)
    share = false / redactions if redactions else 0.0
    unshaped = (false - shaped) / redactions if redactions else 0.0
    print(
        f"real coding payload: 1,000 messages ({size / 1024:.0f} KiB JSON), {planted} planted secrets: "
        f"{missed} missed, {redactions} redactions, {false} not planted ({share:.1%}), of which {shaped} "
        f"example keys of a token's shape in the sources; {false - shaped} false ({unshaped:.1%}); "
        f"code corpus: {len(changed)} of {len(_lines)} lines changed"
    )
    for line in changed[:5]:
        print(f"  corpus line changed: {line[:60]}")
    contenders: dict[str, Callable[[], object]] = {
        "ds4 on real payload": lambda: enforce_payload_privacy(payload, provider="openai"),
    }
    if not implementation().startswith("interpreted"):
        interpreted = load_interpreted()
        contenders["same, interpreted"] = lambda: interpreted.enforce_payload_privacy(
            payload, provider="openai"
        )
    if isinstance(baseline, ModuleType):
        before = baseline.enforce_payload_privacy
        contenders[f"same, at {revision}"] = lambda: before(payload, provider="openai")
    contenders["naive json + re peer"] = lambda: naive(payload)
    contenders["copy.deepcopy floor"] = lambda: copy.deepcopy(payload)
    for function in contenders.values():
        function()
    load_before = load_average()
    samples, _cpu = measure(contenders, 20 if quick else 100)
    load_after = load_average()
    ours = statistics.fmean(samples["ds4 on real payload"])
    print(f"{'contender':<30}{'mean ms':>10}{'p50 ms':>10}{'min ms':>10}{'mean/ds4':>10}")
    for name, values in samples.items():
        mean = statistics.fmean(values)
        print(
            f"{name:<30}{mean * 1000:>10.3f}{statistics.median(values) * 1000:>10.3f}"
            f"{min(values) * 1000:>10.3f}{mean / ours:>9.2f}x"
        )
    print(f"1-minute load average: {load_before:.2f} before, {load_after:.2f} after the run")


def turn_section(quick: bool) -> None:
    """A turn of tool steps over the real-shaped history: each step sends it all again, one message more.

    CPU time per step of ``enforce_payload_privacy`` without and with one ``PrivacyCache`` for the turn
    (what the engine's HTTP transports keep), the first step (the cache empty) reported apart.
    """
    payload, _planted, _lines = load_real()
    history = list(payload["messages"])
    steps = 10 if quick else 40
    plain: list[float] = []
    cached: list[float] = []
    cache = PrivacyCache()
    first = 0.0
    for step in range(steps + 1):
        history.append({"role": "tool", "tool_call_id": f"call_{step}", "content": f"step {step}: 3 passed"})
        sent = {"model": payload["model"], "messages": list(history)}
        started = time.process_time()
        expected = enforce_payload_privacy(sent, provider="openai")
        middle = time.process_time()
        result = enforce_payload_privacy(sent, provider="openai", cache=cache)
        ended = time.process_time()
        assert result.payload == expected.payload, "the cached result differs from the uncached one"
        if step == 0:
            first = ended - middle
            continue
        plain.append(middle - started)
        cached.append(ended - middle)
    print(
        f"a turn of {steps} steps over the real history ({len(history)} messages at the end), CPU per step: "
        f"without a cache {statistics.median(plain) * 1000:.2f} ms median, with one PrivacyCache "
        f"{statistics.median(cached) * 1000:.2f} ms median (its first step, all messages new: "
        f"{first * 1000:.2f} ms); {cache.hits} hits, {cache.misses} misses"
    )


def main() -> None:
    quick = "--quick" in sys.argv
    revision = BASELINE_REVISION
    if "--baseline" in sys.argv:
        revision = sys.argv[sys.argv.index("--baseline") + 1]
    baseline = "baseline skipped (--no-baseline)" if "--no-baseline" in sys.argv else load_baseline(revision)
    if "--real-only" not in sys.argv:
        synthetic_section(quick, baseline, revision)
    # The real payload only with a baseline named on the command line: the default one predates it.
    real_section(quick, baseline if "--baseline" in sys.argv else "", revision)
    turn_section(quick)


def synthetic_section(quick: bool, baseline: ModuleType | str, revision: str) -> None:
    payload = make_payload()
    size = len(json.dumps(payload))
    result = enforce_payload_privacy(payload, provider="openai")
    assert "customer list" not in json.dumps(result.payload)
    assert "sk-proj-" not in json.dumps(result.payload)
    contenders: dict[str, Callable[[], object]] = {
        "ds4 enforce_payload_privacy": lambda: enforce_payload_privacy(payload, provider="openai"),
    }
    fields = ("payload", "changed", "blocked_blocks", "secret_redactions")
    if not implementation().startswith("interpreted"):
        interpreted = load_interpreted()
        assert Path(str(interpreted.sanitize_payload.__code__.co_filename)).name == "_walk.py"
        pure = interpreted.enforce_payload_privacy(payload, provider="openai")
        assert [getattr(pure, name) for name in fields] == [getattr(result, name) for name in fields], (
            "the compiled and the interpreted hot path disagree on the benchmark payload"
        )
        contenders["same, interpreted"] = lambda: interpreted.enforce_payload_privacy(
            payload, provider="openai"
        )
    if isinstance(baseline, ModuleType):
        before = baseline.enforce_payload_privacy(payload, provider="openai")
        assert [getattr(before, name) for name in fields] == [getattr(result, name) for name in fields], (
            "the baseline and today's code disagree on the benchmark payload"
        )
        contenders[f"same, at {revision}"] = lambda: baseline.enforce_payload_privacy(
            payload, provider="openai"
        )
    contenders["naive json + re peer"] = lambda: naive(payload)
    contenders["copy.deepcopy floor"] = lambda: copy.deepcopy(payload)
    for function in contenders.values():  # warm up
        function()
    load_before = load_average()
    samples, cpu_samples = measure(contenders, 30 if quick else 200)
    load_after = load_average()
    ours = statistics.fmean(samples["ds4 enforce_payload_privacy"])
    ours_cpu = statistics.fmean(cpu_samples["ds4 enforce_payload_privacy"])
    ours_p50 = statistics.median(samples["ds4 enforce_payload_privacy"])
    print(
        f"privacy: 1,000-message payload ({size / 1024:.0f} KiB JSON), remote destination, "
        f"{result.blocked_blocks} blocked spans, {result.secret_redactions} redactions"
    )
    print(f"privacy hot path measured: {implementation()}, Python {sys.version.split()[0]}")
    if not isinstance(baseline, ModuleType):
        print(baseline)
    header = f"{'contender':<30}{'mean ms':>10}{'p50 ms':>10}{'min ms':>10}{'p99 ms':>10}"
    print(f"{header}{'mean/ds4':>10}{'p50/ds4':>10}")
    for name, values in samples.items():
        ordered = sorted(values)
        mean = statistics.fmean(values)
        p50 = statistics.median(values)
        p99 = ordered[min(len(ordered) - 1, round(len(ordered) * 0.99))]
        print(
            f"{name:<30}{mean * 1000:>10.3f}{p50 * 1000:>10.3f}{ordered[0] * 1000:>10.3f}"
            f"{p99 * 1000:>10.3f}{mean / ours:>9.2f}x{p50 / ours_p50:>9.2f}x"
        )
    print(
        f"1-minute load average: {load_before:.2f} before, {load_after:.2f} after the run, "
        f"on {os.cpu_count()} CPUs"
    )
    print(
        f"target: mean <= 2 ms -> {'met' if ours * 1000 <= 2 else 'NOT met'} at this load "
        f"(wall mean {ours * 1000:.3f} ms; CPU mean {ours_cpu * 1000:.3f} ms)"
    )


if __name__ == "__main__":
    main()
