"""LLM summaries of a plan's cut, through a real OpenAI-compatible server on 127.0.0.1 and a real store."""

from __future__ import annotations

import copy

import msgspec
import pytest
from _http_servers import Reply, ScriptedServer
from _long_session import pi_message, write_long_session
from _provider_fixtures import OPENAI_CHAT_ANSWER, run_closing

from ds4_context_core import ModelDescriptor
from ds4_context_core.summaries import SUMMARY_ID_PREFIX, SUMMARY_SECTIONS
from ds4_context_engine.commands import ContextWorkspace
from ds4_context_engine.pi import append_pi_entries
from ds4_context_engine.providers import OpenAIChatTransport
from ds4_context_engine.store import SUMMARY_RETENTION, StoredSummary

SMALL = ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)
CHAT = "/v1/chat/completions"


def summary(*, files_read="`p0.py`", value="`pytest -x`") -> str:
    bodies = {
        "Objective": "Find out why CI is red.",
        "Files Read": files_read,
        "Files Modified": "none",
        "Commands / Tests": f"- {value} failed: `test_rounds_twice`",
        "Critical Exact Values": f"- {value}",
    }
    return "\n".join(f"## {name}\n{bodies.get(name, 'none')}" for name in SUMMARY_SECTIONS)


def answer(text: str) -> Reply:
    body = copy.deepcopy(OPENAI_CHAT_ANSWER)
    body["choices"][0]["message"]["content"] = text
    return Reply(body=body)


@pytest.fixture
def session_path(tmp_path):
    return write_long_session(tmp_path / "sessions" / "summaries.jsonl")


def _open(path, tmp_path):
    return ContextWorkspace.open(path, store_path=tmp_path / "state" / "derived.sqlite3", model=SMALL)


def _summarize(workspace, server, *, timeout_s=10.0, transport_timeout_s=10.0):
    transport = OpenAIChatTransport(
        base_url=server.url + "/v1", api_key="test-key", api_key_env=None, timeout_s=transport_timeout_s
    )
    return run_closing(transport, lambda: workspace.summarize_cut(transport.complete, timeout_s=timeout_s))


def _summaries(plan):
    return [item for item in plan.items if item.message_id.startswith("ds4-supplement:" + SUMMARY_ID_PREFIX)]


def test_an_accepted_summary_is_cached_by_span_and_placed_in_front(session_path, tmp_path):
    with ScriptedServer() as server:
        server.on("POST", CHAT, answer(summary()))
        with _open(session_path, tmp_path) as workspace:
            before = workspace.plan()
            assert not _summaries(before)
            outcome = _summarize(workspace, server)
            assert outcome is not None
            assert (outcome.status, outcome.code) == ("accepted", None)
            sent = server.requests[0].json()
            assert "summary-contract-v1" in sent["messages"][0]["content"]
            assert "pytest -x" in sent["messages"][1]["content"]
            plan = workspace.plan()
            (item,) = _summaries(plan)
            assert plan.items[0] == item  # in front of everything
            assert "`test_rounds_twice`" in plan.messages[0].blocks[0].text
            assert plan.manifest.planned_tokens <= plan.budget.hard_limit
            # the same cut again: nothing left to summarise, no second call
            assert _summarize(workspace, server) is None
            assert len(server.requests) == 1
            # a new turn: the summary and what follows it stay the cached prefix
            append_pi_entries(
                session_path,
                [
                    pi_message("assistant", [{"type": "text", "text": "quantize() rounds once now."}]),
                    pi_message("user", "And where else is the budget rounded?"),
                ],
            )
            workspace.refresh()
            after = workspace.plan()
            assert after.items[0] == item
            assert after.manifest.shared_prefix_tokens > 0.9 * plan.manifest.planned_tokens
        # the derived store keeps it: another workspace places it without any call
        with _open(session_path, tmp_path) as reopened:
            assert _summaries(reopened.plan())[0].message_id == item.message_id
        assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (summary(files_read="`src/budget.py`"), "summary-file-not-in-source"),
        (summary(value="`pytest -k budget`"), "summary-exact-value-not-in-source"),
        ("", "summary-empty"),
        (summary() + "\n" + "padding " * 3_000, "summary-too-large"),
    ],
)
def test_a_bad_summary_is_rejected_and_receipts_and_the_digest_stand_in(session_path, tmp_path, text, code):
    with ScriptedServer() as server:
        server.on("POST", CHAT, answer(text))
        with _open(session_path, tmp_path) as workspace:
            before = workspace.plan().messages
            outcome = _summarize(workspace, server)
            assert outcome is not None
            assert (outcome.status, outcome.code, outcome.text) == (
                "rejected",
                code,
                None,
            )
            plan = workspace.plan()
            assert not _summaries(plan)
            assert plan.messages == before  # the plan is what it would have been
            assert any(item.message_id == "ds4-supplement:ds4-task-digest" for item in plan.items)
            (stored,) = workspace.stored_summaries()
            assert (stored.status, stored.code, stored.text) == ("rejected", code, None)
            _summarize(workspace, server)
            assert len(server.requests) == 1  # a rejected span is not sent again


