"""Every parser, fuzzed: only its documented exceptions may come out (issue 22, item 11).

Collected by the normal test run with the short ``ci`` profile; ``nox -s fuzz -- --minutes N`` runs the
same tests with the ``fuzz`` profile for a bounded time each (see docs/contributing/fuzzing.md).
"""

from __future__ import annotations

from typing import Any

from fuzz_strategies import FUZZ_SETTINGS, PROFILE, encode, inputs, jsonl, pi_seeds
from fuzz_targets import (
    SESSION,
    answer_server,
    anthropic,
    canonical_jsonl,
    completion_over_http,
    config,
    model_reference,
    openai_chat,
    openai_responses,
    pi_session,
    provider_answer,
    reference_header,
    reference_history,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ds4_context_core import (
    CanonicalMessage,
    ImageBlock,
    MessageFlags,
    OpaqueProviderBlock,
    Provenance,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core.history import encode_canonical_message


def _message(entry: str, role: str, *blocks: Any) -> CanonicalMessage:
    return CanonicalMessage(
        id=f"{SESSION}:{entry}",
        source_entry_id=entry,
        role=role,  # type: ignore[arg-type]
        blocks=blocks,
        provenance=Provenance(
            source="runtime-session", session_id=SESSION, entry_id=entry, runtime_id="jsonl-reference"
        ),
        flags=MessageFlags(atomic=any(isinstance(b, ToolCallBlock | ToolResultBlock) for b in blocks)),
    )


MESSAGES = [
    _message("1", "user", TextBlock(text="read a.py"), ImageBlock(mime_type="image/png", data="AAAA")),
    _message("2", "assistant", ToolCallBlock(id="c1", name="read", arguments={"path": "a.py", "n": [1]})),
    _message("3", "tool", ToolResultBlock(tool_call_id="c1", tool_name="read", content="x = 1")),
    _message("4", "assistant", OpaqueProviderBlock(original_type="future", value={"k": [1, {"v": None}]})),
]
MESSAGE_DOCUMENTS: list[Any] = [__import__("json").loads(encode_canonical_message(m)) for m in MESSAGES]
CANONICAL_SEED = jsonl(MESSAGE_DOCUMENTS)
SNAPSHOT_DOCUMENT = {
    "schemaVersion": "runtime-history-v1",
    "runtimeId": "jsonl-reference",
    "sessionId": SESSION,
    "revision": "r1",
    "projectRoot": "/p",
    "messages": MESSAGE_DOCUMENTS,
    "toolAtomicGroups": [],
}
REFERENCE_RECORDS = jsonl([{"type": "message", "message": document} for document in MESSAGE_DOCUMENTS])

CHAT: list[Any] = [
    {"role": "system", "content": "be brief"},
    {
        "role": "user",
        "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p":"a"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
]
RESPONSES: list[Any] = [
    {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"type": "reasoning", "summary": []},
]
ANTHROPIC: dict[str, Any] = {
    "system": [{"type": "text", "text": "be brief"}],
    "messages": [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "read", "input": {"p": 1}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}]},
    ],
}
CONFIG: dict[str, Any] = {
    "schema": "ds4-context-config-v1",
    "budget": {"target_fill_ratio": 0.5, "soft_limit_ratio": 0.8},
    "privacy": {"local_providers": ["ollama"]},
}
ANSWERS: list[Any] = [
    {
        "id": "x",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "hi",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    },
    {
        "id": "r",
        "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
    {
        "id": "m",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "c", "name": "f", "input": {}},
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
]
LOCAL_PROVIDER: dict[str, Any] = {"id": "box", "type": "openai_compat", "baseUrl": "http://127.0.0.1:1234/v1"}


@FUZZ_SETTINGS
@given(inputs([CANONICAL_SEED, encode(SNAPSHOT_DOCUMENT)], [*MESSAGE_DOCUMENTS, SNAPSHOT_DOCUMENT]))
@example(CANONICAL_SEED)
def test_canonical_history_decoders(data: bytes) -> None:
    canonical_jsonl(data)


@st.composite
def _reference_files(draw: st.DrawFn) -> bytes:
    header = reference_header()
    body = draw(inputs([REFERENCE_RECORDS], [{"type": "message", "message": d} for d in MESSAGE_DOCUMENTS]))
    return draw(st.sampled_from([header + body, header + REFERENCE_RECORDS + body, body]))


@FUZZ_SETTINGS
@given(_reference_files())
def test_reference_history_reader(data: bytes) -> None:
    reference_history(data)


def test_the_reference_seed_is_a_readable_history() -> None:
    # The seeds must reach past the first check, or the fuzzer only ever tests the header.
    from fuzz_targets import _scratch  # noqa: PLC0415 - the target's own scratch directory

    from ds4_context_reference_adapter import read_reference_history  # noqa: PLC0415

    path = _scratch() / "seed.jsonl"
    path.write_bytes(reference_header() + REFERENCE_RECORDS)
    assert len(read_reference_history(path).messages) == len(MESSAGES)


@FUZZ_SETTINGS
@given(inputs(pi_seeds()))
def test_pi_session_reader(data: bytes) -> None:
    pi_session(data)


@FUZZ_SETTINGS
@given(
    st.one_of(
        inputs([b"openai:gpt-4o", b"anthropic:claude-sonnet-4", b"ollama:llama3:8b"], [LOCAL_PROVIDER]),
        st.text(max_size=80).map(lambda text: text.encode("utf-8", "surrogatepass")),
    )
)
def test_model_references_and_local_providers(data: bytes) -> None:
    model_reference(data)


@FUZZ_SETTINGS
@given(inputs([encode(CONFIG)], [CONFIG]))
def test_config_loading(data: bytes) -> None:
    config(data)


@FUZZ_SETTINGS
@given(inputs([encode(CHAT)], [CHAT]))
def test_from_openai_chat(data: bytes) -> None:
    openai_chat(data)


@FUZZ_SETTINGS
@given(inputs([encode(RESPONSES)], [RESPONSES]))
def test_from_openai_responses(data: bytes) -> None:
    openai_responses(data)


@FUZZ_SETTINGS
@given(inputs([encode(ANTHROPIC)], [ANTHROPIC]))
def test_from_anthropic_messages(data: bytes) -> None:
    anthropic(data)


@FUZZ_SETTINGS
@given(inputs([encode(answer) for answer in ANSWERS], ANSWERS))
def test_provider_answer_parsing(data: bytes) -> None:
    provider_answer(data)


# A real server per example costs ~0.1 s, so this target gets fewer examples; deeply nested answers are
# covered by test_fuzz_found_crashes.py.
@settings(FUZZ_SETTINGS, max_examples=10 if PROFILE == "ci" else FUZZ_SETTINGS.max_examples)
@given(inputs([encode(answer) for answer in ANSWERS], ANSWERS, deep=False))
def test_completion_over_a_real_http_server(data: bytes) -> None:
    with answer_server() as server:
        completion_over_http(server, data)


# Starting inputs for the atheris pass (``run_fuzz.py`` writes them into each target's corpus), so
# libFuzzer mutates valid documents instead of discovering JSON from nothing.
ATHERIS_SEEDS: dict[str, list[bytes]] = {
    "canonical_jsonl": [CANONICAL_SEED, encode(SNAPSHOT_DOCUMENT)],
    "reference_history": [reference_header() + REFERENCE_RECORDS],
    "pi_session": pi_seeds(),
    "model_reference": [b"openai:gpt-4o", b"ollama:llama3:8b", encode(LOCAL_PROVIDER)],
    "config": [encode(CONFIG)],
    "openai_chat": [encode(CHAT)],
    "openai_responses": [encode(RESPONSES)],
    "anthropic": [encode(ANTHROPIC)],
    "provider_answer": [encode(answer) for answer in ANSWERS],
}


def test_every_byte_target_has_seeds_for_atheris() -> None:
    from fuzz_targets import TARGETS  # noqa: PLC0415 - the registry run_fuzz.py fuzzes

    assert set(ATHERIS_SEEDS) == set(TARGETS)
    assert all(ATHERIS_SEEDS.values())
