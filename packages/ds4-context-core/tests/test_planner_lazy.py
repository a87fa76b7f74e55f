"""A cold plan of a long history estimates only the history it may send and completes the manifest on
first read; everything must equal what an eager pass over every message gives."""

import random

import pytest
from _messages import message as _message
from hypothesis import given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core._planner._index import sync_index
from ds4_context_core._tokens._estimators import flat_arguments
from ds4_context_core.planner import ContextPlanner, fast_chars_v1, plan_context

# These tests compare lazy and eager plans, not calibration: ratio 1.0 keeps the layout their windows give.
SMALL = core.ModelDescriptor(provider="t", id="small", context_window=32_000, max_tokens=4_096)
LARGE = core.ModelDescriptor(provider="t", id="large", context_window=128_000, max_tokens=16_384)


def _history(seed, size, *, oddities=True):
    """A long session of turns and (parallel) tool steps; with ``oddities``, also orphans, unanswered
    calls, results answering two steps, pins, synthetic users and arguments stable JSON must walk."""
    rng = random.Random(seed)
    history = []
    number = 0
    while len(history) < size:
        number += 1
        roll = rng.random()
        if roll < 0.15 or not history:
            pinned = oddities and rng.random() < 0.03
            text = core.TextBlock(text="please " * rng.randint(1, 400))
            history.append(_message(f"u{number}", "user", [text], pinned=pinned))
        elif oddities and roll < 0.18:
            block = core.ToolResultBlock(tool_call_id=f"ghost{number}", tool_name="read", content="x" * 90)
            history.append(_message(f"o{number}", "tool", [block]))
        elif oddities and roll < 0.20:
            arguments = rng.choice(
                [{"n": 1.5}, {"nested": {"a": [1, None]}}, {"big": 2**70}, {"é": "x"}, {"t": (1, 2)}]
            )
            call = core.ToolCallBlock(id=f"c{number}", name="odd", arguments=arguments)
            history.append(_message(f"a{number}", "assistant", [core.TextBlock(text="odd"), call]))
            result = core.ToolResultBlock(tool_call_id=f"c{number}", tool_name="odd", content="ok " * 50)
            history.append(_message(f"r{number}", "tool", [result]))
        else:
            calls = rng.randint(1, 3)
            ids = [f"c{number}-{i}" for i in range(calls)]
            name = rng.choice(["read", "grep", "bash", "edit"])
            blocks = [core.ThinkingBlock(thinking="hmm " * rng.randint(0, 60)), core.TextBlock(text="on it")]
            blocks += [
                core.ToolCallBlock(id=i, name=name, arguments={"path": f"src/m{number % 7}.py"}) for i in ids
            ]
            history.append(_message(f"a{number}", "assistant", blocks))
            answered = calls if not oddities or rng.random() > 0.03 else calls - 1
            for i in ids[:answered]:
                content = ("line error\n" if rng.random() < 0.1 else "line ok\n") * rng.randint(5, 900)
                block = core.ToolResultBlock(tool_call_id=i, tool_name=name, content=content)
                history.append(_message(f"r{number}-{i}", "tool", [block]))
    return tuple(history)


def _eager(message):
    # Same numbers as the planner's default estimator, but not it: the planner then estimates eagerly.
    return core.estimate_message_tokens(message)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("oddities", [False, True])
@pytest.mark.parametrize("model", [SMALL, LARGE], ids=["small", "large"])
def test_a_cold_plan_equals_the_eager_plan_byte_for_byte(seed, oddities, model):
    history = _history(seed, 1_500, oddities=oddities)
    lazy = plan_context(history, calibration_ratio=1.0, model=model, fixed_tokens=2_000, pins=[history[3].id])
    eager = plan_context(
        history,
        calibration_ratio=1.0,
        model=model,
        fixed_tokens=2_000,
        pins=[history[3].id],
        estimator=_eager,
    )
    assert lazy.ok == eager.ok
    assert lazy.manifest == eager.manifest
    assert lazy.encode() == eager.encode()
    assert lazy == eager
    assert lazy.manifest.native_tokens == 2_000 + sum(map(core.estimate_message_tokens, history))


@pytest.mark.parametrize("seed", range(3))
def test_replanning_after_a_lazy_cold_plan_equals_eager_replanning(seed):
    history = _history(seed, 900)
    lazy, eager = ContextPlanner(), ContextPlanner(estimator=_eager)
    for end in [700, 701, 705, 760, 820, 900]:
        first = lazy.plan(history[:end], calibration_ratio=1.0, model=SMALL)
        second = eager.plan(history[:end], calibration_ratio=1.0, model=SMALL)
        assert first.encode() == second.encode()


