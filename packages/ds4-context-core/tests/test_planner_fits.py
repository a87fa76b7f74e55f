"""Plans that fit: no plan in any mode sends more than the hard limit, the native fallback only when the
native context fits, and the turn in progress keeps its newest tool results, trimmed (head, tail and a
marker naming how to restore the rest) rather than dropped."""

import ds4_context_core as core
from ds4_context_core.planner import PLAN_DIAGNOSTIC_CODES, plan_context, restore


def _message(entry, role, *blocks):
    return core.CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=blocks,
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=entry, runtime_id="r"),
    )


def _user(entry, text):
    return _message(entry, "user", core.TextBlock(text=text))


def _read(entry, *ids):
    calls = [core.ToolCallBlock(id=i, name="read", arguments={"path": f"src/{i}.py"}) for i in ids]
    return _message(entry, "assistant", *calls)


def _file(entry, call_id, size):
    return _message(
        entry, "tool", core.ToolResultBlock(tool_call_id=call_id, tool_name="read", content="x" * size)
    )


def _model(window):
    return core.ModelDescriptor(provider="p", id="m", context_window=window, max_tokens=4_000)


def _assert_trimmed_not_dropped(plan, history, results):
    assert plan.ok
    assert plan.budget.total_tokens <= plan.budget.hard_limit
    sent = {message.id: (message, item) for message, item in zip(plan.messages, plan.items, strict=True)}
    for original in results:
        assert original.id in sent, f"{original.id} was dropped"
        message, item = sent[original.id]
        if item.kind == "trimmed-tool-result":
            assert "characters trimmed here" in message.blocks[0].content
            assert restore(plan, original.id) == (original,)
    assert any(sent[original.id][1].kind == "trimmed-tool-result" for original in results)
    # the request itself, verbatim, first of the history sent (after the task digest, when the cut passed it)
    first_sent = next(m for m, i in zip(plan.messages, plan.items, strict=True) if i.kind != "summary")
    assert first_sent is history[0]


def test_two_parallel_whole_file_reads_that_pass_the_hard_limit_are_trimmed_not_dropped():
    # 2 x 60,000 characters is about 30k tokens; a 32k window with a 4k reserve has a hard limit near 27k.
    history = [_user("u1", "read both files"), _read("a1", "t1", "t2"), _file("r1", "t1", 60_000)]
    history.append(_file("r2", "t2", 60_000))
    plan = plan_context(history, model=_model(32_000))
    _assert_trimmed_not_dropped(plan, history, history[2:])


def test_two_sequential_whole_file_reads_after_the_request_are_trimmed_not_dropped():
    history = [_user("u1", "read both files"), _read("a1", "t1"), _file("r1", "t1", 60_000)]
    history += [_read("a2", "t2"), _file("r2", "t2", 60_000)]
    plan = plan_context(history, model=_model(32_000))
    _assert_trimmed_not_dropped(plan, history, [history[2], history[4]])
    assert [m.id for m in plan.messages] == ["s:u1", "s:a1", "s:r1", "s:a2", "s:r2"]


def test_a_trimmed_turn_stays_stable_on_the_next_call():
    history = [_user("u1", "read both files"), _read("a1", "t1", "t2"), _file("r1", "t1", 60_000)]
    history.append(_file("r2", "t2", 60_000))
    first = plan_context(history, model=_model(32_000))
    _assert_trimmed_not_dropped(first, history, history[2:])
    history += [_read("a3", "t3"), _file("r3", "t3", 400)]
    second = plan_context(history, model=_model(32_000), state=first.state)
    assert second.ok
    assert second.messages[: len(first.messages)] == first.messages  # the trims are sticky
    assert second.budget.total_tokens <= second.budget.hard_limit


def _say(entry, text):
    return _message(entry, "assistant", core.TextBlock(text=text))


def _no_orphan(messages):
    called, answered = set(), set()
    for message in messages:
        for block in message.blocks:
            if isinstance(block, core.ToolCallBlock):
                called.add(block.id)
            elif isinstance(block, core.ToolResultBlock):
                assert block.tool_call_id in called
                answered.add(block.tool_call_id)
    assert called == answered


def _long_history(turns):
    history = []
    for turn in range(turns):
        history += [_user(f"u{turn}", f"step {turn}"), _read(f"a{turn}", f"t{turn}")]
        history += [_file(f"r{turn}", f"t{turn}", 16_000), _say(f"s{turn}", "done " * 50)]
    return history


