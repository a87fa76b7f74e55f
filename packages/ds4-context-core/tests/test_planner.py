import copy
import threading

import msgspec
import pytest

import ds4_context_core as core
from ds4_context_core.config import Ds4ContextConfig
from ds4_context_core.planner import (
    PLAN_FALLBACK_CODES,
    ContextPlanner,
    PlanRestoreError,
    SupplementalItem,
    plan_context,
    restore,
)

SESSION = "s"


def _message(entry, role, *blocks, pinned=None):
    return core.CanonicalMessage(
        id=f"{SESSION}:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=blocks,
        provenance=core.Provenance(
            source="runtime-session", session_id=SESSION, entry_id=entry, runtime_id="r"
        ),
        flags=core.MessageFlags(pinned=pinned),
    )


def user(entry, text="please help"):
    return _message(entry, "user", core.TextBlock(text=text))


def say(entry, text="ok", pinned=None):
    return _message(entry, "assistant", core.TextBlock(text=text), pinned=pinned)


def call(entry, *ids, name="read", path="src/a.py", note="looking"):
    blocks = [core.TextBlock(text=note)] if note else []
    blocks += [core.ToolCallBlock(id=i, name=name, arguments={"path": path}) for i in ids]
    return _message(entry, "assistant", *blocks)


def result(entry, call_id, content="x", name="read", error=False):
    block = core.ToolResultBlock(tool_call_id=call_id, tool_name=name, content=content, is_error=error)
    return _message(entry, "tool", block)


def model(window=100_000, max_tokens=4_000):
    return core.ModelDescriptor(provider="p", id="m", context_window=window, max_tokens=max_tokens)


# reserve 100 and margin 50: a 1,000-token window has a hard limit of 850
TIGHT = {"budget": {"minimum_output_reserve": 100, "preferred_output_reserve": 100, "safety_margin_min": 50}}


def flat(tokens):
    """An estimator that charges the same for every message: budgets become easy to check by hand."""
    return lambda message: tokens


def provider_sees_no_orphan(messages):
    called, answered = set(), set()
    for message in messages:
        for block in message.blocks:
            if isinstance(block, core.ToolCallBlock):
                called.add(block.id)
            elif isinstance(block, core.ToolResultBlock):
                if block.tool_call_id not in called:
                    return False
                answered.add(block.tool_call_id)
    return called == answered


def test_budget_follows_the_reference_formula():
    plan = plan_context([user("u")], model=model(100_000, 4_000), calibration_ratio=1.0)
    budget = plan.budget
    # reserve = max(min(25000, 32768, 4000), min(1024, 4000)) = 4000; margin = min(8192, max(1024, 2000))
    assert (budget.output_reserve, budget.safety_margin) == (4_000, 2_000)
    # hard = min(100000 - 4000 - 2000, floor(0.9 * 100000)) = 90000; soft 80000; target 70000
    assert (budget.hard_limit, budget.soft_limit, budget.target_tokens) == (90_000, 80_000, 70_000)
    assert budget.calibration_source == "explicit"
    # adaptive ceilings for a window <= 128k: 24k recent tail, 8k history, 12k project
    assert (budget.recent_tail_ceiling, budget.retrieved_history_ceiling, budget.project_snippet_ceiling) == (
        24_000,
        8_000,
        12_000,
    )


def test_calibration_only_lowers_limits():
    lowered = plan_context([user("u")], model=model(), calibration_ratio=2.0).budget
    assert lowered.hard_limit == 45_000
    raised = plan_context([user("u")], model=model(), calibration_ratio=0.5).budget
    assert raised.hard_limit == 90_000


