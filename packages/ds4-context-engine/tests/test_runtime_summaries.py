"""LLM summaries in the run loop (``RunOptions.summary_model``), against real servers on 127.0.0.1.

The agent's model is a scripted streaming server; the summariser is an OpenAI-compatible server that
answers with a good summary, a bad one, an error or nothing in time. The turn never waits for it.
"""

from __future__ import annotations

import copy
import time

import anyio
import pytest
from _http_servers import Reply, ScriptedServer
from _long_session import write_long_session
from _model_servers import Answer, ModelServer, transport_for
from _provider_fixtures import OPENAI_CHAT_ANSWER

from ds4_context_core.summaries import SUMMARY_SECTIONS
from ds4_context_engine.providers import OpenAIChatTransport
from ds4_context_engine.runtime import HostTool, RunOptions, SummaryFinished, create_runtime

CHAT = "/v1/chat/completions"
OBJECTIVE = "Find out why CI is red and keep the budget API."


def summary_text(files_read: str = "`p0.py`") -> str:
    bodies = {
        "Objective": OBJECTIVE,
        "Files Read": files_read,
        "Commands / Tests": "- `pytest -x` failed: `test_rounds_twice`",
    }
    return "\n".join(f"## {name}\n{bodies.get(name, 'none')}" for name in SUMMARY_SECTIONS)


def answer(text: str) -> Reply:
    body = copy.deepcopy(OPENAI_CHAT_ANSWER)
    body["choices"][0]["message"]["content"] = text
    return Reply(body=body)


def _drip():
    for _ in range(200):
        yield b" "


def check_then_answer(view, number):
    if "call_wait" not in view.tool_results:
        return Answer(text="Checking.", calls=[("call_wait", "wait_for_summary", "{}")])
    return Answer(text="Done.")


def one_answer(view, number):
    return Answer(text="Done.")


def _run(tmp_path, summariser_url, brain, *, timeout_s=30.0, entered=True, turns=1, wait=True):
    session = write_long_session(tmp_path / "sessions" / "long.jsonl")
    events: list[object] = []
    calls = [0]

    def on_event(event: object) -> None:
        events.append(event)

    async def wait_for_summary(arguments, context):
        # the first turn's call waits for its summary; a later one waits a little for a newly cut span's
        calls[0] += 1
        with anyio.move_on_after(20 if calls[0] == 1 else 5):
            while wait and len(_summaries(events)) < calls[0]:
                await anyio.sleep(0.02)
        return "waited"

    tool = HostTool(name="wait_for_summary", function=wait_for_summary)
    with ModelServer("openai-chat", brain) as model:

        async def main():
            runtime = create_runtime(
                workspace=tmp_path,
                tools=[tool],
                managed_tools=False,
                transports={
                    "openai": transport_for("openai-chat", model.url),
                    "summarizer": OpenAIChatTransport(
                        base_url=summariser_url + "/v1", api_key="test-key", api_key_env=None, timeout_s=60
                    ),
                },
            )
            options = RunOptions(
                model="openai:scripted-1",
                messages=[{"role": "user", "content": "Carry on."}],
                session_path=session,
                context_window=32_000,
                max_output_tokens=2_000,
                summary_model="summarizer:sum-1",
                summary_timeout_s=timeout_s,
                on_event=on_event,
            )
            results = []
            if entered:
                async with runtime:
                    for _ in range(turns):
                        results.append(await runtime.run("You are a coding agent.", options))
            else:
                for _ in range(turns):
                    results.append(await runtime.run("You are a coding agent.", options))
                await runtime.aclose()
            return results

        started = time.monotonic()
        results = anyio.run(main)
        elapsed = time.monotonic() - started
    return results, model.seen, events, elapsed


def _summaries(events):
    return [event for event in events if isinstance(event, SummaryFinished)]


def _sent_text(seen) -> str:
    return "\n".join(seen.user_texts)


