"""Plans for a named destination pass that provider's structural rules once converted to its format.

The checkers below are written from the providers' documented rules, on the converted payloads (plain
dicts), independently of the planner's own self-check:

* Anthropic Messages: the first message is from the user and roles alternate (no two consecutive turns
  of one role); every ``tool_use`` of an assistant turn is answered by a ``tool_result`` in the very next
  user turn, where the results come before any other content; no ``tool_result`` without that call.
* OpenAI Chat Completions: an assistant message with ``tool_calls`` is followed directly by one ``tool``
  message per call; no ``tool`` message without the assistant message that called it.
* OpenAI Responses: every ``function_call_output`` comes after its ``function_call``; every call gets
  exactly one output.
"""

from __future__ import annotations

from typing import Any

from _messages import message as _message
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core._planner._structure import structure_problem
from ds4_context_core.interop import to_anthropic_messages, to_openai_chat, to_openai_responses
from ds4_context_core.planner import ContextPlanner, plan_context, restore

# ------------------------------------------------------------------------------------ provider rules


def _parts(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def anthropic_problem(payload: dict[str, Any]) -> str | None:
    messages = payload["messages"]
    if not messages:
        return "no messages"
    if messages[0]["role"] != "user":
        return "the first message is not from the user"
    seen_calls: set[str] = set()
    for number, message in enumerate(messages):
        role, parts = message["role"], _parts(message["content"])
        if role not in ("user", "assistant"):
            return f"role {role!r}"
        if number and messages[number - 1]["role"] == role:
            return f"two consecutive {role} turns at {number}"
        if not parts:
            return f"empty content at {number}"
        uses = [p["id"] for p in parts if p.get("type") == "tool_use"]
        results = [p["tool_use_id"] for p in parts if p.get("type") == "tool_result"]
        if role == "user" and uses:
            return "tool_use in a user turn"
        if role == "assistant" and results:
            return "tool_result in an assistant turn"
        if seen_calls.intersection(uses) or len(set(uses)) != len(uses):
            return "tool_use id used twice"
        seen_calls.update(uses)
        if results:
            leading = 0
            while leading < len(parts) and parts[leading].get("type") == "tool_result":
                leading += 1
            if leading != len(results):
                return f"tool_result after other content at {number}"
            previous = messages[number - 1] if number else None
            called = (
                {p["id"] for p in _parts(previous["content"]) if p.get("type") == "tool_use"}
                if previous
                else set()
            )
            if not set(results) <= called:
                return f"tool_result without its tool_use in the turn before, at {number}"
        if uses:
            after = messages[number + 1] if number + 1 < len(messages) else None
            answered = (
                {p["tool_use_id"] for p in _parts(after["content"]) if p.get("type") == "tool_result"}
                if after is not None and after["role"] == "user"
                else set()
            )
            if not set(uses) <= answered:
                return f"tool_use without a tool_result in the next user turn, at {number}"
    return None


def openai_chat_problem(messages: list[dict[str, Any]]) -> str | None:
    pending: set[str] = set()  # calls of the last assistant message still waiting for their tool message
    known: set[str] = set()
    for number, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in pending:
                return f"tool message without the assistant message that called it, at {number}"
            pending.discard(call_id)
            continue
        if pending:
            return f"{role} message before every call of the assistant message was answered, at {number}"
        if role == "assistant" and message.get("tool_calls"):
            ids = [call["id"] for call in message["tool_calls"]]
            if known.intersection(ids) or len(set(ids)) != len(ids):
                return "tool call id used twice"
            known.update(ids)
            pending = set(ids)
    return "a call without its tool message at the end" if pending else None


def openai_responses_problem(items: list[dict[str, Any]]) -> str | None:
    called: set[str] = set()
    answered: set[str] = set()
    for number, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            if item["call_id"] in called:
                return "function_call id used twice"
            called.add(item["call_id"])
        elif kind == "function_call_output":
            if item["call_id"] not in called:
                return f"function_call_output before or without its function_call, at {number}"
            if item["call_id"] in answered:
                return "two outputs for one call"
            answered.add(item["call_id"])
    return None if called == answered else "a function_call without output"


def destination_problem(destination: str, messages: tuple[core.CanonicalMessage, ...]) -> str | None:
    if destination == "anthropic":
        return anthropic_problem(dict(to_anthropic_messages(messages)))
    if destination == "openai-chat":
        return openai_chat_problem([dict(m) for m in to_openai_chat(messages)])
    return openai_responses_problem([dict(i) for i in to_openai_responses(messages)])


# --------------------------------------------------------------------------------- generated histories

_events = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(1, 3_000)),
        st.tuples(st.just("say"), st.integers(1, 3_000)),
        st.tuples(st.just("system"), st.integers(1, 400)),
        st.tuples(
            st.just("step"),
            st.integers(1, 3),  # parallel calls
            st.integers(0, 3),  # how many results arrive (fewer: an aborted call)
            st.integers(1, 20_000),  # result size in characters
            st.sampled_from(["read", "grep", "bash"]),
            st.booleans(),  # the results arrive as one tool message (Anthropic) or one per call (OpenAI)
            st.sampled_from(["none", "text", "user", "assistant"]),  # said with the call / between
        ),
        st.tuples(st.just("split"), st.integers(1, 4_000)),  # two calling turns answered by one message
        st.tuples(st.just("orphan"), st.integers(1, 500)),
    ),
    min_size=1,
    max_size=50,
)