def test_a_native_fallback_that_would_pass_the_hard_limit_sends_the_newest_units_that_fit():
    # 40 turns of about 4k tokens each is about 160k tokens; the pinned first request (25k tokens) passes
    # the pins' cap, so the plan falls back, and the native context is far larger than the 100k window.
    history = _long_history(40)
    history[0] = _user("u0", "p" * 100_000)
    reference = plan_context([_user("u", "hi")], model=_model(100_000))  # the same limits, a normal plan
    plan = plan_context(history, model=_model(100_000), pins=["s:u0"])
    assert "fallback-fitted" in PLAN_DIAGNOSTIC_CODES
    assert plan.ok, plan.fallback
    warning = [d for d in plan.manifest.diagnostics if d.code == "fallback-fitted"]
    assert warning
    assert warning[0].detail.startswith("pins-exceed-cap:")
    assert plan.budget.hard_limit == reference.budget.hard_limit
    assert plan.budget.total_tokens == sum(item.tokens for item in plan.items)
    assert plan.budget.total_tokens <= plan.budget.hard_limit
    assert len(plan.messages) < len(history)
    assert list(plan.messages) == history[len(history) - len(plan.messages) :]  # the newest messages
    _no_orphan(plan.messages)
    [left_out] = plan.manifest.exclusions
    assert left_out.reason == "before-cut"
    assert left_out.count == len(history) - len(plan.messages)
    assert plan.manifest.native_tokens > plan.budget.hard_limit


def test_a_native_fallback_that_fits_is_sent_as_it_is():
    history = _long_history(3)
    history[0] = _user("u0", "p" * 100_000)
    plan = plan_context(
        history, model=_model(400_000), pins=["s:u0"], config={"budget": {"pin_cap_ratio": 0.01}}
    )
    assert (plan.fallback.mode, plan.fallback.code) == ("native", "pins-exceed-cap")
    assert list(plan.messages) == history


def test_nothing_is_sent_when_not_even_the_newest_message_fits():
    history = [_user("u1", "hello"), _say("s1", "hi"), _user("u2", "again")]
    plan = plan_context(history, model=_model(100_000), fixed_tokens=95_000)
    assert (plan.fallback.mode, plan.fallback.code) == ("blocked", "fixed-overhead-exceeds-hard-limit")
    assert plan.messages == ()


def test_an_oversized_current_request_is_sent_head_and_tail_and_restorable():
    listing = "".join(f"./src/module_{i:05d}/file.py\n" for i in range(2_000))  # a pasted `find .`
    history = [_user("u1", "hello"), _say("s1", "hi"), _user("u2", "what is here?\n" + listing)]
    plan = plan_context(history, model=_model(8_192))
    assert plan.ok
    assert plan.fallback is None
    assert plan.budget.total_tokens <= plan.budget.hard_limit
    sent = plan.messages[-1]
    assert sent.id == "s:u2"
    assert sent.flags.synthetic
    text = sent.blocks[0].text
    assert text.startswith("what is here?\n./src/module_00000/")
    assert text.endswith("./src/module_01999/file.py\n")
    assert "characters trimmed" in text
    assert "restorable" in text
    assert restore(plan, "s:u2") == (history[2],)
    assert "current-request-trimmed" in {d.code for d in plan.manifest.diagnostics}
    assert "current-request-trimmed" in PLAN_DIAGNOSTIC_CODES
    # deterministic: the same history plans the same bytes (the prefix survives a re-plan)
    assert plan_context(history, model=_model(8_192)).messages == plan.messages
    # a request that fits is kept verbatim
    roomy = plan_context(history, model=_model(200_000))
    assert roomy.messages[-1] is history[2]


def test_a_system_message_in_the_history_is_pinned_not_cut_with_old_messages():
    system = _message("sys", "system", core.TextBlock(text="You are a careful coder."))
    history = [system, *_long_history(40), _user("last", "and now?")]  # far more than the window
    plan = plan_context(history, model=_model(32_000))
    assert plan.ok
    assert plan.messages[0] is system
    assert plan.items[0].kind == "pin"
    assert plan.items[0].reason == "persistent-pin"
    assert plan.manifest.exclusions[-1].reason == "before-cut"  # old turns were cut, the system kept
    assert plan.budget.total_tokens <= plan.budget.hard_limit
