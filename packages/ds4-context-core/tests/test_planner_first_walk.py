"""The fast first build of the planner index must describe a history exactly as the general walk does.

``HistoryIndex._first_walk`` covers the usual shape of a long history (unique ids, each result message
answering calls of one earlier message) and hands everything else to ``_walk``, the reference. These
tests build both on random histories full of the shapes that must go to the reference (orphans, results
before their call or answering several steps, duplicate message and call ids, calls and results in one
message, failing estimates) and compare every field, then the plans.
"""

import random

import pytest
from _messages import interpreted_planner_only
from _messages import message as _message
from hypothesis import given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core._planner import _index
from ds4_context_core._planner._index import HistoryIndex, HistoryIndexError, sync_index
from ds4_context_core.planner import ContextPlanner, fast_chars_v1, plan_context

SMALL = core.ModelDescriptor(provider="t", id="small", context_window=32_000, max_tokens=4_096)
LARGE = core.ModelDescriptor(provider="t", id="large", context_window=128_000, max_tokens=16_384)

# Shapes the first walk covers itself, and shapes it must hand to the general walk.
_USUAL = (
    "orphan",
    "late",
    "unanswered",
    "odd-arguments",
    "opaque",
    "pin",
    "synthetic",
    "user-results",
    "parallel",
)
_IRREGULAR = ("early", "two-steps", "duplicate-message", "duplicate-call", "mixed", "same-message")
_ODDITIES = _USUAL + _IRREGULAR
# Mostly histories the first walk takes (else the comparison would mostly test the general walk twice).
_SHAPES = st.builds(
    lambda usual, irregular: usual | irregular,
    st.sets(st.sampled_from(_USUAL)),
    st.one_of(st.just(frozenset()), st.just(frozenset()), st.sets(st.sampled_from(_IRREGULAR), max_size=2)),
)


