"""Token calibration end to end: usage in real Pi session files, samples in a real SQLite store, plans."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import fast_chars_v1, plan_context
from ds4_context_core.tokens import TOKEN_CALIBRATION_VERSION, calibration_prior, stable_ratio
from ds4_context_engine.commands import ContextWorkspace, context_manifest
from ds4_context_engine.commands._calibrate import (
    CalibrationScan,
    _Requests,
    pi_usage_input_tokens,
    record_calibration_samples,
)
from ds4_context_engine.commands._overhead import MessagePrefix, usage_overhead
from ds4_context_engine.pi import append_pi_entries, build_pi_context, create_pi_session, read_pi_session
from ds4_context_engine.store import CALIBRATION_RETENTION, open_derived_store

MODEL = ModelDescriptor(provider="openai", id="gpt-test", context_window=13_000, max_tokens=2_000)
PROFILE = "openai:gpt-test"
# Pi's system prompt and tool definitions: in every provider count, never in the session file
SYSTEM_AND_TOOLS = 3_000


def _turn_entries(turns, *, words=160):
    entries = []
    for turn in range(turns):
        question = " ".join(f"question{turn}-{word}" for word in range(words))
        answer = " ".join(f"answer{turn}-{word}" for word in range(words // 2))
        entries.append(("message", {"message": {"role": "user", "content": question, "timestamp": turn}}))
        entries.append(
            (
                "message",
                {
                    "message": {
                        "role": "assistant",
                        "content": [{"type": "text", "text": answer}],
                        "provider": "openai",
                        "model": "gpt-test",
                        "stopReason": "stop",
                        "timestamp": turn,
                    }
                },
            )
        )
    return entries


def _request_estimates(tmp_path, entries):
    """Our estimate of the request before each assistant message, from a draft of the same session."""
    draft = tmp_path / "draft" / "draft.jsonl"
    create_pi_session(draft, cwd=str(tmp_path), session_id="draft")
    append_pi_entries(draft, entries)
    messages = build_pi_context(read_pi_session(draft)).messages
    estimates = []
    running = 0
    for message in messages:
        if message.role == "assistant":
            estimates.append(running)
        running += fast_chars_v1(message)
    draft.unlink()
    return estimates


def pi_usage(actual, *, cached=0, output=60):
    """Usage as Pi writes it: cached input counted apart, ``totalTokens`` the sum of every count."""
    fresh = actual - cached
    return {
        "input": fresh,
        "output": output,
        "cacheRead": cached,
        "cacheWrite": 0,
        "totalTokens": fresh + output + cached,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def write_session(tmp_path, name, *, turns=12, ratio=1.3, usage=None, session_id=None):
    """A Pi session whose provider counted ``ratio`` times our estimate (plus the system prompt)."""
    entries = _turn_entries(turns)
    estimates = _request_estimates(tmp_path, entries)
    calls = iter(enumerate(estimates))
    for _, fields in entries:
        message = fields["message"]
        if message["role"] != "assistant":
            continue
        index, estimate = next(calls)
        actual = round(estimate * ratio) + SYSTEM_AND_TOOLS
        record = pi_usage(actual, cached=actual * 9 // 10) if usage is None else usage(index, actual)
        if record is not None:
            message["usage"] = record
    path = tmp_path / "sessions" / f"{name}.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id=session_id or name)
    append_pi_entries(path, entries)
    return path


def open_workspace(path, store_path):
    return ContextWorkspace.open(
        path, store_path=store_path, model=MODEL, retrieval_hits=0, task_digest=False
    )


def uncalibrated_plan(workspace):
    return plan_context(workspace.context.messages, model=MODEL, calibration_ratio=1.0)


def prior_plan(workspace, fixed_tokens=0):
    """Core's default plan: without a ratio from usage, the provider family's prior."""
    return plan_context(workspace.context.messages, model=MODEL, fixed_tokens=fixed_tokens)


def test_usage_at_1_3_times_the_estimate_calibrates_to_1_3_and_shrinks_the_plan(tmp_path):
    path = write_session(tmp_path, "calibrated")
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        plan = workspace.plan()
        calibration = workspace.calibration()
        scan = workspace.calibration_scan
        baseline = uncalibrated_plan(workspace)
        manifest = context_manifest(workspace)
        assert workspace.store is not None
        stored = workspace.store.calibration_samples(PROFILE)

    assert calibration is not None
    assert calibration.version == TOKEN_CALIBRATION_VERSION
    assert calibration.status == "calibrated"
    assert calibration.samples == 11  # 12 calls; the first has no earlier call to extend
    assert calibration.median_ratio == pytest.approx(1.3, abs=0.005)
    assert calibration.ratio == stable_ratio(calibration.median_ratio)  # 1.3 rounded up to its step
    assert scan.usage_messages == 12
    assert scan.recorded == 11
    assert scan.skipped == {"token-calibration-no-baseline": 1}
    # the system prompt cancels out: every sample measures conversation text only
    assert all(1.29 < sample.actual / sample.estimated < 1.31 for sample in stored)

    assert plan.budget.calibration_ratio == calibration.ratio
    assert plan.budget.calibration_source == "usage"
    assert baseline.budget.calibration_ratio == 1.0
    assert plan.budget.hard_limit == math.floor(baseline.budget.hard_limit / calibration.ratio)
    assert plan.budget.hard_limit < baseline.budget.hard_limit * 0.78
    assert plan.budget.target_tokens < baseline.budget.target_tokens * 0.78
    assert manifest.hard_limit == plan.budget.hard_limit
    # the session no longer fits: the calibrated plan keeps less history, within its smaller limit
    assert baseline.manifest.fallback is None
    assert plan.manifest.fallback is None
    assert plan.manifest.planned_tokens < baseline.manifest.planned_tokens
    assert plan.manifest.planned_tokens <= plan.budget.hard_limit
    assert plan.manifest.included_messages < baseline.manifest.included_messages


def test_reopening_and_refreshing_never_duplicates_samples(tmp_path):
    path = write_session(tmp_path, "twice")
    store_path = tmp_path / "state" / "derived.sqlite3"
    with open_workspace(path, store_path) as workspace:
        first = workspace.calibration()
        workspace.refresh()
        assert workspace.calibration_scan.recorded == 11
    with open_workspace(path, store_path) as workspace:
        again = workspace.calibration()
        scan = workspace.calibration_scan
        workspace.plan()
    assert first is not None
    assert again is not None
    assert again.samples == first.samples == 11
    assert again.ratio == first.ratio
    assert (scan.recorded, scan.already_recorded) == (0, 11)

    store = open_derived_store(store_path)
    try:
        assert len(store.calibration_samples(PROFILE)) == 11
        assert store.storage().calibration_samples == 11
    finally:
        store.close()


def test_appended_calls_add_only_their_own_samples(tmp_path):
    path = write_session(tmp_path, "growing", turns=6)
    store_path = tmp_path / "state" / "derived.sqlite3"
    with open_workspace(path, store_path) as workspace:
        assert workspace.calibration() is not None
        assert workspace.calibration_scan.recorded == 5
        session = workspace.session
        context = workspace.context
        estimate = sum(map(fast_chars_v1, context.messages))
        question = ("message", {"message": {"role": "user", "content": "one more " * 200, "timestamp": 9}})
        append_pi_entries(path, [question])
        estimate += fast_chars_v1(build_pi_context(read_pi_session(path)).messages[-1])
        answer = {
            "role": "assistant",
            "content": [{"type": "text", "text": "done"}],
            "provider": "openai",
            "model": "gpt-test",
            "usage": pi_usage(round(estimate * 1.3) + SYSTEM_AND_TOOLS),
            "timestamp": 10,
        }
        append_pi_entries(path, [("message", {"message": answer})])
        workspace.refresh()
        assert len(workspace.session.entries) == len(session.entries) + 2
        assert workspace.calibration_scan.recorded == 6
        calibration = workspace.calibration()
    assert calibration is not None
    assert calibration.samples == 6
    with open_workspace(path, store_path) as workspace:
        assert workspace.calibration_scan == CalibrationScan()  # nothing is read before it is needed
        calibration = workspace.calibration()
        assert workspace.calibration_scan.already_recorded == 6
    assert calibration is not None
    assert calibration.samples == 6


def test_a_session_without_usage_plans_with_the_prior(tmp_path):
    path = write_session(tmp_path, "plain", usage=lambda index, actual: None)
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        plan = workspace.plan()
        calibration = workspace.calibration()
        baseline = prior_plan(workspace)
        assert workspace.store is not None
        assert workspace.store.storage().calibration_samples == 0
        scan = workspace.calibration_scan
    assert calibration is not None
    assert (calibration.status, calibration.ratio, calibration.samples) == ("insufficient-samples", 1.0, 0)
    assert scan.usage_messages == 0
    assert scan.recorded == 0
    assert plan.budget == baseline.budget
    assert msgspec.json.encode(plan.manifest) == msgspec.json.encode(baseline.manifest)


def test_too_few_samples_plan_with_the_prior(tmp_path):
    path = write_session(tmp_path, "short", turns=4)  # 3 samples: under core's minimum of 5
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        plan = workspace.plan()
        calibration = workspace.calibration()
        baseline = prior_plan(workspace, fixed_tokens=plan.budget.fixed_tokens)
    assert calibration is not None
    assert (calibration.status, calibration.samples) == ("insufficient-samples", 3)
    assert plan.budget.fixed_tokens > 0  # measured from the usage, with the prior
    assert plan.budget == baseline.budget
    assert plan.budget.calibration_source == "prior"


def test_without_a_store_nothing_is_sampled(tmp_path):
    path = write_session(tmp_path, "nostore")
    with ContextWorkspace.open(path, no_store=True, model=MODEL) as workspace:
        assert workspace.calibration() is None
        budget = workspace.plan().budget
        # no usage to learn from: the provider family's prior
        assert (budget.calibration_ratio, budget.calibration_source) == (
            calibration_prior(MODEL).ratio,
            "prior",
        )


MALFORMED = (
    {"input": -5, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": -4},
    {"output": 60, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 60},  # no input
    {"input": True, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2},
    {"input": "1200", "output": 1},
    {"input": 1200.0, "output": 1},
    {"input": 10**12, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 10**12 + 1},
    {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0},
    {"input": 900, "output": 10, "cacheRead": 500, "cacheWrite": 0, "totalTokens": 7},  # fits no reading
    {"input": 900, "output": 10, "cacheRead": -1, "cacheWrite": 0, "totalTokens": 909},
    [1200, 60],
    None,
)


@pytest.mark.parametrize("usage", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_usage_is_not_a_count(usage):
    assert pi_usage_input_tokens(usage) is None


def test_both_cache_conventions_give_the_whole_prompt():
    assert pi_usage_input_tokens(pi_usage(1000, cached=900)) == 1000
    # input already holds the cached part, as some writers record it
    folded = {"input": 1000, "output": 60, "cacheRead": 700, "cacheWrite": 200, "totalTokens": 1060}
    assert pi_usage_input_tokens(folded) == 1000
    assert pi_usage_input_tokens({"input": 1000, "output": 60}) == 1000


def test_malformed_usage_is_skipped_and_the_rest_still_calibrates(tmp_path):
    broken = {2: 0, 5: 6, 7: 2, 9: 7}  # call index -> a MALFORMED record

    def usage(index, actual):
        if index in broken:
            return MALFORMED[broken[index]]
        return pi_usage(actual, cached=actual // 2)

    path = write_session(tmp_path, "malformed", turns=16, usage=usage)
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        plan = workspace.plan()
        calibration = workspace.calibration()
        scan = workspace.calibration_scan
        assert workspace.store is not None
        stored = workspace.store.calibration_samples(PROFILE)
    assert scan.usage_messages == 16
    assert scan.skipped["token-calibration-sample-invalid"] == 4
    # a call after a skipped one extends the last good call: that pair spans two steps and still counts
    assert scan.recorded == 11
    assert len(stored) == 11
    assert all(sample.estimated > 0 and sample.actual > 0 for sample in stored)
    assert all(1.29 < sample.actual / sample.estimated < 1.31 for sample in stored)
    assert calibration is not None
    assert calibration.median_ratio == pytest.approx(1.3, abs=0.005)
    assert plan.budget.calibration_ratio == calibration.ratio


def test_samples_are_kept_per_model(tmp_path):
    path = write_session(tmp_path, "other-model")
    other = ModelDescriptor(provider="anthropic", id="claude-test", context_window=13_000, max_tokens=2_000)
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        calibration = workspace.calibration(other)
        plan = workspace.plan(model=other)
    assert calibration is not None
    assert calibration.samples == 0
    assert (plan.budget.calibration_ratio, plan.budget.calibration_source) == (1.45, "prior")  # Claude


def test_only_the_newest_retained_calls_are_sampled_once(tmp_path):
    turns = CALIBRATION_RETENTION + 15
    entries = []
    for turn in range(turns):
        entries.append(
            ("message", {"message": {"role": "user", "content": f"q{turn} " * 40, "timestamp": turn}})
        )
        entries.append(
            (
                "message",
                {
                    "message": {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "ok"}],
                        "provider": "openai",
                        "model": "gpt-test",
                        "usage": pi_usage(1000 + 100 * turn),
                        "timestamp": turn,
                    }
                },
            )
        )
    path = tmp_path / "sessions" / "long.jsonl"
    create_pi_session(path, cwd=str(tmp_path), session_id="long")
    append_pi_entries(path, entries)
    store_path = tmp_path / "state" / "derived.sqlite3"
    for _ in range(2):
        with open_workspace(path, store_path) as workspace:
            calibration = workspace.calibration()
    assert calibration is not None
    assert calibration.samples == CALIBRATION_RETENTION


FIXTURES = Path(__file__).parent / "fixtures" / "pi"


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.jsonl")))
def test_each_request_estimate_is_the_context_before_its_call(name):
    """The shortcut through the newest branch gives what building each call's own context gives."""
    session = read_pi_session(FIXTURES / name)
    requests = _Requests(session)
    checked = 0
    for entry in session.entries:
        if entry.parent_id is None or session.entry(entry.parent_id) is None:
            continue
        messages = build_pi_context(session, entry.parent_id).messages
        expected = (tuple(message.id for message in messages), sum(map(fast_chars_v1, messages)))
        assert requests(entry) == expected, entry.id
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.jsonl")))
def test_fixture_sessions_are_scanned_without_errors(tmp_path, name):
    store = open_derived_store(tmp_path / "derived.sqlite3")
    try:
        session = read_pi_session(FIXTURES / name)
        first = record_calibration_samples(store, session)
        second = record_calibration_samples(store, session)
        profiles = {
            f"{message['provider']}:{message['model']}"
            for entry in session.entries
            if isinstance(message := entry.data.get("message"), dict) and "provider" in message
        }
        stored = sum(len(store.calibration_samples(profile)) for profile in profiles)
    finally:
        store.close()
    assert first.recorded == stored
    assert (second.recorded, second.already_recorded) == (0, first.recorded)
    assert sum(first.skipped.values()) + first.recorded == first.usage_messages


