"""Retrieved history: cut messages that match the request come back, over real Pi files and real SQLite."""

from __future__ import annotations

import json

import msgspec
import pytest
from _long_session import FACT, pi_message, write_long_session
from typer.testing import CliRunner

import ds4_context_engine.commands._workspace as workspace_module
from ds4_context_core import ModelDescriptor
from ds4_context_core.planner import plan_context
from ds4_context_engine._exceptions import CommandError, DerivedStoreError, PiSessionError
from ds4_context_engine.cli import EXIT_USAGE, app
from ds4_context_engine.commands import ContextWorkspace, context_restore
from ds4_context_engine.commands._retrieval import (
    RETRIEVED_TEXT_MAX_CHARS,
    retrieval_query_terms,
    retrieve_history,
)
from ds4_context_engine.pi import append_pi_entries
from ds4_context_engine.store import open_derived_store, open_store

SMALL = ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)


@pytest.fixture
def session_path(tmp_path):
    return write_long_session(tmp_path / "sessions" / "retrieval.jsonl")


def _open(path, tmp_path, **options):
    store_path = tmp_path / "state" / "derived.sqlite3"
    return ContextWorkspace.open(path, store_path=store_path, model=SMALL, **options)


def _early_result(workspace):
    tool_messages = (m for m in workspace.context.messages if m.role == "tool")
    return next(m for m in tool_messages if m.blocks[0].tool_call_id == "call-early")


def test_a_cut_message_matching_the_request_comes_back_as_retrieved_history(session_path, tmp_path):
    with _open(session_path, tmp_path) as workspace:
        plan = workspace.plan()
        early = _early_result(workspace)
        verbatim = {"message", "pin", "current-request"}
        kept_ids = {item.message_id for item in plan.items if item.kind in verbatim}
        assert early.id not in kept_ids  # the window is far too small for the whole session
        retrieved = [item for item in plan.items if item.kind == "retrieved-history"]
        assert [item.source_ids for item in retrieved][:1] == [(early.id,)]
        position = plan.items.index(retrieved[0])
        assert "test_rounds_twice" in plan.messages[position].blocks[0].text
        # old history, placed in front: after the summaries (the task digest), before the kept history,
        # so that a new request does not move it
        kinds = [item.kind for item in plan.items]
        first_history = next(
            i for i, kind in enumerate(kinds) if kind not in {"summary", "retrieved-history"}
        )
        assert all(kind == "summary" for kind in kinds[: kinds.index("retrieved-history")])
        assert all(kind == "retrieved-history" for kind in kinds[position:first_history])
        assert plan.items[-1].kind == "current-request"
        assert plan.fallback is None
        assert plan.manifest.planned_tokens <= plan.budget.hard_limit


def test_retrieved_history_only_costs_the_oldest_kept_history(session_path, tmp_path):
    with _open(session_path, tmp_path) as workspace:
        with_retrieval = workspace.plan()
    with _open(session_path, tmp_path / "other", retrieval_hits=0) as workspace:
        without = workspace.plan()
    assert not [item for item in without.items if item.kind == "retrieved-history"]
    supplements = {"retrieved-history", "summary"}
    history = [item.message_id for item in with_retrieval.items if item.kind not in supplements]
    plain = [item.message_id for item in without.items if item.kind not in supplements]
    # the supplement's tokens come from the front of the window: what stays is the same suffix
    assert len(history) <= len(plain)
    assert history == plain[len(plain) - len(history) :]


def test_consecutive_plans_with_retrieval_still_share_their_prefix(session_path, tmp_path):
    with _open(session_path, tmp_path) as workspace:
        first = workspace.plan()
        append_pi_entries(
            session_path,
            [
                pi_message("assistant", [{"type": "text", "text": "quantize() now rounds once."}]),
                pi_message("user", "Which other callers of quantize round the budget?"),
            ],
        )
        workspace.refresh()
        second = workspace.plan()
    assert [item.kind for item in second.items].count("retrieved-history") >= 1
    assert second.manifest.shared_prefix_tokens > 0.8 * first.manifest.planned_tokens


def test_equal_inputs_give_byte_equal_plans_with_retrieval(session_path, tmp_path):
    with _open(session_path, tmp_path) as first:
        one = first.plan().encode()
    with _open(session_path, tmp_path / "other") as second:
        two = second.plan().encode()
    assert one == two


def test_no_store_or_zero_hits_means_no_retrieval(session_path, tmp_path):
    with ContextWorkspace.open(session_path, no_store=True, model=SMALL) as workspace:
        assert not [item for item in workspace.plan().items if item.kind == "retrieved-history"]
    with _open(session_path, tmp_path, retrieval_hits=0) as workspace:
        assert not [item for item in workspace.plan().items if item.kind == "retrieved-history"]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_a_bad_hit_count_is_a_coded_error(session_path, tmp_path, bad):
    with pytest.raises(CommandError) as caught:
        _open(session_path, tmp_path, retrieval_hits=bad)
    assert caught.value.code == "command-argument-invalid"


def test_local_only_and_synthetic_messages_are_never_retrieved(session_path, tmp_path):
    with _open(session_path, tmp_path, retrieval_hits=0) as workspace:
        workspace.ensure_indexed()
        messages = list(workspace.context.messages)
        early = _early_result(workspace)
        plan = plan_context(messages, model=SMALL)
        found = retrieve_history(workspace.store, "retrieval", messages, plan)
        assert [item.source_ids for item in found][:1] == [(early.id,)]
        for flag in ("local_only", "synthetic"):
            flags = msgspec.structs.replace(early.flags, **{flag: True})
            hidden = [msgspec.structs.replace(m, flags=flags) if m is early else m for m in messages]
            found = retrieve_history(workspace.store, "retrieval", hidden, plan_context(hidden, model=SMALL))
            assert early.id not in {source for item in found for source in item.source_ids}


