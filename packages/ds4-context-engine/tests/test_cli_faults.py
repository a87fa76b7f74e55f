"""Hostile input at the CLI: one line ``error [code]: ...`` and a documented exit status, never a traceback
or a hang (issue 22 items 4 and 5). The non-regular files are real FIFOs, sockets and devices, and the
commands that could hang run in a real subprocess with a timeout."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ds4_context_engine import commands
from ds4_context_engine._config_file import CONFIG_FILE_MAX_BYTES, CONFIG_MAX_DEPTH
from ds4_context_engine.cli import EXIT_ERROR, EXIT_FALLBACK, EXIT_INTERNAL, EXIT_USAGE, app

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
runner = CliRunner()
_HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/tmp"}


@pytest.fixture
def coding(tmp_path: Path) -> Path:
    path = tmp_path / "coding.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", path)
    return path


def _cli(*args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m ds4_context_engine ARGS`` in a subprocess; a hang fails the test instead of the run."""
    return subprocess.run(
        [sys.executable, "-m", "ds4_context_engine", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "DS4_CONTEXT_STORE": os.devnull, "NO_COLOR": "1"},
    )


def _one_error_line(stderr: str, code: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error [{code}]: "), stderr
    assert "Traceback" not in stderr


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "config.fifo"
    os.mkfifo(path)
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "config.d"
    path.mkdir()
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "config.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))  # the socket file stays after close; an open() of it fails with ENXIO
    return path


def _symlink_to_fifo(tmp_path: Path) -> Path:
    link = tmp_path / "config.json"
    link.symlink_to(_fifo(tmp_path))
    return link


def _device(tmp_path: Path) -> Path:
    del tmp_path
    return Path("/dev/zero")  # a read of it never ends


NOT_REGULAR = {
    "fifo": _fifo,
    "directory": _directory,
    "socket": _socket,
    "symlink-to-fifo": _symlink_to_fifo,
    "device": _device,
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and Unix sockets")
@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_a_config_that_is_not_a_regular_file_is_refused_at_once(kind, coding, tmp_path):
    config = NOT_REGULAR[kind](tmp_path)
    if not config.exists() and not config.is_socket():
        pytest.skip(f"{config} is not on this system")
    result = _cli("status", coding, "--no-store", "--config", config)
    assert result.returncode == EXIT_ERROR
    _one_error_line(result.stderr, "config-file-unreadable")
    assert result.stdout == ""


def test_a_missing_config_is_the_same_code(coding, tmp_path):
    result = _cli("plan", coding, "--no-store", "--window", "4000", "--config", tmp_path / "nope.json")
    assert result.returncode == EXIT_ERROR
    _one_error_line(result.stderr, "config-file-unreadable")


def _nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return '{"schema": "ds4-context-config-v1", "extra": ' + opener * depth + closer * depth + "}"


@pytest.mark.parametrize(("opener", "closer"), [("[", "]"), ('{"a":', "}")], ids=["arrays", "objects"])
def test_a_config_nested_100000_deep_is_config_too_deep(opener, closer, coding, tmp_path):
    config = tmp_path / "deep.json"
    inner = opener * 100_000 + ("1" if opener != "[" else "") + closer * 100_000
    config.write_text('{"extra": ' + inner + "}", encoding="utf-8")
    result = _cli("config", coding, "--no-store", "--config", config)
    assert result.returncode == EXIT_ERROR
    _one_error_line(result.stderr, "config-too-deep")


def test_the_depth_limit_counts_brackets_only_outside_strings(coding, tmp_path):
    at_limit = tmp_path / "at-limit.json"
    # the document's own object is level 1, so CONFIG_MAX_DEPTH - 1 arrays reach the limit exactly
    at_limit.write_text(_nested(CONFIG_MAX_DEPTH - 1), encoding="utf-8")
    over = tmp_path / "over.json"
    over.write_text(_nested(CONFIG_MAX_DEPTH), encoding="utf-8")
    in_strings = tmp_path / "strings.json"
    in_strings.write_text(json.dumps({"note": "[{" * 1000 + '\\"['}), encoding="utf-8")

    accepted = _cli("config", coding, "--no-store", "--json", "--config", at_limit)
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stderr.strip() == "warning [config-key-unknown]: extra: ignored"
    refused = _cli("config", coding, "--no-store", "--config", over)
    assert refused.returncode == EXIT_ERROR
    _one_error_line(refused.stderr, "config-too-deep")
    quoted = _cli("config", coding, "--no-store", "--json", "--config", in_strings)
    assert quoted.returncode == 0, quoted.stderr
    assert quoted.stderr.strip() == "warning [config-key-unknown]: note: ignored"


def test_a_config_over_the_size_cap_is_refused_without_being_read_whole(coding, tmp_path):
    config = tmp_path / "big.json"
    with config.open("w", encoding="utf-8") as handle:
        handle.write('{"note": "')
        handle.write("x" * (4 * CONFIG_FILE_MAX_BYTES))
        handle.write('"}')
    result = _cli("status", coding, "--no-store", "--config", config)
    assert result.returncode == EXIT_ERROR
    _one_error_line(result.stderr, "config-too-large")


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"\xff\xfe{}", "config-unreadable"), (b'{"budget": ', "config-unreadable")],
    ids=["not-utf8", "truncated"],
)
def test_a_config_that_is_not_json_is_config_unreadable(content, code, coding, tmp_path):
    config = tmp_path / "config.json"
    config.write_bytes(content)
    result = _cli("status", coding, "--no-store", "--config", config)
    assert result.returncode == EXIT_ERROR
    _one_error_line(result.stderr, code)