def test_the_manifest_is_completed_once_and_reads_are_stable():
    history = _history(11, 2_000, oddities=False)
    plan = plan_context(history, calibration_ratio=1.0, model=SMALL)
    assert plan.ok
    first = plan.manifest
    assert plan.manifest is first
    assert first.native_tokens == sum(map(core.estimate_message_tokens, history))
    assert first.saved_tokens == first.native_tokens - first.planned_tokens
    (before_cut,) = [e for e in first.exclusions if e.reason == "before-cut"]
    sent = {item.original_index for item in plan.items}
    cut = plan.state.dropped_messages
    assert before_cut.tokens == sum(
        core.estimate_message_tokens(m) for p, m in enumerate(history[:cut]) if p not in sent
    )


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.booleans())
def test_a_deferred_index_equals_an_eager_one_once_estimated(seed, oddities):
    history = _history(seed, 400, oddities=oddities)
    deferred = sync_index(None, history, fast_chars_v1, None)
    eager = sync_index(None, history, _eager, None)
    assert deferred.known_from == len(history)  # nothing estimated yet
    for name in ("position_of", "parent", "callers", "answered", "open_calls", "incomplete"):
        assert getattr(deferred, name) == getattr(eager, name), name
    # The first walk leaves most units as runs, listed on first use.
    roots = [p for p in range(len(history)) if eager.parent[p] == p]
    assert [deferred.unit_members(r) for r in roots] == [eager.members[r] for r in roots]
    assert deferred.user_positions == eager.user_positions
    assert deferred.pinned == eager.pinned
    middle = len(history) // 2
    deferred.ensure_known(middle)
    assert deferred.known_from == middle
    assert deferred.tokens[middle:] == eager.tokens[middle:]
    assert deferred.token(3) == eager.tokens[3]
    assert [deferred.prefix(p) for p in range(len(history) + 1)] == eager.cumulative
    assert deferred.tokens == eager.tokens


class _Key(str):
    pass


class _Number(int):
    pass


_ODD_ARGUMENTS = [
    {},
    {"path": "a.py"},
    {"n": 3, "flag": True, "text": "x"},
    {"n": 1.5},
    {"none": None},
    {"nested": {"a": 1}},
    {"list": [1]},
    {"é": "x"},
    {"path": "é"},
    {1: "x"},
    {_Key("k"): "x"},
    {"k": _Key("x")},
    {"k": _Number(1)},
    {"big": 2**70},
    {"\ud800": "x"},
    {"a": "x", "b": 1.5},
    {"a": "x", "é": 1},
]


def _old_flat_arguments(arguments):
    # The definition before the loop: two sets of types.
    return (
        type(arguments) is dict
        and set(map(type, arguments.values())) <= {str, int, bool}
        and set(map(type, arguments)) <= {str}
    )


@pytest.mark.parametrize("arguments", _ODD_ARGUMENTS, ids=range(len(_ODD_ARGUMENTS)))
def test_flat_arguments_keeps_its_meaning(arguments):
    assert flat_arguments(arguments) is _old_flat_arguments(arguments)


def test_a_deferred_walk_estimates_at_once_exactly_what_the_fast_path_may_not_cover():
    history = []
    # Leave out the lone-surrogate key: its estimate fails, so the index would refuse the history.
    estimable = [arguments for arguments in _ODD_ARGUMENTS if "\ud800" not in arguments]
    for number, arguments in enumerate(estimable * 20):
        call = core.ToolCallBlock(id=f"c{number}", name="odd", arguments=arguments)
        history.append(_message(f"a{number}", "assistant", [core.TextBlock(text="odd"), call]))
        result = core.ToolResultBlock(tool_call_id=f"c{number}", tool_name="odd", content="ok")
        history.append(_message(f"r{number}", "tool", [result]))
    history = tuple(history)
    deferred = sync_index(None, history, fast_chars_v1, None)
    assert len(history) >= 256  # a first build this long defers its estimates
    expected = []
    for message in history:
        calls = [b for b in message.blocks if type(b) is core.ToolCallBlock]
        expected.append(
            any(not (_old_flat_arguments(c.arguments) and "".join(c.arguments).isascii()) for c in calls)
        )
    assert [tokens >= 0 for tokens in deferred.tokens] == expected
    assert any(expected)
    assert not all(expected)
    for position, message in enumerate(history):
        assert deferred.token(position) == core.estimate_message_tokens(message)


def test_a_key_stable_json_rejects_gives_a_fallback_plan_from_a_deferred_build():
    history = list(_history(5, 600, oddities=False))
    call = core.ToolCallBlock(id="bad", name="odd", arguments={"\ud800": "x"})
    history.insert(10, _message("bad", "assistant", [call]))
    plan = plan_context(tuple(history), calibration_ratio=1.0, model=SMALL)
    assert not plan.ok
    assert plan.fallback is not None