def test_long_messages_are_cut_to_the_retrieval_limit(tmp_path):
    path = write_long_session(tmp_path / "long.jsonl", early_fact=FACT + " " + "detail " * 2_000)
    with _open(path, tmp_path) as workspace:
        plan = workspace.plan()
        retrieved = [
            m for m, item in zip(plan.messages, plan.items, strict=True) if item.kind == "retrieved-history"
        ]
        assert retrieved
        text = retrieved[0].blocks[0].text
        assert "test_rounds_twice" in text
        assert len(text) < RETRIEVED_TEXT_MAX_CHARS + 300
        assert text.endswith("[quoted history cut; /context restore shows the rest]\n[end of quoted history]")


def test_a_request_of_stop_words_only_retrieves_nothing(tmp_path):
    path = write_long_session(tmp_path / "vague.jsonl", tail_request="Why was it so, and what about that?")
    with _open(path, tmp_path) as workspace:
        assert not [item for item in workspace.plan().items if item.kind == "retrieved-history"]


def test_query_terms_are_distinct_content_words_in_order():
    terms = retrieval_query_terms("Why does quantize() round the Budget twice in budget.py? QUANTIZE it, ok")
    assert terms == ("quantize", "round", "budget", "twice", "budget.py")
    assert retrieval_query_terms("a b c the and of") == ()
    assert retrieval_query_terms("naïve café résumé") == ("naïve", "café", "résumé")
    assert len(retrieval_query_terms(" ".join(f"word{n}" for n in range(50)))) == 12


def test_search_can_match_any_term_or_every_term(session_path, tmp_path):
    store = open_derived_store(tmp_path / "state" / "derived.sqlite3")
    try:
        store.index_file(session_path)
        every = store.search("retrieval", "quantize logging", limit=50)
        anyone = store.search("retrieval", "quantize logging", limit=50, match="any")
        assert every == ()
        assert len(anyone) > 1
        assert {hit.entry_id for hit in store.search("retrieval", "quantize", limit=50)} <= {
            hit.entry_id for hit in anyone
        }
        with pytest.raises(DerivedStoreError) as caught:
            store.search("retrieval", "quantize", match="some")  # type: ignore[arg-type]
        assert caught.value.code == "derived-store-argument-invalid"
    finally:
        store.close()


def test_the_cli_plan_retrieves_by_default_and_not_with_retrieve_zero(session_path, tmp_path):
    runner = CliRunner()
    common = [
        "plan", str(session_path), "--model", "openai:gpt-4.1-mini", "--window", "32000",
        "--max-tokens", "2000", "--store", str(tmp_path / "state" / "derived.sqlite3"), "--json",
    ]  # fmt: skip

    def kinds(*extra):
        result = runner.invoke(app, [*common, *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return [item["kind"] for item in json.loads(result.output)["items"]]

    assert "retrieved-history" in kinds()
    assert "retrieved-history" not in kinds("--retrieve", "0")
    refused = runner.invoke(app, [*common, "--retrieve", "-1"])
    assert refused.exit_code == EXIT_USAGE


def test_a_workspace_that_fails_to_open_closes_its_store(tmp_path, monkeypatch):
    # A session that cannot be read must not leave the SQLite connection open behind it.
    closed = []
    real_open = open_store

    def tracking_open(path, **options):
        store = real_open(path, **options)
        real_close = store.close
        monkeypatch.setattr(store, "close", lambda: (closed.append(True), real_close())[1])
        return store

    # the workspace looks the opener up in the store package when it opens one (imported on first use)
    monkeypatch.setattr("ds4_context_engine.store.open_store", tracking_open)
    with pytest.raises(PiSessionError) as caught:
        ContextWorkspace.open(tmp_path / "missing.jsonl", store_path=tmp_path / "state" / "derived.sqlite3")
    assert caught.value.code == "pi-session-not-found"
    assert closed == [True]


def test_restore_shows_the_message_a_retrieved_excerpt_came_from(session_path, tmp_path):
    with _open(session_path, tmp_path) as workspace:
        plan = workspace.plan()
        item = next(item for item in plan.items if item.kind == "retrieved-history")
        restored = context_restore(workspace, item.message_id)
        early = _early_result(workspace)
    assert [message.message_id for message in restored.messages] == [early.id]
    assert FACT in restored.messages[0].text


def test_one_plan_searches_the_store_once_whatever_its_planning_passes(session_path, tmp_path, monkeypatch):
    selections = []
    select = workspace_module.retrieved_supplements
    monkeypatch.setattr(
        workspace_module, "retrieved_supplements", lambda *a, **k: (selections.append(1), select(*a, **k))[1]
    )
    with _open(session_path, tmp_path) as workspace:
        workspace.ensure_indexed()
        searches = []
        search = workspace.store.search
        monkeypatch.setattr(
            workspace.store, "search", lambda *a, **k: (searches.append(a), search(*a, **k))[1]
        )
        plan = workspace.plan()
    assert [item.kind for item in plan.items].count("retrieved-history") >= 1
    assert len(selections) >= 2  # the digest moved the cut, so the supplements were chosen again
    assert len(searches) == 1