def test_a_symlink_to_a_regular_config_is_followed(coding, tmp_path):
    target = tmp_path / "dotfiles" / "ds4-context.json"
    target.parent.mkdir()
    target.write_text('{"budget": {"hard_limit_ratio": 0.85}}', encoding="utf-8")
    link = tmp_path / "config.json"
    link.symlink_to(target)
    result = _cli("config", coding, "--no-store", "--json", "--config", link)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["budget"]["hard_limit_ratio"] == 0.85


def _session_with(tmp_path: Path, *entries: dict[str, object]) -> Path:
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in (_HEADER, *entries)), encoding="utf-8")
    return path


def _malformed_sessions(tmp_path: Path) -> dict[str, Path]:
    message = {"type": "message", "id": "m1", "parentId": None, "timestamp": "2026-01-01T00:00:01Z"}
    deep = tmp_path / "deep.jsonl"
    deep.write_text(
        json.dumps(_HEADER) + '\n{"type": "message", "id": "m1", "parentId": null, "message": '
        + '{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}}\n",
        encoding="utf-8",
    )  # fmt: skip
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\xff not json\n")
    directory = tmp_path / "session.d"
    directory.mkdir()
    fifo = tmp_path / "session.fifo"
    os.mkfifo(fifo)
    return {
        "role-not-a-string": _session_with(tmp_path, {**message, "message": {"role": 5, "content": "hi"}}),
        "content-not-a-list": _session_with(tmp_path, {**message, "message": {"role": "user", "content": 7}}),
        "nested-100000-deep": deep,
        "not-json": garbage,
        "a-directory": directory,
        "a-fifo": fifo,
        "missing": tmp_path / "missing.jsonl",
    }


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("command", ["status", "health", "plan"])
def test_malformed_sessions_give_a_code_or_issues_never_a_traceback(command, tmp_path):
    planning = ["--window", "4000", "--model", "openai:gpt-4.1-mini"] if command == "plan" else []
    for name, session in _malformed_sessions(tmp_path).items():
        result = _cli(command, session, "--no-store", *planning)
        assert "Traceback" not in result.stderr, name
        if result.returncode in (0, EXIT_FALLBACK):  # read, the bad line reported as an issue
            continue
        assert result.returncode == EXIT_ERROR, (name, result.returncode, result.stderr)
        _one_error_line(result.stderr, result.stderr.split("[", 1)[1].split("]", 1)[0])


@pytest.mark.parametrize(
    "args",
    [
        ["status", "coding\0.jsonl", "--no-store"],
        ["status", "{coding}", "--store", "store\0.sqlite3"],
        ["status", "{coding}", "--no-store", "--config", "config\0.json"],
        ["index", "a\0b.jsonl"],
        ["demo", "--keep", "demo\0dir"],
    ],
    ids=["session", "store", "config", "index", "demo-keep"],
)
def test_a_path_with_nul_is_a_usage_error_not_an_exception(args, coding):
    # a shell cannot pass a NUL in an argument; a program calling the app (or main) with a list can
    result = runner.invoke(app, [arg.replace("{coding}", str(coding)) for arg in args])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "null" in result.output


