"""The fast path of the CLI: plain command lines of plan and the read commands, parsed without typer.

What a user relies on: the same command line prints the same output, errors and exit status whichever
parser took it; anything the fast parser does not fully understand goes to typer; and a short command
does not load typer, pydantic or rich, nor with ``--no-store`` sqlite3 or psycopg (the start-up figures are
in ``benchmarks/bench_cli_startup.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ds4_context_engine._cli_argv import READ_COMMANDS, parse_fast, run_fast
from ds4_context_engine.cli import EXIT_ERROR, EXIT_FALLBACK, EXIT_USAGE, app
from ds4_context_engine.commands import write_demo_session

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
MODEL = ("--model", "openai:gpt-4.1-mini")
# sqlite3 and psycopg: every command checked with them here runs with --no-store
HEAVY = ("typer", "click", "pydantic", "rich", "httpx", "sqlite3", "psycopg")
# what a plan without a configuration never runs: the secret rules, the runtime adapter, its conformance
# factory (temporary files) and the summary call's timeout (anyio)
PLAN_UNUSED = (
    "ds4_context_core._privacy._rules",
    "ds4_context_core._privacy._scan",
    "ds4_context_core._privacy._walk",
    "ds4_context_core.adapter",
    "ds4_context_engine.pi._adapter",
    "ds4_context_engine.pi._conformance",
    "anyio",
    "tempfile",
)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-fast")
    coding = root / "coding.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", coding)
    demo = write_demo_session(root / "demo.jsonl", cwd=str(root))
    config = root / "config.json"
    config.write_text(json.dumps({"budget": {"hard_limit_ratio": 2.0}, "planer": {}}), encoding="utf-8")
    return {"coding": coding, "demo": demo, "settings": config, "missing": root / "missing.jsonl"}


def _line(sessions, *words):
    """The command line with the fixtures' names (``demo``, ``coding``, ``settings`` ...) as their paths."""
    return [str(sessions.get(word, word)) for word in words]


# (command line, the exit status it must end with): successes, a fallback, usage and file errors
COMMAND_LINES = (
    (("plan", "demo", *MODEL, "--window", "20000", "--no-store", "--json"), 0),
    (("plan", "demo", *MODEL, "--window=20000", "--no-store"), 0),
    (("plan", "demo", "--window", "16000", "--no-store", "--no-digest", "--retrieve", "0", "--json"), 0),
    (("plan", "demo", "--no-store", "--json", "--max-tokens", "2048", "--window", "24000", *MODEL), 0),
    (("plan", "demo", "--window", "600", "--no-store", "--json"), EXIT_FALLBACK),
    (("plan", "demo", "--window", "600", "--no-store"), EXIT_FALLBACK),
    (("plan", "demo", "--model", "no-colon", "--window", "8000", "--no-store"), EXIT_USAGE),
    (("plan", "demo", *MODEL, "--no-store", "--json"), EXIT_USAGE),
    (("plan", "coding", "--window", "8000", "--no-store", "--json"), 0),
    (("plan", "missing", *MODEL, "--window", "8000", "--no-store", "--json"), EXIT_ERROR),
    (("plan", "demo", *MODEL, "--window", "20000", "--no-store", "--config", "settings", "--json"), 0),
    (("plan", "demo", *MODEL, "--window", "8000", "--no-store", "--config", "missing"), EXIT_ERROR),
    (("status", "coding", "--no-store", "--json"), 0),
    (("status", "demo", "--no-store", *MODEL, "--window", "20000"), 0),
    (("manifest", "demo", "--no-store", *MODEL, "--window", "20000", "--json"), 0),
    (("manifest", "demo", "--no-store"), EXIT_ERROR),
    (("excluded", "demo", "--no-store", *MODEL, "--window", "20000"), 0),
    (("config", "coding", "--no-store", "--config", "settings", "--json"), 0),
    (("tokens", "coding", "--no-store"), 0),
)


