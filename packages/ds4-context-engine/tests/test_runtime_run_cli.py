"""``ds4-context run`` and ``chat`` against an OpenAI-compatible server on 127.0.0.1, found by discovery."""

import json

from _http_servers import Reply, closed_port_url
from _model_servers import Answer, Fail, ModelServer
from typer.testing import CliRunner

from ds4_context_engine.cli import EXIT_ERROR, app
from ds4_context_engine.pi import build_pi_context, read_pi_session

runner = CliRunner()


def _invoke(*args, input=None):
    return runner.invoke(app, [str(arg) for arg in args], input=input, catch_exceptions=False)


def _local_server(brain):
    model = ModelServer("openai-chat", brain)
    model.server.on(
        "GET",
        "/v1/models",
        Reply(body={"object": "list", "data": [{"id": "scripted-7b", "object": "model"}]}),
    )
    return model


def test_run_discovers_the_local_model_and_prints_the_answer_as_json(tmp_path):
    with _local_server(lambda view, number: Answer(text="Hello from the local model.")) as model:
        result = _invoke("run", "Say hello", "--base-url", model.server.url, "--cwd", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["command"] == "run"
    assert body["model"] == "local:scripted-7b"
    assert body["text"] == "Hello from the local model."
    assert body["error"] is None
    assert len(body["steps"]) == 1
    assert model.seen[0].body["model"] == "scripted-7b"
    assert model.seen[0].user_texts == ["Say hello"]


def test_run_streams_the_answer_and_draws_the_context_bar(tmp_path):
    with _local_server(lambda view, number: Answer(text="Streamed answer.")) as model:
        result = _invoke(
            "run",
            "Go",
            "--model",
            "local:scripted-7b",
            "--base-url",
            model.server.url,
            "--cwd",
            tmp_path,
            "--window",
            "16000",
        )
    assert result.exit_code == 0, result.output
    assert "Streamed answer." in result.stdout
    assert "context (" in result.stderr
    assert "of 16,000 tokens" in result.stderr


def test_chat_reads_turns_from_a_pipe_and_keeps_one_session(tmp_path):
    session = tmp_path / "chat.jsonl"

    def brain(view, number):
        return Answer(text=f"turn {number} heard: {view.user_texts[-1]}")

    with _local_server(brain) as model:
        result = _invoke(
            "chat",
            "--base-url",
            model.server.url,
            "--cwd",
            tmp_path,
            "--session",
            session,
            input="first line\n\nsecond line\n/exit\nnever sent\n",
        )
    assert result.exit_code == 0, result.output
    assert "turn 1 heard: first line" in result.stdout
    assert "turn 2 heard: second line" in result.stdout
    assert len(model.seen) == 2
    assert model.seen[1].user_texts == ["first line", "second line"]  # the second turn saw the first
    roles = [m.role for m in build_pi_context(read_pi_session(session)).messages]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_a_failed_turn_exits_with_its_code(tmp_path):
    with _local_server(lambda view, number: Fail(400)) as model:
        result = _invoke("run", "Go", "--base-url", model.server.url, "--cwd", tmp_path)
    assert result.exit_code == EXIT_ERROR
    assert "error [run-provider-failed]" in result.stderr


def test_no_model_and_no_local_server_is_a_coded_error(tmp_path):
    result = _invoke("run", "Go", "--base-url", closed_port_url(), "--cwd", tmp_path)
    assert result.exit_code == EXIT_ERROR
    assert "error [run-no-model]" in result.stderr


def test_a_bad_model_reference_is_refused(tmp_path):
    result = _invoke("run", "Go", "--model", "no colon", "--cwd", tmp_path)
    assert result.exit_code == EXIT_ERROR
    assert "error [model-reference" in result.stderr


def test_run_shows_managed_tool_calls_as_they_run(tmp_path):
    (tmp_path / "README.md").write_text("# Demo\nA tiny project.\n")

    def brain(view, number):
        if number == 1:
            return Answer(calls=[("r1", "Read", json.dumps({"path": "README.md"}))])
        return Answer(text="It is " + view.tool_results["r1"].splitlines()[-1].split("\t")[-1].strip())

    with _local_server(brain) as model:
        result = _invoke("run", "What is this?", "--base-url", model.server.url, "--cwd", tmp_path)
    assert result.exit_code == 0, result.output
    assert "▸ Read" in result.stderr
    assert "✓ Read success" in result.stderr
    assert "It is A tiny project." in result.stdout