def _leaky(*args: object, **kwargs: object) -> object:
    del args, kwargs
    raise RuntimeError("sk-live-SECRET payload the user pasted")


def test_an_unexpected_exception_is_one_line_naming_its_type_and_exit_70(coding, monkeypatch):
    monkeypatch.setattr(commands, "context_status", _leaky)
    result = runner.invoke(app, ["status", str(coding), "--no-store"])
    assert result.exit_code == EXIT_INTERNAL == 70
    assert result.stdout == ""
    assert result.stderr.startswith("error [internal-error]: unexpected RuntimeError")
    assert len(result.stderr.splitlines()) == 1
    assert "SECRET" not in result.output
    assert "SECRET" not in result.stderr


def test_the_console_entry_point_prints_no_traceback_for_an_unexpected_exception(coding):
    code = (
        "import sys\n"
        "from ds4_context_engine import commands\n"
        "def leaky(*args, **kwargs):\n"
        "    raise KeyError('sk-live-SECRET payload')\n"
        "commands.context_tokens = leaky\n"
        f"sys.argv = ['ds4-context', 'tokens', {str(coding)!r}, '--no-store']\n"
        "from ds4_context_engine.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == EXIT_INTERNAL
    _one_error_line(result.stderr, "internal-error")
    assert "KeyError" in result.stderr
    assert "SECRET" not in result.stderr + result.stdout


def test_ordinary_outcomes_keep_their_status(coding):
    # the last resort must not swallow click's own exits: --help, a usage error, a coded error
    assert runner.invoke(app, ["status", "--help"]).exit_code == 0
    assert runner.invoke(app, ["status", str(coding), "--window", "0"]).exit_code == EXIT_USAGE
    missing = runner.invoke(app, ["status", str(coding) + ".missing", "--no-store"])
    assert missing.exit_code == EXIT_ERROR
    assert missing.stderr.startswith("error [pi-session-not-found]")


@pytest.mark.parametrize(
    ("source", "target", "code"),
    [
        # the kit's own loader names an import that raised (docs/core/conformance.md)
        (
            'raise RuntimeError("sk-live-SECRET at import")\n',
            "hostile_target:factory",
            "conformance-target-import-failed",
        ),
        (
            'def factory():\n    raise OSError("sk-live-SECRET in the factory")\n',
            "hostile_target:factory",
            "conformance-target-raised",
        ),
    ],
    ids=["raises-at-import", "factory-function-raises"],
)
def test_a_conformance_target_that_raises_is_a_coded_error(source, target, code, tmp_path, monkeypatch):
    (tmp_path / "hostile_target.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hostile_target", raising=False)
    result = runner.invoke(app, ["conformance", target])
    assert result.exit_code == EXIT_ERROR
    _one_error_line(result.stderr, code)
    assert "SECRET" not in result.output
    assert "SECRET" not in result.stderr


@pytest.mark.parametrize("command", ["--json", "--tables"])
def test_a_reader_that_goes_away_ends_the_command_quietly(command, coding):
    # `ds4-context ... | head -1`: stdout is a pipe nobody reads any more
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "ds4_context_engine", "included", str(coding), "--no-store"]
            + ["--model", "openai:gpt-4.1-mini", "--window", "4000"]
            + (["--json"] if command == "--json" else []),
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (1, "")


@pytest.mark.parametrize("safe_path", [False, True], ids=["plain", "PYTHONSAFEPATH"])
def test_conformance_finds_a_target_in_the_current_directory_as_the_kits_command_does(tmp_path, safe_path):
    (tmp_path / "cwd_adapter.py").write_text(
        "from ds4_context_engine.pi import pi_session_conformance_factory as factory\n", encoding="utf-8"
    )
    environment = {
        key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PYTHONSAFEPATH"}
    }
    if safe_path:
        environment["PYTHONSAFEPATH"] = "1"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ds4-context"), "conformance", "cwd_adapter:factory", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=environment,
        check=False,
        timeout=120,
    )
    if safe_path:  # asked not to import from the current directory
        assert result.returncode == EXIT_ERROR
        _one_error_line(result.stderr, "conformance-target-not-found")
        return
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["passed"] is True