def _typer(arguments):
    result = CliRunner().invoke(app, arguments, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _fast(arguments, capsys):
    capsys.readouterr()
    try:
        assert run_fast(arguments), "the fast path did not take the command line"
        status = 0
    except SystemExit as ended:
        status = ended.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize(
    ("words", "status"), COMMAND_LINES, ids=[" ".join(line) for line, _ in COMMAND_LINES]
)
def test_the_fast_path_prints_and_exits_as_the_typer_app_does(sessions, capsys, monkeypatch, words, status):
    monkeypatch.setenv("COLUMNS", "120")  # rich's width when not on a terminal, the same for both
    arguments = _line(sessions, *words)
    through_typer = _typer(arguments)
    assert through_typer[0] == status, through_typer[2]
    assert _fast(arguments, capsys) == through_typer


def test_every_read_command_takes_the_fast_path(sessions):
    for command in READ_COMMANDS:
        parsed = parse_fast([command.name, str(sessions["coding"]), "--no-store", "--json"], {})
        assert parsed is not None
        assert parsed.name == command.name
        assert parsed.as_json


@pytest.mark.parametrize(
    "words",
    [
        ("plan",),
        ("plan", "--help"),
        ("plan", "demo", "--help"),
        ("plan", "demo", "-h"),
        ("plan", "demo", "coding"),
        ("plan", "demo", "--", "--json"),
        ("plan", "demo", "--window", "0"),
        ("plan", "demo", "--window", "+5"),
        ("plan", "demo", "--window", "010"),
        ("plan", "demo", "--window", "1e3"),
        ("plan", "demo", "--window", "١٢٣"),  # Arabic-Indic digits: int() takes them, click may not
        ("plan", "demo", "--window"),
        ("plan", "demo", "--model", "--json"),
        ("plan", "demo", "--json", "--json"),
        ("plan", "demo", "--digest", "--no-digest"),
        ("plan", "demo", "--json=yes"),
        ("plan", "demo", "--config", ""),
        ("plan", "demo", "--retrieve", "-1"),
        ("plan", "-"),
        ("status", "demo", "--retrieve", "2"),
        ("status", "demo", "--digest"),
        ("explain", "demo", "some-id"),
        ("--version", "plan", "demo"),
        ("version",),
        ("demo",),
    ],
    ids=" ".join,
)
def test_what_the_fast_parser_does_not_fully_understand_goes_to_typer(sessions, words):
    assert parse_fast(_line(sessions, *words), {}) is None


def test_shell_completion_goes_to_typer(sessions):
    arguments = _line(sessions, "plan", "demo", "--json")
    assert parse_fast(arguments, {}) is not None
    assert parse_fast(arguments, {"_DS4_CONTEXT_COMPLETE": "bash_complete"}) is None


def _console(sessions, *words, watched=HEAVY):
    code = (
        "import sys\n"
        "from ds4_context_engine.cli import main\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        f"    loaded = sorted(name for name in {watched!r} if name in sys.modules)\n"
        "    print('LOADED', ','.join(loaded), file=sys.stderr)\n"
    )
    environment = {**os.environ, "COLUMNS": "120"}
    environment.pop("FORCE_COLOR", None)
    environment.pop("TTY_COMPATIBLE", None)
    return subprocess.run(
        [sys.executable, "-c", code, *_line(sessions, *words)],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )


@pytest.mark.parametrize(
    "words",
    [
        ("plan", "demo", *MODEL, "--window", "20000", "--no-store", "--json"),
        ("plan", "demo", "--window", "600", "--no-store", "--json"),
        ("status", "coding", "--no-store", "--json"),
        ("manifest", "demo", *MODEL, "--window", "20000", "--no-store", "--json"),
    ],
    ids=" ".join,
)
def test_short_json_commands_load_neither_typer_nor_pydantic_nor_rich(sessions, words):
    ran = _console(sessions, *words)
    assert ran.returncode in (0, EXIT_FALLBACK), ran.stderr
    assert json.loads(ran.stdout)["command"] == words[0]
    assert ran.stderr.splitlines()[-1] == "LOADED ", ran.stderr


def test_the_console_entry_hands_what_it_does_not_parse_to_typer(sessions):
    ran = _console(sessions, "plan", "demo", "--window", "0", "--no-store")
    assert ran.returncode == EXIT_USAGE
    assert "--window" in ran.stderr
    assert "typer" in ran.stderr.splitlines()[-1]
    helped = _console(sessions, "plan", "--help")
    assert helped.returncode == 0
    assert "--window" in helped.stdout


@pytest.mark.parametrize("session", ["demo", "coding"])
def test_a_plan_without_a_configuration_loads_neither_the_privacy_rules_nor_the_runtime_adapter(
    sessions, session
):
    ran = _console(
        sessions, "plan", session, *MODEL, "--window", "20000", "--no-store", "--json", watched=PLAN_UNUSED
    )
    assert ran.returncode in (0, EXIT_FALLBACK), ran.stderr
    assert json.loads(ran.stdout)["command"] == "plan"
    assert ran.stderr.splitlines()[-1] == "LOADED ", ran.stderr
    # the same modules load as soon as something asks for them: a configuration's privacy section
    configured = _console(
        sessions, "plan", session, *MODEL, "--window", "20000", "--no-store", "--config", "settings",
        "--json", watched=PLAN_UNUSED,
    )  # fmt: skip
    assert configured.returncode in (0, EXIT_FALLBACK), configured.stderr
    assert "ds4_context_core._privacy._rules" in configured.stderr.splitlines()[-1]
