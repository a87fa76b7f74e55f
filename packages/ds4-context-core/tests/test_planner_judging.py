"""With the default judge the planner scans a candidate for evidence words only when layer 1 reaches
it (or layer 2 needs every verdict); plans must equal those of judging every candidate up front.

A subclass of ``DefaultJudge`` judges exactly alike but is judged eagerly (any other judge may read
``has_evidence`` of every candidate), so it is the oracle here.
"""

import random

import pytest
from _messages import interpreted_planner_only
from _messages import message as _message
from hypothesis import given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core._planner import _pruning, _verdicts
from ds4_context_core._planner._index import normalize_tool_name
from ds4_context_core.config import DEFAULT_EVIDENCE_WORDS, DEFAULT_READ_ONLY_TOOLS, DEFAULT_WRITE_TOOLS
from ds4_context_core.planner import ContextPlanner, plan_context
from ds4_context_core.pruning import DefaultJudge, JudgeCandidate, Verdict

# These tests compare lazy and eager plans, not calibration: ratio 1.0 keeps the layout their windows give.
SMALL = core.ModelDescriptor(provider="t", id="small", context_window=16_000, max_tokens=2_048)
MEDIUM = core.ModelDescriptor(provider="t", id="medium", context_window=48_000, max_tokens=4_096)


class _Eager(DefaultJudge):
    """The default judge under another type: every candidate is scanned before judging."""


_LINES = ["ok fine", "all good", "TODO: later", "parseError at 3", "debug info", "Traceback (most recent"]


def _history(seed, steps):
    """Read-only and editing steps with results of every size, some of them carrying evidence."""
    rng = random.Random(seed)
    history = [_message("start", "user", [core.TextBlock(text="fix the failing test")])]
    for step in range(steps):
        if rng.random() < 0.1:
            history.append(_message(f"u{step}", "user", [core.TextBlock(text="next " * rng.randint(1, 50))]))
        name = rng.choice(["read", "grep", "glob", "bash", "edit", "read"])
        path = {"path": f"src/m{rng.randint(0, 9)}.py"}
        calls = [
            core.ToolCallBlock(id=f"c{step}-{i}", name=name, arguments=path)
            for i in range(rng.choice([1, 1, 1, 2, 3]))
        ]
        notes = core.TextBlock(text="checking " * rng.randint(0, 30))
        history.append(_message(f"a{step}", "assistant", [notes, *calls]))
        for call in calls:
            size = rng.randint(1, 900)
            lines = [rng.choice(_LINES) if rng.random() < 0.02 else "line ok" for _ in range(size)]
            result = core.ToolResultBlock(
                tool_call_id=call.id, tool_name=name, content="\n".join(lines), is_error=rng.random() < 0.03
            )
            history.append(_message(f"r{step}-{call.id}", "tool", [result]))
    history.append(_message("last", "user", [core.TextBlock(text="go on")]))
    return tuple(history)


def _config(rng):
    return {
        "pruning": {
            "preserve_recent": rng.choice([0, 4]),
            "min_chars_to_prune": rng.choice([0, 400, 4000]),
            "receipt_max_per_pass": rng.choice([0, 3]),
            "dry_run": rng.random() < 0.2,
            "receipts": rng.random() < 0.8,
        }
    }


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([SMALL, MEDIUM]))
def test_scanning_on_demand_plans_exactly_like_scanning_every_candidate(seed, model):
    history = _history(seed, 400)
    config = _config(random.Random(seed))
    lazy = plan_context(history, calibration_ratio=1.0, model=model, config=config)
    eager = plan_context(history, calibration_ratio=1.0, model=model, config=config, judge=_Eager())
    assert lazy.encode() == eager.encode()
    assert lazy.manifest == eager.manifest
    assert lazy.manifest.compaction is not None
    # Replanning reuses the scans already made and still plans alike.
    planners = ContextPlanner(config=config), ContextPlanner(config=config, judge=_Eager())
    for end in range(len(history) - 60, len(history) + 1, 12):
        first, second = (
            planner.plan(history[:end], calibration_ratio=1.0, model=model) for planner in planners
        )
        assert first.encode() == second.encode()
        assert first.manifest == second.manifest