def test_older_pi_usage_without_total_tokens_calibrates(tmp_path):
    """Older Pi files carry no ``totalTokens``: input + cacheRead + cacheWrite is still the prompt."""

    def older(index, actual):
        record = pi_usage(actual, cached=actual * 9 // 10)
        record["cacheWrite"], record["cacheRead"] = 200, record["cacheRead"] - 200
        del record["totalTokens"]
        return record

    path = write_session(tmp_path, "older", usage=older)
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        calibration = workspace.calibration()
        plan = workspace.plan()
        scan = workspace.calibration_scan
    assert calibration is not None
    assert (calibration.status, calibration.samples) == ("calibrated", 11)
    assert "token-calibration-sample-invalid" not in scan.skipped
    assert calibration.median_ratio == pytest.approx(1.3, abs=0.005)
    assert (plan.budget.calibration_ratio, plan.budget.calibration_source) == (calibration.ratio, "usage")


def test_the_system_prompt_and_tools_are_budgeted_from_the_usage_the_session_recorded(tmp_path):
    path = write_session(tmp_path, "overhead")
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        plan = workspace.plan()
        manifest = context_manifest(workspace)
        ratio = plan.budget.calibration_ratio
        largest_request = sum(map(fast_chars_v1, workspace.context.messages))
        workspace.fixed_tokens = 0  # a host that says its requests carry nothing else
        unbudgeted = workspace.plan()
        unbudgeted_source = workspace.fixed_tokens_source
        workspace.fixed_tokens = 1_234
        explicit = context_manifest(workspace)
    # measured in the planner's units: what the provider counted beyond the history, over the ratio the
    # plan uses (1.35: the usage's 1.3 stepped up, so the history's share is counted a little high)
    low = (SYSTEM_AND_TOOLS - (ratio - 1.3) * largest_request) / ratio
    assert low <= plan.budget.fixed_tokens < SYSTEM_AND_TOOLS / ratio + 256
    assert (manifest.fixed_tokens, manifest.fixed_tokens_source) == (plan.budget.fixed_tokens, "usage")
    assert plan.manifest.planned_tokens == plan.budget.total_tokens <= plan.budget.hard_limit
    # the real request (history in the provider's tokens plus what Pi adds) leaves the output reserve
    real = ratio * (plan.budget.total_tokens - plan.budget.fixed_tokens) + SYSTEM_AND_TOOLS
    assert real <= MODEL.context_window - plan.budget.output_reserve
    assert (unbudgeted.budget.fixed_tokens, unbudgeted_source) == (0, "explicit")
    assert unbudgeted.budget.total_tokens == plan.budget.total_tokens - plan.budget.fixed_tokens
    assert (explicit.fixed_tokens, explicit.fixed_tokens_source) == (1_234, "explicit")


def test_a_session_without_usage_budgets_no_overhead_and_says_so(tmp_path):
    path = write_session(tmp_path, "no-usage", usage=lambda index, actual: None)
    with open_workspace(path, tmp_path / "state" / "derived.sqlite3") as workspace:
        manifest = context_manifest(workspace)
    assert (manifest.fixed_tokens, manifest.fixed_tokens_source) == (0, "none")


def test_the_overhead_kept_from_call_to_call_equals_one_measured_afresh(tmp_path):
    path = write_session(tmp_path, "incremental")
    session = read_pi_session(path)
    leaves = [entry.id for entry in session.entries if entry.type == "message"]
    kept = MessagePrefix()
    ratio = calibration_prior(MODEL).ratio
    # a branch growing by appends, then a leaf further back (another branch view): both as a fresh pass
    for leaf in [*leaves[len(leaves) // 2 :: 3], leaves[-1], leaves[len(leaves) // 3]]:
        context = build_pi_context(session, leaf)
        fresh = usage_overhead(session, context, MODEL, ratio)
        assert usage_overhead(session, context, MODEL, ratio, prefix=kept) == fresh
        assert kept.ids == [message.id for message in context.messages]
    assert fresh is not None
