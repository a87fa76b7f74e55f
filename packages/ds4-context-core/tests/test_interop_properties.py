"""Property tests: random provider-shaped histories survive canonical round trips exactly."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ds4_context_core.history import build_runtime_history_snapshot, validate_runtime_history_snapshot
from ds4_context_core.interop import (
    from_anthropic_messages,
    from_openai_chat,
    from_openai_responses,
    to_anthropic_messages,
    to_openai_chat,
    to_openai_responses,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
arguments = st.dictionaries(
    st.sampled_from(["path", "n", "flag"]), st.one_of(st.integers(), text, st.booleans()), max_size=3
)


@st.composite
def chat_histories(draw: st.DrawFn) -> list[dict]:
    out: list[dict] = []
    next_call = 0
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["system", "user", "user-parts", "assistant", "calls"]))
        if kind == "system":
            out.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text)})
        elif kind == "user":
            out.append({"role": "user", "content": draw(text)})
        elif kind == "user-parts":
            parts = draw(
                st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), min_size=1, max_size=3)
            )
            out.append({"role": "user", "content": parts})
        elif kind == "assistant":
            out.append({"role": "assistant", "content": draw(text)})
        else:
            ids = [f"call_{next_call + k}" for k in range(draw(st.integers(1, 3)))]
            next_call += len(ids)
            calls = [
                {
                    "id": i,
                    "type": "function",
                    "function": {"name": "tool", "arguments": json.dumps(draw(arguments))},
                }
                for i in ids
            ]
            out.append({"role": "assistant", "content": None, "tool_calls": calls})
            for i in draw(st.permutations(ids)):
                out.append({"role": "tool", "tool_call_id": i, "content": draw(text)})
    return out


def _valid(messages) -> None:
    snapshot = build_runtime_history_snapshot(
        runtime_id="interop", session_id="s", revision="r", project_root="/p", messages=messages
    )
    assert validate_runtime_history_snapshot(snapshot) == ()
    assert all(group.complete for group in snapshot.tool_atomic_groups)


@SETTINGS
@given(chat_histories())
def test_chat_round_trip(chat):
    canonical = from_openai_chat(chat, session_id="s")
    _valid(canonical)
    back = to_openai_chat(canonical)
    # json.dumps in the history and compact JSON on export may differ in spacing, never in meaning
    for message in (*chat, *back):
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    assert back == chat


@SETTINGS
@given(chat_histories())
def test_chat_history_through_anthropic_and_responses_keeps_every_call_answered(chat):
    canonical = from_openai_chat(chat, session_id="s")
    via_anthropic = from_anthropic_messages(to_anthropic_messages(canonical), session_id="s")
    via_responses = from_openai_responses(to_openai_responses(canonical), session_id="s")
    for history in (via_anthropic, via_responses):
        _valid(history)
        calls = [b.id for m in history for b in m.blocks if b.__class__.__name__ == "ToolCallBlock"]
        original_calls = [
            b.id for m in canonical for b in m.blocks if b.__class__.__name__ == "ToolCallBlock"
        ]
        assert calls == original_calls
