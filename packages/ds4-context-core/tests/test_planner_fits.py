"""Plans keep the turn in progress: the newest tool results are trimmed (head, tail and a marker naming
how to restore the rest), never dropped while a trimmed copy fits."""

import ds4_context_core as core
from ds4_context_core.planner import plan_context, restore


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
            assert f"restorable as {original.id}" in message.blocks[0].content
            assert restore(plan, original.id) == (original,)
    assert any(sent[original.id][1].kind == "trimmed-tool-result" for original in results)
    assert plan.messages[0] is history[0]  # the request itself, verbatim


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