def test_small_history_is_sent_whole_in_order_with_metadata():
    history = [user("u1"), call("a1", "t1"), result("r1", "t1"), say("s1"), user("u2")]
    plan = plan_context(history, model=model(), fixed_tokens=500)
    assert plan.ok
    assert plan.messages == tuple(history)
    assert [item.original_index for item in plan.items] == [0, 1, 2, 3, 4]
    assert plan.items[-1].kind == "current-request"
    assert plan.items[-1].priority == 1000
    assert plan.items[1].group_id == plan.items[2].group_id
    assert plan.items[1].group_id.startswith("runtime-tool-group:")
    assert plan.items[3].turn_id == "s:u1"
    assert plan.budget.total_tokens == 500 + sum(core.estimate_message_tokens(m) for m in history)
    assert plan.manifest.saved_tokens == 0


def test_orphans_and_pending_calls_are_left_out_and_interrupted_calls_are_sent_as_interrupted():
    history = [
        user("u1"),
        result("orphan", "never-called"),
        call("a1", "t1", "t2"),
        result("r1", "t1"),  # t2 never answered before the user moved on: an interrupted call
        say("s1"),
        user("u2"),
        call("a2", "t3"),  # pending at the end: may be in flight
    ]
    plan = plan_context(history, model=model())
    assert plan.ok
    assert [m.id for m in plan.messages] == ["s:u1", "s:a1", "s:r1", "s:s1", "s:u2"]
    assert provider_sees_no_orphan(plan.messages)
    sent = plan.messages[1]
    assert sent.tool_call_ids == ("t1",)  # the answered call stays with its result
    note = " ".join(b.text for b in sent.blocks if isinstance(b, core.TextBlock))
    assert "was interrupted before it returned a result" in note
    assert core.restore(plan, "s:a1") == (history[2],)
    reasons = {exclusion.reason: exclusion.message_ids for exclusion in plan.manifest.exclusions}
    assert reasons["tool-result-orphaned"] == ("s:orphan",)
    assert reasons["tool-call-incomplete"] == ("s:a2",)


def test_result_sent_before_its_call_is_treated_as_orphaned():
    history = [user("u"), result("early", "t1"), call("late", "t1"), user("u2")]
    plan = plan_context(history, model=model())
    assert [m.id for m in plan.messages] == ["s:u", "s:u2"]
    assert provider_sees_no_orphan(plan.messages)


def test_input_is_never_mutated_and_equal_inputs_give_equal_bytes():
    history = [user("u1"), call("a1", "t1"), result("r1", "t1", "y" * 5000), say("s1"), user("u2")]
    snapshot = copy.deepcopy(history)
    encoded = msgspec.json.encode(history)
    config = {"budget": {"hard_limit_ratio": 0.9}}
    first = plan_context(history, model=model(2_000, 200), config=config)
    second = plan_context(copy.deepcopy(history), model=model(2_000, 200), config=config)
    assert history == snapshot
    assert msgspec.json.encode(history) == encoded
    assert first.encode() == second.encode()