def test_layer_one_scans_only_the_candidates_it_reaches(monkeypatch):
    scanned = []
    real = _verdicts.scan_evidence

    def counting(text, words):
        scanned.append(len(text))
        return real(text, words)

    monkeypatch.setattr(_verdicts, "scan_evidence", counting)
    config = {"pruning": {"receipts": False}}
    lazily, eagerly = [], []
    for seed in range(6):
        history = _history(seed, 400)
        scanned.clear()
        plan_context(history, calibration_ratio=1.0, model=MEDIUM, config=config)
        lazily.append(list(scanned))
        scanned.clear()
        plan_context(history, calibration_ratio=1.0, model=MEDIUM, config=config, judge=_Eager())
        eagerly.append(list(scanned))
    assert all(len(mine) <= len(every) for mine, every in zip(lazily, eagerly, strict=True))
    assert all(eagerly)
    assert sum(map(len, lazily)) < sum(map(len, eagerly))
    assert sum(map(sum, lazily)) < sum(map(sum, eagerly))


class _Odd(str):
    __slots__ = ()

    def lower(self):
        raise ValueError("no case here")


@interpreted_planner_only  # compiled, the planner lower-cases the name with str's own method
def test_a_candidate_the_default_judge_cannot_judge_fails_as_before():
    history = list(_history(5, 300))
    # A tool name whose lowering raises: the judge fails, is reported, and its fallback fails alike.
    judged = plan_context(
        tuple(history), calibration_ratio=1.0, model=SMALL, judge=_Eager(), config=LAYERS
    ).state._index.evidence
    position = min(judged)
    (block,) = history[position].blocks
    odd = core.ToolResultBlock(
        tool_call_id=block.tool_call_id, tool_name=_Odd(block.tool_name), content=block.content
    )
    history[position] = _message(f"odd{position}", "tool", [odd])
    history = tuple(history)
    lazy = plan_context(history, calibration_ratio=1.0, model=SMALL, config=LAYERS)
    eager = plan_context(history, calibration_ratio=1.0, model=SMALL, judge=_Eager(), config=LAYERS)
    # The planner fails; its fallback sends the newest messages that fit, as an ok plan with a warning.
    fitted = [d for d in lazy.manifest.diagnostics if d.code == "fallback-fitted"]
    assert lazy.fallback is not None or fitted[0].detail.startswith("planner-error:")
    assert lazy.fallback == eager.fallback
    assert lazy.encode() == eager.encode()
    assert lazy.manifest.diagnostics == eager.manifest.diagnostics
    assert any(d.code == "judge-failed" for d in lazy.manifest.diagnostics)


# The judge runs on the results between the cut and the recent tail; with the default low-water mark a
# cold compaction of these histories cuts past nearly all of them, so these tests keep the mark at the
# soft limit to give the judge its region.
LAYERS = {"planner": {"compaction_low_water_ratio": 1.0}}


@pytest.mark.parametrize("seed", range(3))
def test_the_evidence_scans_made_agree_with_scanning_everything(seed):
    history = _history(seed, 400)
    lazy = plan_context(history, calibration_ratio=1.0, model=SMALL, config=LAYERS)
    eager = plan_context(history, calibration_ratio=1.0, model=SMALL, judge=_Eager(), config=LAYERS)
    lazy_cache, eager_cache = lazy.state._index.evidence, eager.state._index.evidence
    assert lazy_cache
    assert set(lazy_cache) <= set(eager_cache)
    assert all(eager_cache[p] == found for p, found in lazy_cache.items())