def _history(seed, size, oddities, *, encodable=False, calm=0):
    """A coding session of turns and tool steps with each of ``oddities`` planted now and then; with
    ``encodable``, no argument key a plan's JSON encoding refuses (an int); with ``calm``, none of the
    irregular shapes in the first ``calm`` messages."""
    rng = random.Random(seed)
    planted = {name: (rng.uniform(0.01, 0.08) if name in oddities else 0.0) for name in _ODDITIES}
    planted["duplicate-message"] /= 20
    quiet = {name: (0.0 if name in _IRREGULAR else value) for name, value in planted.items()}
    history = []
    waiting = []  # (call id, tool name) of calls a later message answers
    held = []  # results a later step's message delivers with its own
    number = 0
    while len(history) < size:
        number += 1
        rate = quiet if len(history) < calm else planted
        if rng.random() < 0.15 or not history:
            text = core.TextBlock(text="please look at the error " * rng.randint(1, 200))
            pinned = rng.random() < rate["pin"] or None
            synthetic = rng.random() < rate["synthetic"] or None
            history.append(_message(f"u{number}", "user", [text], pinned=pinned, synthetic=synthetic))
            continue
        if rng.random() < rate["duplicate-message"]:
            history.append(rng.choice(history))
            continue
        if rng.random() < rate["orphan"]:
            block = core.ToolResultBlock(
                tool_call_id=f"ghost{rng.randint(0, 9)}", tool_name="read", content="x"
            )
            history.append(_message(f"o{number}", "tool", [block]))
            continue
        if rng.random() < rate["early"]:
            call_id = f"early{number}"
            waiting.append((call_id, "read"))
            block = core.ToolResultBlock(tool_call_id=call_id, tool_name="read", content="too soon " * 9)
            history.append(_message(f"e{number}", "tool", [block]))
        count = rng.randint(2, 4) if rng.random() < rate["parallel"] + 0.1 else 1
        ids = [f"c{number}-{i}" for i in range(count)]
        if rng.random() < rate["duplicate-call"] and number > 2:
            ids[0] = f"c{rng.randint(1, number - 1)}-0"
        if waiting and rng.random() < 0.3:
            ids.append(waiting.pop()[0])
        name = rng.choice(["read", "grep", "bash", "edit", "Str_Replace-Editor"])
        arguments: dict = {"path": f"src/m{number % 7}.py"}
        if rng.random() < rate["odd-arguments"]:
            odd = [{"n": 1.5}, {"nested": {"a": [1, None]}}, {"big": 2**70}, {"é": "x"}]
            arguments = rng.choice(odd if encodable else [*odd, {1: "x"}])
        blocks = [core.ThinkingBlock(thinking="hmm " * rng.randint(0, 40)), core.TextBlock(text="on it")]
        blocks += [core.ToolCallBlock(id=i, name=name, arguments=arguments) for i in ids]
        if rng.random() < rate["opaque"]:
            blocks.append(core.OpaqueProviderBlock(value={"kind": "signature"}))
        results = []
        for i in ids:
            if rng.random() < rate["unanswered"]:
                continue
            content = ("line error\n" if rng.random() < 0.1 else "line ok\n") * rng.randint(1, 600)
            results.append(core.ToolResultBlock(tool_call_id=i, tool_name=name, content=content))
        if results and rng.random() < rate["same-message"]:
            blocks.append(results.pop(0))
        history.append(_message(f"a{number}", "assistant", blocks))
        late = [results.pop()] if results and rng.random() < rate["late"] else []
        if results and held and rng.random() < 0.5:
            # one message answering this step and an earlier one
            history.append(_message(f"t{number}", "tool", [held.pop(), results.pop(0)]))
        if results and rng.random() < rate["two-steps"]:
            held.append(results.pop())
        if results and rng.random() < rate["mixed"]:
            call = core.ToolCallBlock(id=f"m{number}", name="read", arguments={"path": "x.py"})
            history.append(_message(f"x{number}", "user", [results.pop(0), call]))
            results.append(core.ToolResultBlock(tool_call_id=f"m{number}", tool_name="read", content="ok"))
        if results and rng.random() < rate["user-results"]:
            history.append(_message(f"r{number}", "user", results))
        else:
            history.extend(_message(f"r{number}-{j}", "tool", [b]) for j, b in enumerate(results))
        if late:
            for gap in range(rng.randint(0, 3)):
                history.append(_message(f"g{number}-{gap}", "user", [core.TextBlock(text="and?")]))
            history.append(_message(f"l{number}", "tool", late))
    history.append(_message("final", "user", [core.TextBlock(text="go on")]))
    return tuple(history)


def _general_only(monkeypatch):
    monkeypatch.setattr(HistoryIndex, "_first_walk", lambda self, messages, **options: False)


def _build(history):
    try:
        return sync_index(None, history, fast_chars_v1, None), None
    except HistoryIndexError as problem:
        return None, (problem.code, problem.detail)


def _facts(index):
    size = len(index)
    roots = [index.unit_of(p) for p in range(size)]
    return {
        "units": roots,
        "members": {root: index.unit_members(root) for root in set(roots) if index.parent[root] >= 0},
        "tool": [index.parent[p] >= 0 for p in range(size)],
        "tokens": list(index.tokens),
        **{
            name: getattr(index, name)
            for name in (
                "position_of",
                "duplicate_id",
                "user_positions",
                "pinned",
                "callers",
                "answered",
                "open_calls",
                "early_results",
                "bad",
                "incomplete",
                "known_from",
                "cumulative",
                "group_ids",
                "evidence",
            )
        },
    }


def _both(history, monkeypatch):
    fast, fast_error = _build(history)
    with monkeypatch.context() as patch:
        _general_only(patch)
        general, general_error = _build(history)
    return fast, fast_error, general, general_error


@interpreted_planner_only  # it turns the first walk off through the class
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), _SHAPES, st.sampled_from([256, 400, 900]))
def test_the_first_walk_describes_a_history_as_the_general_walk_does(seed, oddities, size):
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, fast_error, general, general_error = _both(_history(seed, size, oddities), monkeypatch)
    assert fast_error == general_error
    if general is not None:
        assert _facts(fast) == _facts(general)