@pytest.mark.parametrize("entered", [True, False])
def test_an_accepted_summary_of_the_cut_is_placed_by_the_next_plan(tmp_path, entered):
    with ScriptedServer() as summariser:
        summariser.on("POST", CHAT, answer(summary_text()))
        results, seen, events, _ = _run(tmp_path, summariser.url, check_then_answer, entered=entered)
        assert len(summariser.requests) == 1
    (result,) = results
    assert result.error is None, result.error_detail
    (done,) = _summaries(events)
    assert (done.status, done.code, done.step) == ("accepted", None, 1)
    assert done.messages > 100  # the span the first plan cut
    first, second = seen
    assert OBJECTIVE not in _sent_text(first)  # asked in the background: the first call did not wait
    assert OBJECTIVE in _sent_text(second)  # the next plan places it, as quoted notes
    assert "summary-contract-v1 summary of" in _sent_text(second)


def test_a_summary_is_asked_once_per_span_and_kept_across_turns(tmp_path):
    with ScriptedServer() as summariser:
        summariser.on("POST", CHAT, answer(summary_text()))
        results, seen, events, _ = _run(tmp_path, summariser.url, check_then_answer, turns=2)
        asked = [request.body for request in summariser.requests]
    assert all(result.error is None for result in results)
    done = _summaries(events)
    # no span asked twice; a span asked at the last step may still be out when the runtime closes
    # (it is dropped then), so the server can have seen one more request than finished
    assert len(set(asked)) == len(asked)
    assert len(done) <= len(asked) <= len(done) + 1
    assert done[0].status == "accepted"
    # a later cut only asks for what it newly cut: the first span stays covered by its summary
    assert all(later.messages < done[0].messages for later in done[1:])
    assert OBJECTIVE in _sent_text(seen[-1])  # the second turn still places the first summary


@pytest.mark.parametrize(
    ("reply", "status", "code"),
    [
        (None, "rejected", "summary-file-not-in-source"),
        (Reply(status=500, body={"error": {"message": "overloaded"}}), "failed", "summary-transport-failed"),
    ],
)
def test_a_bad_or_failing_summary_leaves_the_receipts_and_the_turn_goes_on(tmp_path, reply, status, code):
    with ScriptedServer() as summariser:
        summariser.on("POST", CHAT, reply or answer(summary_text(files_read="`invented_module.py`")))
        results, seen, events, _ = _run(tmp_path, summariser.url, check_then_answer)
    (result,) = results
    assert result.error is None, result.error_detail
    assert result.text == "Done."
    (done,) = _summaries(events)
    assert (done.status, done.code) == (status, code)
    assert all("summary-contract-v1 summary of" not in _sent_text(request) for request in seen)


def test_a_stalling_summariser_never_blocks_the_turn(tmp_path):
    with ScriptedServer() as summariser:
        summariser.on("POST", CHAT, Reply(stream=_drip, drip_s=0.2))  # 40 s of silence, bit by bit
        results, _seen, events, elapsed = _run(
            tmp_path, summariser.url, one_answer, timeout_s=600, entered=False, wait=False
        )
        assert len(summariser.requests) <= 1
    (result,) = results
    assert result.error is None, result.error_detail
    assert result.text == "Done."
    assert elapsed < 20  # the summary still out when the turn ended was dropped, not waited for
    assert _summaries(events) == []


def test_a_summary_past_its_timeout_is_a_failure_and_the_turn_goes_on(tmp_path):
    with ScriptedServer() as summariser:
        summariser.on("POST", CHAT, Reply(stream=_drip, drip_s=0.2))
        results, _, events, _ = _run(tmp_path, summariser.url, check_then_answer, timeout_s=0.5)
    (result,) = results
    assert result.error is None, result.error_detail
    (done,) = _summaries(events)
    assert (done.status, done.code) == ("failed", "summary-timeout")


def test_a_bad_summary_timeout_is_refused_with_a_code(tmp_path):
    async def main():
        runtime = create_runtime(workspace=tmp_path, managed_tools=False, transports={})
        return await runtime.run(
            "x",
            RunOptions(
                model="openai:m",
                messages=[{"role": "user", "content": "hi"}],
                summary_model="summarizer:s",
                summary_timeout_s=0,
            ),
        )

    result = anyio.run(main)
    assert result.error == "run-invalid-options"
