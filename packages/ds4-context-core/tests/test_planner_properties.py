"""Planner invariants over generated histories: no orphan, never over the hard limit, input untouched,
deterministic, and an append-only replay that stays valid at every step."""

import copy

import msgspec
from _messages import message as _message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core._planner._index import sync_index
from ds4_context_core.planner import ContextPlanner, fast_chars_v1, plan_context, restore

# One history "event": a user turn, assistant text, a (possibly parallel, possibly broken) tool step.
_events = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(1, 3_000)),
        st.tuples(st.just("say"), st.integers(1, 3_000)),
        st.tuples(
            st.just("step"),
            st.integers(1, 3),  # parallel calls
            st.integers(0, 3),  # how many results arrive (fewer = incomplete)
            st.integers(1, 20_000),  # result size in characters
            st.sampled_from(["read", "grep", "bash", "edit"]),
        ),
        st.tuples(st.just("orphan"), st.integers(1, 500)),
    ),
    min_size=1,
    max_size=60,
)


def _build(events):
    history = []
    for number, event in enumerate(events):
        kind = event[0]
        if kind == "user":
            history.append(_message(f"u{number}", "user", [core.TextBlock(text="q" * event[1])]))
        elif kind == "say":
            history.append(_message(f"s{number}", "assistant", [core.TextBlock(text="a" * event[1])]))
        elif kind == "orphan":
            block = core.ToolResultBlock(
                tool_call_id=f"ghost{number}", tool_name="read", content="o" * event[1]
            )
            history.append(_message(f"o{number}", "tool", [block]))
        else:
            _, calls, answered, size, name = event
            ids = [f"c{number}-{i}" for i in range(calls)]
            blocks = [core.ToolCallBlock(id=i, name=name, arguments={"path": f"f{number % 5}"}) for i in ids]
            history.append(_message(f"a{number}", "assistant", blocks))
            for i in ids[:answered]:
                block = core.ToolResultBlock(tool_call_id=i, tool_name=name, content="r" * size)
                history.append(_message(f"r{i}", "tool", [block]))
    return history


def _no_orphan(messages):
    called, answered = set(), set()
    for message in messages:
        for block in message.blocks:
            if isinstance(block, core.ToolCallBlock):
                if block.id in called:
                    return False
                called.add(block.id)
            elif isinstance(block, core.ToolResultBlock):
                if block.tool_call_id not in called:
                    return False
                answered.add(block.tool_call_id)
    return called == answered


_windows = st.sampled_from([2_000, 8_000, 20_000, 64_000])
_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(_events, _windows, st.integers(0, 3_000))
def test_every_plan_is_valid_bounded_deterministic_and_leaves_input_alone(events, window, fixed):
    history = _build(events)
    frozen = msgspec.json.encode(history)
    snapshot = copy.deepcopy(history)
    model = core.ModelDescriptor(provider="p", id="m", context_window=window, max_tokens=window // 8)
    plan = plan_context(history, model=model, fixed_tokens=fixed)
    again = plan_context(copy.deepcopy(history), model=model, fixed_tokens=fixed)
    assert plan.encode() == again.encode()
    assert msgspec.json.encode(history) == frozen
    assert history == snapshot
    assert _no_orphan(plan.messages)
    if plan.ok:
        assert plan.budget.total_tokens <= plan.budget.hard_limit
        assert plan.budget.total_tokens == fixed + sum(item.tokens for item in plan.items)
        users = [m for m in history if m.role == "user"]
        codes = {diagnostic.code for diagnostic in plan.manifest.diagnostics}
        if users[-1] not in plan.messages:
            # only a request that alone passes the hard limit is sent as a restorable trimmed copy
            assert "current-request-trimmed" in codes
            (copy_sent,) = [m for m in plan.messages if m.id == users[-1].id]
            assert copy_sent.flags.synthetic
            assert restore(plan, users[-1].id) == (users[-1],)
    else:
        assert plan.fallback.code in {
            "current-request-missing",
            "message-exceeds-window",
            "fixed-overhead-exceeds-hard-limit",
            "window-invalid",
            "pins-exceed-cap",
        }
    # every message in the plan is a canonical message or a flagged synthetic stand-in
    originals = {m.id: m for m in history}
    for message, item in zip(plan.messages, plan.items, strict=True):
        assert message.id == item.message_id
        if message.flags.synthetic and item.kind == "summary":  # the planner's own task digest
            assert message.id == "ds4-supplement:ds4-core-task-digest"
            assert message.blocks[0].text.startswith("[ds4-context task digest]")
        elif message.flags.synthetic:
            assert item.kind in {"trimmed-tool-result", "receipt", "current-request", "interrupted-tool-call"}
        else:
            assert originals[message.id] is message


@_settings
@given(_events, st.integers(1, 8))
def test_append_only_replay_stays_valid_and_matches_a_fresh_validity(events, chunk):
    history = _build([("user", 10), *events])
    model = core.ModelDescriptor(provider="p", id="m", context_window=8_000, max_tokens=1_000)
    planner = ContextPlanner()
    for end in range(chunk, len(history) + chunk, chunk):
        prefix = history[:end]
        plan = planner.plan(prefix, model=model)
        fresh = plan_context(prefix, model=model)
        assert _no_orphan(plan.messages)
        assert plan.ok == fresh.ok
        if plan.ok:
            assert plan.budget.total_tokens <= plan.budget.hard_limit
            assert plan.manifest.shared_prefix_tokens <= plan.budget.total_tokens


@settings(max_examples=40, deadline=None)
@given(_events)
def test_groups_match_the_canonical_tool_atomic_groups(events):
    history = _build(events)
    index = sync_index(None, tuple(history), fast_chars_v1, None)
    expected = {
        group.message_ids: group.complete for group in core.build_canonical_tool_atomic_groups(history)
    }
    position = {m.id: i for i, m in enumerate(history)}
    for message_ids, complete in expected.items():
        roots = {index.unit_of(position[i]) for i in message_ids}
        assert len(roots) == 1
        (root,) = roots
        assert tuple(history[p].id for p in index.unit_members(root)) == message_ids
        # A result that comes before its call is complete for the canonical grouping but can never
        # be sent in order, so the planner treats it as orphaned; nothing else may differ.
        assert (root not in index.incomplete) == complete or index.incomplete.get(
            root
        ) == "tool-result-orphaned"


@settings(max_examples=40, deadline=None)
@given(_events)
def test_chars_v1_fast_path_equals_the_reference_estimator(events):
    for message in _build(events):
        assert fast_chars_v1(message) == core.estimate_message_tokens(message)


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=5,
    )
)
def test_chars_v1_fast_path_equals_the_reference_for_any_json_arguments(arguments):
    message = _message("a", "assistant", [core.ToolCallBlock(id="c", name="t", arguments=arguments)])
    assert fast_chars_v1(message) == core.estimate_message_tokens(message)


def test_unencodable_or_unusual_arguments_are_estimated_exactly():
    odd = [
        {"when": b"bytes"},
        {"n": float("nan"), "x": 1.0},
        {1: "int key", 10: "sorted as text"},
        {"nested": {"b": None, "a": [1.5, "é"]}},
        {"big": 2**70},
    ]
    for arguments in odd:
        message = _message("a", "assistant", [core.ToolCallBlock(id="c", name="t", arguments=arguments)])
        index = sync_index(None, (message,), fast_chars_v1, None)
        assert index.tokens[0] == core.estimate_message_tokens(message)