def test_parallel_calls_are_never_split_when_the_window_is_tight():
    history = [user("u1")]
    for i in range(30):
        history += [call(f"a{i}", f"t{i}a", f"t{i}b"), result(f"r{i}a", f"t{i}a"), result(f"r{i}b", f"t{i}b")]
    history.append(user("u2"))
    # 100 tokens per message, hard limit 1000 - 100 - 50 = 850 -> at most 8 messages
    config = TIGHT
    plan = plan_context(
        history, model=model(1_000, None), config=config, estimator=flat(100), calibration_ratio=1.0
    )
    assert plan.ok
    assert plan.budget.hard_limit == 850
    assert plan.budget.total_tokens <= 850
    assert provider_sees_no_orphan(plan.messages)
    ids = [m.id for m in plan.messages]
    for i in range(30):
        parts = {f"s:a{i}", f"s:r{i}a", f"s:r{i}b"} & set(ids)
        assert len(parts) in (0, 3)
    assert ids[-1] == "s:u2"
    assert plan.manifest.exclusions[0].reason == "before-cut"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"model": model(0)}, "window-invalid"),
        ({"model": model(-5)}, "window-invalid"),
        ({"model": "not a model"}, "window-invalid"),
        ({"model": model(1_000, 1_000)}, "window-too-small"),  # reserve and margin leave nothing
        ({"model": model(100)}, "window-too-small"),
        ({"model": model(1)}, "window-too-small"),
        ({"model": model(), "fixed_tokens": -1}, "fixed-tokens-invalid"),
        # Wrongly typed arguments fall back too, in both builds: the planner's entry points are never
        # compiled, because compiled code would raise a TypeError at its boundary instead.
        ({"model": model(), "fixed_tokens": 1.5}, "fixed-tokens-invalid"),
        ({"model": model(), "fixed_tokens": "10"}, "fixed-tokens-invalid"),
        ({"model": model(), "fixed_tokens": None}, "fixed-tokens-invalid"),
        ({"model": model(), "fixed_tokens": True}, "fixed-tokens-invalid"),
    ],
)
def test_impossible_budgets_fail_open_with_a_precise_code(kwargs, code):
    history = [user("u1"), call("a1", "t1"), result("r1", "t1"), user("u2"), call("a2", "t9")]
    before = copy.deepcopy(history)
    plan = plan_context(history, **kwargs)
    assert code in PLAN_FALLBACK_CODES
    assert plan.fallback is not None
    assert plan.fallback.code == code
    window = getattr(kwargs["model"], "context_window", None)
    if code.startswith("window-") and window is not None:
        # a window that leaves no room (or none at all) fits nothing: nothing is sent
        assert plan.fallback.mode == "blocked"
        assert plan.messages == ()
    else:
        assert plan.fallback.mode == "native"
        # native context, minus the pieces a provider would reject
        assert [m.id for m in plan.messages] == ["s:u1", "s:a1", "s:r1", "s:u2"]
    assert history == before


def test_history_without_a_current_request_falls_back():
    plan = plan_context([say("s1"), call("a1", "t1"), result("r1", "t1")], model=model())
    assert plan.fallback.code == "current-request-missing"
    assert [m.id for m in plan.messages] == ["s:s1", "s:a1", "s:r1"]


def test_current_request_larger_than_the_window_is_trimmed_to_fit():
    history = [say("s"), user("u", "z" * 400_000)]
    plan = plan_context(history, model=model())
    assert plan.ok
    assert plan.fallback is None
    assert plan.budget.total_tokens <= plan.budget.hard_limit
    assert plan.messages[-1].id == "s:u"
    assert len(plan.messages[-1].blocks[0].text) < 400_000
    assert restore(plan, "s:u") == (history[1],)


def test_old_message_larger_than_the_window_is_simply_dropped():
    history = [user("u1", "port the parser"), say("huge", "z" * 400_000), user("u2")]
    plan = plan_context(history, model=model())
    assert plan.ok
    # of the history only the current request is sent; the task digest in front keeps the first request
    assert [m.id for m in plan.messages] == ["ds4-supplement:ds4-core-task-digest", "s:u2"]
    digest = plan.messages[0].blocks[0].text
    assert "Original request: port the parser" in digest
    assert "zzz" not in digest
    assert plan.budget.total_tokens <= plan.budget.hard_limit


def test_pins_above_their_cap_fall_back():
    history = [user("u1", "p" * 400_000), say("s1"), user("u2")]  # 100k tokens; cap 0.25 * 360k
    plan = plan_context(history, model=model(400_000, 4_000), pins=["s:u1"])
    assert plan.fallback.code == "pins-exceed-cap"