def _partial_then_close():
    yield b'{"id": "chatcmpl-1", "choices": [{"message": {"content": "## Objective\\nFind'


def _drip():
    for _ in range(20):
        yield b" "


@pytest.mark.parametrize(
    ("reply", "code", "deadline_s"),
    [
        (Reply(status=500, body={"error": {"message": "overloaded"}}), "summary-transport-failed", 30.0),
        (Reply(stream=_partial_then_close), "summary-transport-failed", 30.0),
        (Reply(stream=_drip, drip_s=0.2), "summary-timeout", 0.5),  # the answer stalls mid-summary
    ],
)
def test_a_failing_or_stalling_server_leaves_the_turn_going_on(
    session_path, tmp_path, reply, code, deadline_s
):
    with _open(session_path, tmp_path) as workspace:
        before = workspace.plan().messages
        with ScriptedServer() as server:
            server.on("POST", CHAT, reply)
            outcome = _summarize(workspace, server, transport_timeout_s=deadline_s)
        assert outcome is not None
        assert (outcome.status, outcome.code) == ("failed", code)
        assert workspace.plan().messages == before  # planned as before, nothing blocked
        assert workspace.stored_summaries() == ()  # a failure is not cached: asked again later
        with ScriptedServer() as server:
            server.on("POST", CHAT, answer(summary()))
            retried = _summarize(workspace, server)
            assert len(server.requests) == 1
        assert retried is not None
        assert (retried.status, retried.code) == ("accepted", None)
        assert _summaries(workspace.plan())


def test_without_a_store_summaries_live_in_the_workspace(session_path):
    with ScriptedServer() as server:
        server.on("POST", CHAT, answer(summary()))
        with ContextWorkspace.open(session_path, no_store=True, model=SMALL) as workspace:
            outcome = _summarize(workspace, server)
            assert outcome is not None
            assert outcome.status == "accepted"
            assert _summaries(workspace.plan())


def _record(index, *, session_id="retrieval", text="## Objective\nx"):
    return StoredSummary(
        session_id=session_id,
        span_hash=f"{index:064x}",
        contract_version="summary-contract-v1",
        status="accepted" if index % 2 else "rejected",
        code=None if index % 2 else "summary-empty",
        text=text if index % 2 else "must not be kept",
        source_ids=(f"{session_id}:{index}",),
        created_at="2026-03-01T09:00:00.000+00:00",
    )


def test_the_store_keeps_summaries_by_span_across_a_session_rebuild(session_path, store):
    store.index_file(session_path)
    records = [_record(index) for index in range(SUMMARY_RETENTION + 3)]
    for record in records:
        store.put_summary(record)
    kept = store.summaries("retrieval")
    assert [r.span_hash for r in kept] == [r.span_hash for r in records[3:]]  # the newest, oldest first
    assert kept[-2:] == (records[-2], msgspec.structs.replace(records[-1], text=None))
    assert all(r.text is None for r in kept if r.status == "rejected")
    # the same span again replaces (never duplicates) and counts as the newest
    again = msgspec.structs.replace(records[3], status="accepted", code=None, text="## Objective\ny")
    store.put_summary(again)
    kept = store.summaries("retrieval")
    assert len(kept) == SUMMARY_RETENTION
    assert kept[-1] == again
    assert [r.span_hash for r in kept] == [r.span_hash for r in (*records[4:], again)]
    store.rebuild_session(session_path)
    assert store.summaries("retrieval") == kept
    assert store.summaries("other") == ()
    with pytest.raises(TypeError):
        store.put_summary({"span_hash": "x"})  # type: ignore[arg-type]
    store.rebuild([])  # rebuilding the whole store starts from nothing, summaries included
    assert store.summaries("retrieval") == ()
