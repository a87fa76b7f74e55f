"""The ds4-context-reference command, run as a real process."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import msgspec
from reference_helpers import SESSION, make_message

from ds4_context_core import TextBlock
from ds4_context_reference_adapter import read_reference_history

SECRET = "sk-do-not-print-this-0123456789abcdef"


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [sys.executable, "-m", "ds4_context_reference_adapter", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return subprocess.CompletedProcess(
        completed.args, completed.returncode, completed.stdout.decode(), completed.stderr.decode()
    )


def test_create_append_show_and_verify_round_trip(tmp_path, project):
    path = tmp_path / "h.jsonl"
    created = _cli("create", str(path), "--session-id", SESSION, "--project-root", str(project))
    assert created.returncode == 0, created.stderr
    first = make_message("u1", TextBlock(text=f"my key is {SECRET}"))
    second = make_message("u2")
    assert _cli("append", str(path), stdin=msgspec.json.encode(first)).returncode == 0
    message_file = tmp_path / "message.json"
    message_file.write_bytes(msgspec.json.encode(second))
    appended = _cli("append", str(path), "--message", str(message_file))
    assert (appended.returncode, appended.stdout) == (0, f"appended {SESSION}:u2 at line 3\n")
    assert read_reference_history(path).messages == (first, second)

    revision = hashlib.sha256(path.read_bytes()).hexdigest()
    shown = _cli("show", str(path), "--last", "5")
    assert shown.returncode == 0
    assert revision in shown.stdout
    assert f"{SESSION}:u1" in shown.stdout
    assert SECRET not in shown.stdout
    as_json = json.loads(_cli("show", str(path), "--json", "--last", "1").stdout)
    assert as_json["summary"]["messages"] == 2
    assert as_json["summary"]["revision"] == revision
    assert [row["id"] for row in as_json["messages"]] == [f"{SESSION}:u2"]

    verified = _cli("verify", str(path), "--session-id", SESSION, "--trusted-project-root", str(project))
    assert (verified.returncode, verified.stdout) == (0, f"ok: 2 messages, revision {revision}\n")


def test_refusals_exit_one_with_a_single_coded_line_and_change_nothing(history, project):
    before = history.read_bytes()
    again = _cli("create", str(history), "--session-id", SESSION, "--project-root", str(project))
    assert again.returncode == 1
    assert again.stderr == "create failed: reference-history-exists path-exists\n"

    garbage = _cli("append", str(history), stdin=b'{"id": "' + SECRET.encode() + b'"')
    assert garbage.returncode == 1
    assert garbage.stderr == "append failed: reference-history-message-rejected record-invalid\n"
    assert SECRET not in garbage.stdout + garbage.stderr

    foreign = _cli("append", str(history), stdin=msgspec.json.encode(make_message("u1", session="other")))
    assert foreign.stderr == "append failed: reference-history-message-rejected provenance-mismatch\n"
    assert history.read_bytes() == before

    wrong_session = _cli("verify", str(history), "--session-id", "other")
    assert (wrong_session.returncode, wrong_session.stderr) == (
        1,
        "verify failed: canonical-history-identity-mismatch session-id-mismatch\n",
    )


def test_verify_names_a_torn_record_and_leaves_it(history):
    with history.open("ab") as handle:
        handle.write(b'{"type":"message","mess')
    before = history.read_bytes()
    verified = _cli("verify", str(history))
    assert verified.returncode == 1
    assert verified.stderr == "verify failed: canonical-history-read-failed unterminated-record at line 2\n"
    assert _cli("show", str(history)).returncode == 1
    assert history.read_bytes() == before


def test_a_wrong_command_line_exits_two(history):
    assert _cli("verify").returncode == 2
    assert _cli("frobnicate", str(history)).returncode == 2