def test_pins_survive_the_cut_in_front_of_the_window():
    history = [user("u0"), say("keep", "remember this", pinned=True)]
    history += [say(f"s{i}") for i in range(50)]
    history += [user("u1"), say("label"), user("u2")]
    config = TIGHT
    plan = plan_context(
        history,
        model=model(1_000, None),
        config=config,
        estimator=flat(100),
        pins=["s:label"],
        calibration_ratio=1.0,
    )
    ids = [m.id for m in plan.messages]
    # in front of the window: the task digest of what the cut left out, then the pin
    assert ids[:2] == ["ds4-supplement:ds4-core-task-digest", "s:keep"]
    assert "s:label" in ids
    assert ids[-1] == "s:u2"
    kinds = {item.message_id: (item.kind, item.reason) for item in plan.items}
    assert kinds["s:keep"] == ("pin", "persistent-pin")
    assert kinds["s:label"] == ("pin", "pin-label")
    unknown = plan_context(history, model=model(), pins=["s:nope"])
    assert [d.code for d in unknown.manifest.diagnostics] == ["pin-unknown"]


@pytest.mark.parametrize(
    ("history", "code"),
    [
        ([user("u1"), user("u1")], "history-message-id-duplicate"),
        ([user("u1"), {"id": "x"}], "history-invalid"),
        ("not a history", "history-invalid"),
    ],
)
def test_bad_history_falls_back_without_raising(history, code):
    plan = plan_context(history, model=model())
    assert plan.fallback.code == code
    assert plan.fallback.mode == "native"


def _malformed(field, value):
    """A canonical message whose field holds what its type forbids (built around validation)."""
    history = [user("u0"), call("a1", "c1"), result("t1", "c1"), say("a2"), user("u2")]
    target = {"blocks": 3, "id": 3, "role": 3, "flags": 3, "tool_call_id": 2, "arguments": 1}[field]
    message = history[target]
    if field in {"tool_call_id", "arguments"}:
        (block,) = (b for b in message.blocks if not isinstance(b, core.TextBlock))
        odd = msgspec.structs.replace(block, **{field: value})
        message = msgspec.structs.replace(
            message, blocks=tuple(odd if b is block else b for b in message.blocks)
        )
    else:
        message = msgspec.structs.replace(message, **{field: value})
    history[target] = message
    return tuple(history)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("blocks", None),
        ("blocks", 5),
        ("id", 7),
        ("id", ["unhashable"]),
        ("role", None),
        ("flags", None),
        ("tool_call_id", 9),
        ("arguments", "not a mapping"),
    ],
)
def test_a_message_whose_fields_break_their_types_never_raises(field, value):
    # Regression: a fallback plan used to raise while checking whether such a history could go out as it is.
    plan = plan_context(_malformed(field, value), model=model())
    if plan.fallback is not None:
        assert plan.fallback.code in PLAN_FALLBACK_CODES
        assert plan.fallback.mode == "native"
    assert provider_sees_no_orphan(plan.messages)


def test_failing_sanitizer_fails_closed_and_failing_estimator_fails_open():
    history = [user("u1"), user("u2")]

    def broken_sanitizer(message):
        raise RuntimeError("secret sk-123 leaked in message")

    closed = plan_context(history, model=model(), sanitizer=broken_sanitizer)
    assert (closed.fallback.mode, closed.fallback.code) == ("blocked", "privacy-sanitizer-failed")
    assert closed.messages == ()
    assert b"sk-123" not in closed.encode()

    def broken_estimator(message):
        raise ValueError("boom")

    opened = plan_context(history, model=model(), estimator=broken_estimator)
    assert (opened.fallback.mode, opened.fallback.code) == ("native", "token-estimator-failed")
    assert [m.id for m in opened.messages] == ["s:u1", "s:u2"]


def test_sanitizer_output_is_what_the_provider_sees():
    def redact(message):
        blocks = tuple(
            core.TextBlock(text=b.text.replace("hunter2", "[redacted]"))
            if isinstance(b, core.TextBlock)
            else b
            for b in message.blocks
        )
        return msgspec.structs.replace(message, blocks=blocks)

    history = [user("u1", "password hunter2")]
    plan = plan_context(history, model=model(), sanitizer=redact)
    assert plan.messages[0].blocks[0].text == "password [redacted]"
    assert history[0].blocks[0].text == "password hunter2"