def _scan_word_by_word(text, words):
    """The evidence scan without guards: every word searched on its own (the reference)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    for word in words:
        start = lowered.find(word)
        while start >= 0:
            if _pruning._at_boundary(text, start, start + len(word)):
                return True
            start = lowered.find(word, start + 1)
    return False


_PIECES = [
    "fail",
    "ed",
    ":",
    "ure",
    "trace",
    "back",
    "stack",
    " ",
    "Stack Trace",
    "x",
    "TODO",
    "Error",
    "bug",
    "s",
]
_PIECES += [
    "debug",
    "tion",
    "asser",
    "exception",
    "unexpected",
    "Fixme",
    "panic",
    "\n",
    "_",
    "camelFail",
    "İ",
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=30).map("".join),
    st.one_of(
        st.none(),
        st.lists(
            st.sampled_from(
                [
                    "fail:",
                    "failed",
                    "failure",
                    "trace",
                    "stack trace",
                    "traceback",
                    "bug",
                    "todo",
                    "error",
                    "errors",
                    "tracer",
                    "x y",
                    "fail",
                ]
            ),
            min_size=1,
            max_size=6,
        ),
    ),
)
def test_guarded_evidence_search_finds_exactly_what_a_search_word_by_word_finds(text, words):
    resolved = _pruning.evidence_words(DEFAULT_EVIDENCE_WORDS if words is None else words)
    assert _pruning.scan_evidence(text, resolved) == _scan_word_by_word(text, resolved)
    assert _pruning.contains_evidence(text, resolved) == _scan_word_by_word(text, resolved)


def test_evidence_words_sharing_a_start_are_searched_behind_one_guard():
    groups = _pruning._search_groups(_pruning.evidence_words(DEFAULT_EVIDENCE_WORDS))
    assert ("fail", ("fail:", "failed")) in groups
    assert ("trace", ("stack trace", "traceback")) in groups
    # every word exactly once, and each guard a part of every word it guards
    listed = [word for _, group in groups for word in group]
    assert sorted(listed) == sorted(_pruning.evidence_words(DEFAULT_EVIDENCE_WORDS))
    assert all(guard in word for guard, group in groups for word in group)
    # a text with no guard skips the words behind it: "failed" is found only through "fail"
    assert _pruning.scan_evidence("it failed", _pruning.evidence_words(("fail:", "failed")))
    assert not _pruning.scan_evidence("it fai led", _pruning.evidence_words(("fail:", "failed")))


def _reference_verdict(candidate, read_only, write, recent=40):
    """``DefaultJudge._one`` as first written (the rounding memo must not change a single verdict)."""
    name = normalize_tool_name(candidate.tool_name)
    if name in read_only:
        keep, side_effect = 0.3, 0.02
    elif name in write:
        keep, side_effect = 0.6, 0.9
    elif name in {"bash", "shell", "sh", "exec", "run", "terminal", "command"}:
        keep, side_effect = 0.4, 0.6
    else:
        keep, side_effect = 0.45, 0.5
    reason = "tool-kind"
    freshness = max(0.0, 1.0 - candidate.messages_after / recent)
    if freshness > 0:
        keep += 0.3 * freshness
        reason = "recent"
    if len(candidate.content) > 8000:
        keep -= 0.1
        reason = "size" if reason == "tool-kind" else reason
    if candidate.later_edited:
        keep -= 0.2
        reason = "edited-later"
    elif candidate.later_reread:
        keep -= 0.15
        reason = "reread-later"
    if candidate.has_evidence or candidate.is_error:
        keep += 0.35
        reason = "evidence"
    return Verdict(
        keep_probability=round(min(1.0, max(0.0, keep)), 6),
        side_effect_probability=side_effect,
        reason=reason,
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["read", "Grep", "edit", "bash", "custom", "write_file"]),
            st.integers(-200, 200),
            st.sampled_from([10, 8000, 8001, 50_000]),
            st.booleans(),
            st.booleans(),
            st.booleans(),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_the_default_judge_rounds_every_keep_as_the_reference_does(rows):
    judge = DefaultJudge()
    candidates = [
        JudgeCandidate(
            message_id="m",
            tool_call_id="c",
            tool_name=name,
            arguments={},
            content="x" * size,
            is_error=error,
            messages_after=after,
            later_reread=reread,
            later_edited=edited,
            has_evidence=evidence,
        )
        for name, after, size, error, reread, edited, evidence in rows
    ]
    read_only = frozenset(normalize_tool_name(n) for n in DEFAULT_READ_ONLY_TOOLS)
    write = frozenset(normalize_tool_name(n) for n in DEFAULT_WRITE_TOOLS)
    expected = [_reference_verdict(c, read_only, write) for c in candidates]
    assert list(judge.judge(candidates, goal="")) == expected
    assert list(judge.judge(candidates, goal="")) == expected  # again, from the memo