@interpreted_planner_only  # it turns the first walk off through the class
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), _SHAPES, st.integers(0, 300))
def test_appending_to_a_first_walk_equals_appending_to_the_general_walk(seed, oddities, kept):
    # Appends join, merge and list the first walk's runs: late results, steps answered together,
    # calls reusing an id and results that came before their call reach back into the runs.
    start = 600 - kept
    history = _history(seed, 600, oddities | set(_IRREGULAR) - {"duplicate-message"}, calm=start)
    fast = sync_index(None, history[:start], fast_chars_v1, None)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _general_only(monkeypatch)
        general = sync_index(None, history[:start], fast_chars_v1, None)
    assert _facts(fast) == _facts(general)
    for end in sorted({start + kept // 2, start + kept // 2 + 1, len(history)}):
        assert sync_index(fast, history[:end], fast_chars_v1, None) is fast
        assert sync_index(general, history[:end], fast_chars_v1, None) is general
        assert _facts(fast) == _facts(general)


@interpreted_planner_only  # it spies on the first walk through the module
def test_the_first_walk_takes_the_usual_shape_and_hands_on_every_other(monkeypatch):
    taken = []
    real = _index._first_structure

    def spy(messages, **options):
        try:
            built = real(messages, **options)
        except Exception:
            taken.append(False)
            raise
        taken.append(True)
        return built

    monkeypatch.setattr(_index, "_first_structure", spy)
    for seed in range(10):
        _build(_history(seed, 600, set(_USUAL)))
    assert taken == [True] * 10
    for oddity in _IRREGULAR:
        taken.clear()
        for seed in range(40):
            _build(_history(seed, 600, {oddity}))
        assert False in taken, oddity
    taken.clear()
    _build(_history(1, 100, set(_USUAL)))  # short histories estimate at once: no first walk
    assert taken == []


@interpreted_planner_only  # it turns the first walk off through the class
@pytest.mark.parametrize(
    "bad",
    [
        "not a message",
        _message("twin", "user", [core.TextBlock(text="hi")]),
        core.ToolCallBlock(id="\ud800", name="odd", arguments={"\ud800": 1}),
    ],
    ids=["foreign", "duplicate", "unestimable"],
)
@pytest.mark.parametrize("where", [3, 299])
def test_a_broken_history_fails_the_first_walk_exactly_like_the_general_walk(bad, where, monkeypatch):
    history = list(_history(7, 300, {"parallel", "late"}))
    if isinstance(bad, core.ToolCallBlock):
        bad = _message("odd", "assistant", [bad])
    if isinstance(bad, core.CanonicalMessage) and bad.id == "s:twin":
        history.insert(1, bad)
    history.insert(where, bad)
    fast, fast_error, general, general_error = _both(tuple(history), monkeypatch)
    assert fast_error == general_error
    if bad == "not a message" or bad.id == "s:odd":
        assert fast is None
        assert general_error is not None
    else:
        assert fast is not None
        assert _facts(fast) == _facts(general)
        assert fast.duplicate_id == "s:twin"


@interpreted_planner_only  # it turns the first walk off through the class
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), _SHAPES, st.booleans())
def test_plans_after_the_first_walk_equal_plans_after_the_general_walk(seed, oddities, small):
    history = _history(seed, 700, oddities, encodable=True)
    model = SMALL if small else LARGE
    rng = random.Random(seed)
    pins = [history[rng.randrange(len(history))].id for _ in range(rng.randint(0, 2))]
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast = [plan_context(history, model=model, pins=pins, fixed_tokens=1_500)]
        planner = ContextPlanner()
        for end in (len(history) - 30, len(history) - 29, len(history) - 5, len(history)):
            fast.append(planner.plan(history[:end], model=model, pins=pins))
        _general_only(monkeypatch)
        general = [plan_context(history, model=model, pins=pins, fixed_tokens=1_500)]
        planner = ContextPlanner()
        for end in (len(history) - 30, len(history) - 29, len(history) - 5, len(history)):
            general.append(planner.plan(history[:end], model=model, pins=pins))
    for mine, reference in zip(fast, general, strict=True):
        assert mine.encode() == reference.encode()
        assert mine.manifest == reference.manifest