# Layer 1 and 2 run between the cut and the recent tail. With the default low-water mark a compaction of
# this long a history in a 40k window goes so deep that the cut does most of the work; these tests pin the
# mark at the soft limit (the behaviour before it existed) to look at the layers themselves.
LAYERS = {"planner": {"compaction_low_water_ratio": 1.0}}


def _coding_history(steps, size=3_000):
    history = [user("u0", "fix the failing test")]
    for i in range(steps):
        history.append(call(f"a{i}", f"t{i}", path=f"src/m{i % 7}.py"))
        history.append(result(f"r{i}", f"t{i}", f"line {i}\n" * (size // 7)))
    return history


def test_layer1_trims_old_results_and_restore_returns_the_original():
    history = [*_coding_history(60), user("u1", "now add a test")]
    plan = plan_context(history, model=model(40_000, 4_000), config=LAYERS)
    assert plan.ok
    trimmed = [item for item in plan.items if item.kind == "trimmed-tool-result"]
    assert trimmed
    item = trimmed[0]
    message = plan.messages[plan.items.index(item)]
    assert message.flags.synthetic is True
    assert "characters trimmed" in message.blocks[0].content
    assert len(message.blocks[0].content) < 1_000
    original = history[item.original_index]
    assert restore(plan, item.message_id) == (original,)
    assert provider_sees_no_orphan(plan.messages)
    assert plan.budget.total_tokens <= plan.budget.hard_limit


def test_layer2_receipts_replace_read_only_steps_and_restore_them():
    history = [*_coding_history(60), user("u1", "now add a test")]
    # trimming disabled in effect (huge head), so receipts must do the work
    config = {"pruning": {"head_chars": 100_000}, **LAYERS}
    plan = plan_context(history, model=model(40_000, 4_000), config=config, calibration_ratio=1.0)
    assert plan.ok
    receipts = [item for item in plan.items if item.kind == "receipt"]
    assert receipts
    receipt_item = receipts[0]
    text = plan.messages[plan.items.index(receipt_item)].blocks[0].text
    assert text.startswith("[ds4-context receipt]")
    assert "- read src/" in text
    # without a restore tool the host offers, the receipt names no id the model could not use
    assert receipt_item.message_id not in text
    offered = {"pruning": {"head_chars": 100_000, "restore_tool": "ds4_restore"}, **LAYERS}
    again = plan_context(history, model=model(40_000, 4_000), config=offered, calibration_ratio=1.0)
    offered_item = next(item for item in again.items if item.kind == "receipt")
    offered_text = again.messages[again.items.index(offered_item)].blocks[0].text
    assert f'call ds4_restore with id "{offered_item.message_id}"' in offered_text
    originals = restore(plan, receipt_item.message_id)
    assert tuple(m.id for m in originals) == receipt_item.source_ids
    assert all(m in history for m in originals)
    record = next(r for r in plan.manifest.receipts if r.receipt_id == receipt_item.message_id)
    assert record.compaction_id == plan.manifest.compaction.compaction_id
    assert record.original_message_ids == receipt_item.source_ids
    assert provider_sees_no_orphan(plan.messages)


def test_evidence_and_write_tools_are_never_receipted():
    history = [user("u0")]
    for i in range(40):
        history.append(call(f"a{i}", f"t{i}"))
        body = ("Traceback: AssertionError\n" if i % 2 else "") + "data\n" * 700
        history.append(result(f"r{i}", f"t{i}", body))
        history.append(call(f"e{i}", f"w{i}", name="edit"))
        history.append(result(f"x{i}", f"w{i}", "edited " * 400, name="edit"))
    history.append(user("u1"))
    plan = plan_context(history, model=model(40_000, 4_000), config={"pruning": {"head_chars": 100_000}})
    for item in plan.items:
        if item.kind == "receipt":
            for source_id in item.source_ids:
                original = history[[m.id for m in history].index(source_id)]
                for block in original.blocks:
                    if isinstance(block, core.ToolResultBlock):
                        assert "Traceback" not in block.content
                        assert block.tool_name == "read"


def test_dry_run_reports_but_changes_nothing():
    history = [*_coding_history(60), user("u1")]
    plan = plan_context(history, model=model(40_000, 4_000), config={"pruning": {"dry_run": True}, **LAYERS})
    assert plan.ok
    assert plan.manifest.compaction.dry_run is True
    assert plan.manifest.compaction.trimmed_message_ids
    assert not [item for item in plan.items if item.kind in ("trimmed-tool-result", "receipt")]
    # every history message is sent as it is (the task digest in front is a supplement, not history)
    assert all(
        message in history
        for message, item in zip(plan.messages, plan.items, strict=True)
        if item.kind != "summary"
    )


def test_never_prune_tools_are_kept_verbatim():
    history = [*_coding_history(60), user("u1")]
    config = {"pruning": {"never_prune_tools": ["READ"]}}
    plan = plan_context(history, model=model(40_000, 4_000), config=config)
    assert not [item for item in plan.items if item.kind == "trimmed-tool-result"]
    gates = {gate.gate: gate.count for gate in plan.manifest.compaction.gate_exclusions}
    assert gates["never-prune"] > 0


def test_failing_judge_is_reported_and_the_default_judge_takes_over():
    class BrokenJudge:
        def judge(self, candidates, *, goal):
            raise RuntimeError("remote judge down")

    history = [*_coding_history(60), user("u1")]
    plan = plan_context(history, model=model(40_000, 4_000), judge=BrokenJudge(), config=LAYERS)
    assert plan.ok
    assert "judge-failed" in [d.code for d in plan.manifest.diagnostics]
    assert [item for item in plan.items if item.kind == "trimmed-tool-result"]


def test_unknown_restore_id_raises_a_coded_error():
    plan = plan_context([user("u1")], model=model())
    with pytest.raises(PlanRestoreError) as caught:
        restore(plan, "s:missing")
    assert caught.value.code == "plan-restore-unknown-id"
    assert restore(plan, "s:u1") == (plan.messages[0],)


def test_supplements_are_placed_by_kind_and_priority_within_ceilings():
    history = [user("u1"), say("s1"), user("u2")]
    supplemental = [
        SupplementalItem(id="sum", kind="summary", text="earlier: set up the repo"),
        SupplementalItem(id="mem", kind="memory", text="user prefers uv"),
        SupplementalItem(id="ret", kind="retrieved-history", text="old excerpt"),
        SupplementalItem(id="big", kind="project-snippet", text="q" * 100_000),
        SupplementalItem(id="", kind="memory", text="bad id"),
    ]
    plan = plan_context(history, model=model(), supplemental=supplemental)
    ids = [m.id for m in plan.messages]
    assert ids == [
        "ds4-supplement:mem",
        "ds4-supplement:sum",
        "s:u1",
        "s:s1",
        "ds4-supplement:ret",
        "s:u2",
    ]
    assert all(plan.messages[i].flags.synthetic for i in (0, 1, 4))
    reasons = {e.reason for e in plan.manifest.exclusions}
    assert {"supplement-over-ceiling", "supplement-invalid"} <= reasons


def test_config_problems_become_diagnostics_not_errors():
    plan = plan_context(
        [user("u1")],
        model=model(),
        config={"budget": {"hard_limit_ratio": 7}, "nope": 1},
        calibration_ratio=1.0,
    )
    assert plan.ok
    assert plan.budget.hard_limit == 90_000
    details = sorted(d.detail for d in plan.manifest.diagnostics)
    assert details == ["config-key-unknown at nope", "config-value-invalid at budget.hard_limit_ratio"]


def test_append_only_steps_share_the_whole_previous_plan_as_prefix():
    planner = ContextPlanner()
    history = [user("u1")]
    previous = planner.plan(history, model=model())
    for i in range(20):
        history = [*history, call(f"a{i}", f"t{i}"), result(f"r{i}", f"t{i}", "z" * 40)]
        plan = planner.plan(history, model=model())
        assert plan.manifest.shared_prefix_messages == len(previous.messages)
        assert plan.manifest.shared_prefix_tokens == sum(item.tokens for item in previous.items)
        previous = plan


def test_compactions_are_batched_and_the_prefix_is_mostly_shared():
    planner = ContextPlanner()
    history = [user("u0")]
    ratios = []
    compactions = 0
    for i in range(400):
        history = [*history, call(f"a{i}", f"t{i}", path=f"f{i % 9}"), result(f"r{i}", f"t{i}", "w" * 1_600)]
        if i % 10 == 9:
            history = [*history, user(f"u{i}")]
        plan = planner.plan(history, model=model(40_000, 4_000))
        assert plan.ok
        assert plan.budget.total_tokens <= plan.budget.hard_limit
        assert provider_sees_no_orphan(plan.messages)
        total = sum(item.tokens for item in plan.items)
        ratios.append(plan.manifest.shared_prefix_tokens / total)
        compactions += plan.manifest.compaction is not None
    assert 2 <= compactions <= 40
    assert sum(ratios[20:]) / len(ratios[20:]) >= 0.85


def test_replanning_from_an_older_state_gives_the_same_plan():
    history = [*_coding_history(40), user("u1")]
    first = plan_context(history, model=model(40_000, 4_000))
    longer = [*history, call("x", "tx"), result("y", "tx")]
    plan_context(longer, model=model(40_000, 4_000), state=first.state)
    again = plan_context(longer, model=model(40_000, 4_000), state=first.state)
    fresh_second = plan_context(longer, model=model(40_000, 4_000), state=first.state)
    assert again.encode() == fresh_second.encode()
    rewritten = [user("other"), *history[1:]]
    reset = plan_context(rewritten, model=model(40_000, 4_000), state=first.state)
    assert "state-reset" in [d.code for d in reset.manifest.diagnostics]


def test_snapshot_input_is_accepted():
    messages = (user("u1"), call("a", "t"), result("r", "t"), user("u2"))
    snapshot = core.RuntimeHistorySnapshot(
        runtime_id="r",
        session_id=SESSION,
        revision="0",
        project_root="/p",
        messages=messages,
        tool_atomic_groups=core.build_canonical_tool_atomic_groups(messages),
    )
    assert plan_context(snapshot, model=model()).messages == messages


def test_default_config_round_trips_through_its_json_schema():
    schema = Ds4ContextConfig.model_json_schema()
    assert set(schema["properties"]) >= {"budget", "planner", "pruning"}


def test_receipts_of_local_only_steps_stay_local_only_and_supplements_are_plain_synthetic():
    history = [*_coding_history(60), user("u1", "next")]
    config = {"pruning": {"head_chars": 100_000}, **LAYERS}
    supplemental = [SupplementalItem(id="m", kind="memory", text="note")]
    first = plan_context(
        history, model=model(40_000, 4_000), config=config, supplemental=supplemental, calibration_ratio=1.0
    )
    receipted = next(item for item in first.items if item.kind == "receipt").source_ids[1]
    position = [m.id for m in history].index(receipted)
    history[position] = msgspec.structs.replace(history[position], flags=core.MessageFlags(local_only=True))
    plan = plan_context(
        history, model=model(40_000, 4_000), config=config, supplemental=supplemental, calibration_ratio=1.0
    )
    kinds = set()
    for message, item in zip(plan.messages, plan.items, strict=True):
        kinds.add(item.kind)
        if item.kind == "receipt":
            assert message.flags.local_only is (True if receipted in item.source_ids else None)
        if item.kind == "memory":
            assert message.flags == core.MessageFlags(synthetic=True)
    assert {"receipt", "memory"} <= kinds


def test_restore_resolves_a_receipt_over_results_that_layer_1_had_trimmed():
    history = [*_coding_history(60), user("u1", "next")]
    # trimming saves little here, so the same compaction goes on to receipt steps it already trimmed
    # (without the digest's reserve, which changes how much the compaction needs to free)
    config = {
        "pruning": {"head_chars": 2_000, "tail_chars": 0},
        "planner": {"compaction_low_water_ratio": 1.0, "task_digest": False},
    }
    plan = plan_context(history, model=model(40_000, 4_000), config=config)
    assert plan.ok
    trimmed = set(plan.manifest.compaction.trimmed_message_ids)
    receipts = [item for item in plan.items if item.kind == "receipt" and set(item.source_ids) & trimmed]
    assert receipts
    originals = restore(plan, receipts[0].message_id)
    by_id = {m.id: m for m in history}
    for original in originals:
        assert original is by_id[original.id]  # the canonical message, not the layer-1 copy
    restored = next(m for m in originals if m.id in trimmed)
    assert restore(plan, restored.id) == (by_id[restored.id],)
    assert "characters trimmed" not in restored.blocks[0].content


def test_one_state_shared_by_threads_gives_the_same_plans_as_sequential_calls():
    base = [*_coding_history(50), user("u1")]
    first = plan_context(base, model=model(40_000, 4_000))
    branches = [
        [*base, call(f"x{n}", f"tx{n}", path=f"b{n}"), result(f"y{n}", f"tx{n}", "q" * (500 * n + 100))]
        for n in range(6)
    ]
    expected = [plan_context(b, model=model(40_000, 4_000), state=first.state).encode() for b in branches]
    got: dict[int, bytes] = {}

    def worker(n):
        for _ in range(5):
            got[n] = plan_context(branches[n], model=model(40_000, 4_000), state=first.state).encode()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [got[n] for n in range(6)] == expected


@pytest.mark.parametrize("turns", [40, 400])  # 400: a cold plan of a long history skips the far part
def test_a_compaction_report_counts_a_pin_once_and_never_as_dropped(turns):
    def history(pin):
        messages = [user("u0", "the task: " + "spec " * 200), say("a0", "noted " * 200, pinned=pin)]
        for n in range(1, turns):
            messages += [user(f"u{n}", f"step {n} " + "detail " * 150), say(f"a{n}", "done " * 150)]
        return messages

    plain = plan_context(history(None), model=model(8_000, 1_000))
    pinned = plan_context(history(True), model=model(8_000, 1_000))
    assert plain.manifest.compaction is not None
    assert pinned.manifest.compaction is not None
    report, manifest = pinned.manifest.compaction, pinned.manifest
    assert any(item.kind == "pin" and item.message_id == f"{SESSION}:a0" for item in pinned.items)
    # the same history: what the window held before the compaction is the same, the pin counted once
    assert report.tokens_before == plain.manifest.compaction.tokens_before
    assert report.tokens_before >= manifest.native_tokens  # all the history, supplements before the cut
    # the pin stays (it is no dropped message): the report agrees with the "left out" the manifest lists
    assert report.dropped_messages == sum(exclusion.count for exclusion in manifest.exclusions)
    assert plain.manifest.compaction.dropped_messages == sum(e.count for e in plain.manifest.exclusions)


@pytest.mark.parametrize("window", [0, 500])  # no room at all; a window the fixed tokens fill
def test_a_blocked_plan_still_measures_the_history_it_refused(window):
    history = [user("u0", "the task " * 50), say("a0", "noted " * 50), user("u1", "go on " * 50)]
    native = plan_context(history, model=model(100_000, 1_000)).manifest.native_tokens
    blocked = plan_context(history, model=model(window, 100), fixed_tokens=600)
    assert blocked.fallback is not None
    assert blocked.fallback.mode == "blocked"
    assert blocked.messages == ()
    fixed = blocked.budget.fixed_tokens
    assert blocked.manifest.native_tokens == native + fixed  # the same history, plus its fixed part
    assert (blocked.manifest.planned_tokens, blocked.manifest.saved_tokens) == (fixed, 0)
