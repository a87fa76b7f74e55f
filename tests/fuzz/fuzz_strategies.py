"""Hypothesis profiles and input strategies for the fuzz targets.

Profiles: ``ci`` (short and deterministic, collected by the normal test sessions) and ``fuzz`` (long,
random, with an example database; ``nox -s fuzz`` selects it through ``DS4_FUZZ_PROFILE=fuzz``).

Inputs mix raw bytes, JSON documents built from each format's own vocabulary (so the parsers get past
their first check), byte-level mutations of valid seed inputs, and deeply nested JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_RELAXED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "ci", max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=_RELAXED
)
settings.register_profile("fuzz", max_examples=500, deadline=None, suppress_health_check=_RELAXED)
PROFILE: Final = os.environ.get("DS4_FUZZ_PROFILE", "ci")
FUZZ_SETTINGS: Final = settings.get_profile(PROFILE)

ROOT: Final = Path(__file__).resolve().parents[2]
PI_FIXTURES: Final = ROOT / "packages" / "ds4-context-engine" / "tests" / "fixtures" / "pi"

# Keys and string values the parsers look for; drawn often so generated documents reach deep code.
VOCABULARY: Final = (
    "type", "role", "content", "id", "sourceEntryId", "blocks", "provenance", "source", "sessionId",
    "entryId", "runtimeId", "text", "thinking", "toolCall", "toolResult", "toolCallId", "toolName",
    "arguments", "name", "isError", "image", "mimeType", "data", "opaqueProvider", "value", "flags",
    "message", "messages", "system", "user", "assistant", "tool", "developer", "custom", "tool_calls",
    "function", "function_call", "function_call_output", "call_id", "output", "input", "tool_use",
    "tool_result", "tool_use_id", "input_text", "output_text", "image_url", "url", "parentId",
    "timestamp", "version", "cwd", "session", "compaction", "summary", "firstKeptEntryId",
    "branch_summary", "model_change", "provider", "modelId", "choices", "usage", "stop_reason",
    "finish_reason", "prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "budget",
    "privacy", "tokens", "ds4-runtime-session-v1", "runtime-session", "pi-session", "runtime-history-v1",
    "schemaVersion", "revision", "projectRoot", "toolAtomicGroups", "openai", "anthropic", "ollama",
    "baseUrl", "trusted", "apiKeyEnv", "openai_compat", "lmstudio", "http://127.0.0.1:1234/v1",
)  # fmt: skip

_keys = st.one_of(st.sampled_from(VOCABULARY), st.text(max_size=12))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(VOCABULARY),
    st.text(max_size=40),
)
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=6), st.dictionaries(_keys, children, max_size=8)),
    max_leaves=40,
)


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def deep_json(draw: st.DrawFn) -> bytes:
    """A value wrapped in many lists or objects: past every recursion limit, or just past ours."""
    depth = draw(st.one_of(st.integers(120, 140), st.integers(900, 1100), st.just(50_000)))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    inner = opener * depth + "1" + closer * depth
    where = draw(st.sampled_from(["bare", "arguments", "content", "value"]))
    if where == "bare":
        return inner.encode()
    return (f'{{"type":"toolCall","role":"assistant","{where}":{inner}}}').encode()


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed with a few byte-level edits: flips, inserts, deletes, truncation, a duplicated slice."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            break
        position = draw(st.integers(0, len(data) - 1))
        edit = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "repeat"]))
        if edit == "flip":
            data[position] = draw(st.integers(0, 255))
        elif edit == "insert":
            data[position:position] = draw(
                st.sampled_from([b"\n", b"{", b"[", b'"', b"\\", b"\x00", b"\xff"])
            )
        elif edit == "delete":
            del data[position : position + draw(st.integers(1, 16))]
        elif edit == "truncate":
            del data[position:]
        else:
            data[position:position] = data[position : position + draw(st.integers(1, 64))]
    return bytes(data)


@st.composite
def replaced(draw: st.DrawFn, seeds: list[Any]) -> bytes:
    """A JSON seed with one subtree swapped for a generated value (keeps the rest well-formed)."""
    document = json.loads(json.dumps(draw(st.sampled_from(seeds))))
    holders: list[Any] = []
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            holders.append(item)
            stack.extend(item.values() if isinstance(item, dict) else item)
    holder = draw(st.sampled_from(holders))
    if isinstance(holder, dict) and holder:
        holder[draw(st.sampled_from(sorted(holder)))] = draw(json_values)
    elif isinstance(holder, list) and holder:
        holder[draw(st.integers(0, len(holder) - 1))] = draw(json_values)
    return encode(document)


def inputs(
    seed_bytes: list[bytes], seed_documents: list[Any] | None = None, *, deep: bool = True
) -> st.SearchStrategy[bytes]:
    """Everything a target is fed: raw bytes, generated JSON, mutated and subtree-replaced seeds, depth."""
    options: list[st.SearchStrategy[bytes]] = [
        st.binary(max_size=512),
        json_values.map(encode),
        mutated(seed_bytes),
    ]
    if deep:
        options.append(deep_json())
    if seed_documents:
        options.append(replaced(seed_documents))
    return st.one_of(options)


def jsonl(documents: list[Any]) -> bytes:
    return b"".join(encode(document) + b"\n" for document in documents)


def pi_seeds() -> list[bytes]:
    return [path.read_bytes() for path in sorted(PI_FIXTURES.glob("*.jsonl"))]