def _build(events: list[tuple[Any, ...]]) -> list[core.CanonicalMessage]:
    history: list[core.CanonicalMessage] = []
    for number, event in enumerate(events):
        kind = event[0]
        if kind == "user":
            history.append(_message(f"u{number}", "user", [core.TextBlock(text="q" * event[1])]))
        elif kind == "say":
            history.append(_message(f"s{number}", "assistant", [core.TextBlock(text="a" * event[1])]))
        elif kind == "system":
            history.append(_message(f"y{number}", "system", [core.TextBlock(text="y" * event[1])]))
        elif kind == "orphan":
            block = core.ToolResultBlock(
                tool_call_id=f"ghost{number}", tool_name="read", content="o" * event[1]
            )
            history.append(_message(f"o{number}", "tool", [block]))
        elif kind == "split":
            blocks = []
            for side in ("a", "b"):
                call = core.ToolCallBlock(id=f"c{number}{side}", name="read", arguments={"path": side})
                history.append(_message(f"a{number}{side}", "assistant", [call]))
                blocks.append(
                    core.ToolResultBlock(tool_call_id=call.id, tool_name="read", content="r" * event[1])
                )
            history.append(_message(f"r{number}", "tool", blocks))
        else:
            _, calls, answered, size, name, batched, said = event
            ids = [f"c{number}-{i}" for i in range(calls)]
            blocks: list[core.CanonicalBlock] = [core.TextBlock(text="doing it")] if said == "text" else []
            blocks += [core.ToolCallBlock(id=i, name=name, arguments={"path": f"f{number % 5}"}) for i in ids]
            history.append(_message(f"a{number}", "assistant", blocks))
            if said in ("user", "assistant"):  # a message between the call and its results
                history.append(_message(f"m{number}", said, [core.TextBlock(text="meanwhile")]))
            results = [
                core.ToolResultBlock(tool_call_id=i, tool_name=name, content="r" * size)
                for i in ids[:answered]
            ]
            if batched and results:
                history.append(_message(f"r{number}", "tool", results))
            else:
                history.extend(_message(f"r{number}-{k}", "tool", [r]) for k, r in enumerate(results))
    return history


_DESTINATIONS = st.sampled_from(["anthropic", "openai-chat", "openai-responses"])
_WINDOWS = st.sampled_from([4_096, 8_000, 20_000, 64_000])
_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _text_of(message: core.CanonicalMessage) -> list[str]:
    return [b.text for b in message.blocks if isinstance(b, core.TextBlock)]


def _check(plan: core.ContextPlan, history: list[core.CanonicalMessage], destination: str) -> None:
    problem = destination_problem(destination, plan.messages)
    assert problem is None, problem
    # nothing the plan holds is lost in conversion: every call, result and text reaches the payload
    calls = [b.id for m in plan.messages for b in m.blocks if isinstance(b, core.ToolCallBlock)]
    results = [b.tool_call_id for m in plan.messages for b in m.blocks if isinstance(b, core.ToolResultBlock)]
    if destination == "anthropic":
        payload = to_anthropic_messages(plan.messages)
        parts = [p for m in payload["messages"] for p in _parts(m["content"])]
        assert [p["id"] for p in parts if p["type"] == "tool_use"] == calls
        assert sorted(p["tool_use_id"] for p in parts if p["type"] == "tool_result") == sorted(results)
        texts = sorted(t for m in plan.messages if m.role != "system" for t in _text_of(m))
        assert sorted(p["text"] for p in parts if p["type"] == "text") == texts
    elif destination == "openai-chat":
        chat = to_openai_chat(plan.messages)
        assert [c["id"] for m in chat for c in m.get("tool_calls") or []] == calls
        assert sorted(m["tool_call_id"] for m in chat if m["role"] == "tool") == sorted(results)
    # no silent drop: each history message is sent, restorable from what is sent, or listed as left out
    sent = {m.id for m in plan.messages}
    left_out = sum(e.count for e in plan.manifest.exclusions)
    missing = [m for m in history if m.id not in sent and not restore(plan, m.id)]
    assert len(missing) <= left_out


@_SETTINGS
@given(_events, _WINDOWS, _DESTINATIONS)
def test_plans_pass_the_destinations_rules_after_conversion(events, window, destination):
    history = _build([*events, ("user", 20)])
    model = core.ModelDescriptor(provider="anthropic", id="m", context_window=window, max_tokens=window // 8)
    plan = plan_context(history, model=model, destination=destination)
    if plan.messages:
        _check(plan, history, destination)
    if plan.ok:
        assert plan.budget.total_tokens <= plan.budget.hard_limit


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events, st.integers(1, 6), _DESTINATIONS)
def test_every_step_of_an_append_only_session_passes_the_destinations_rules(events, chunk, destination):
    history = _build([("user", 10), *events, ("user", 20)])
    model = core.ModelDescriptor(provider="openai", id="m", context_window=8_000, max_tokens=1_000)
    planner = ContextPlanner()
    for end in range(chunk, len(history) + chunk, chunk):
        prefix = history[:end]
        if not any(m.role == "user" for m in prefix):
            continue
        plan = planner.plan(prefix, model=model, destination=destination)
        if plan.messages:
            _check(plan, prefix, destination)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events, _DESTINATIONS, st.randoms(use_true_random=False))
def test_the_planners_own_check_agrees_with_the_provider_rules_on_any_message_order(events, destination, rnd):
    """The self-check reads canonical messages the way the converters write them; on raw histories,
    shuffled or not, it accepts exactly what the converted payload's rules accept."""
    history = _build(events)
    assume(any(m.role not in ("system", "developer") for m in history))  # a plan holds its request
    if rnd.random() < 0.5:
        rnd.shuffle(history)
    expected = destination_problem(destination, tuple(history)) is None
    assert (structure_problem(tuple(history), destination) is None) == expected
