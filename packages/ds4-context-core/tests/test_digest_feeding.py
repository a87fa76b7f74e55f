"""The task digest's feeding (calls read once and replayed, error lines read once the feed ends) says
exactly what reading every message in full says: the digest text is byte-identical to a reference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core._planner._digest import (
    _COMMAND_CHARS,
    _ENTRY_CHARS,
    _HOST_SUMMARY_ROLES,
    _PATH_KEYS,
    _SEARCH_KEYS,
    _SHELL_KEYS,
    _argument,
    _arguments_tagged,
    _Failure,
    _fold,
    _text,
)
from ds4_context_core._planner._receipt_text import exit_status, first_error_line, tool_kind
from ds4_context_core.pruning import TaskDigestBuilder


class _Reference(TaskDigestBuilder):
    """Every message read in full, every call worked out, every error line read when it comes."""

    def feed(self, messages):
        for message in messages:
            self.consumed += 1
            if message.flags.local_only or message.flags.synthetic:
                continue
            original_role = message.provenance.original_role
            if original_role in _HOST_SUMMARY_ROLES:
                self._host_summary(message)
                continue
            if message.role == "user":
                self._user(message)
            for block in message.blocks:
                if isinstance(block, core.ToolCallBlock):
                    self._reference_call(block)
                elif isinstance(block, core.ToolResultBlock):
                    self._reference_result(block)
            if original_role == "bashExecution":
                self._reference_shell(_text(message))

    def _reference_call(self, call):
        name, arguments = call.name, call.arguments
        if not isinstance(name, str) or _arguments_tagged(arguments):
            return
        kind = tool_kind(name, arguments if isinstance(arguments, dict) else None)
        path = _argument(arguments, _PATH_KEYS)
        short = _fold(path, _ENTRY_CHARS) if path else None
        if kind in ("edit", "write") and short:
            self.changed.put(short, "written" if kind == "write" else "edited")
            key = f"{name} {short}"
        elif kind == "read" and short:
            if short not in self.changed.entries:
                self.read.put(short, "read")
            key = f"{name} {short}"
        elif kind == "shell":
            command = _argument(arguments, _SHELL_KEYS)
            if not command:
                return
            key = _fold(command, _COMMAND_CHARS)
            self.commands.put(key, "")
        elif kind == "search":
            pattern = _argument(arguments, _SEARCH_KEYS)
            where = f" in {short}" if short else ""
            key = f"{name} `{_fold(pattern, _ENTRY_CHARS)}`{where}" if pattern else f"{name}{where}"
            self.searches.put(key, "")
        else:
            main = _argument(arguments, ("command", "query", "url", "pattern", "name", *_PATH_KEYS))
            key = f"{name} {_fold(main, _ENTRY_CHARS)}" if main else name
            self.other.put(key, "")
        if isinstance(call.id, str):
            self._pending[call.id] = (kind, key, short)

    def _reference_result(self, result):
        found = self._pending.pop(result.tool_call_id, None)
        if found is None:
            return
        kind, key, _ = found
        content = result.content if isinstance(result.content, str) else ""
        if kind == "shell":
            status = exit_status(content, result.is_error)
            self.commands.put(key, status, mention=False)
            failed = status != "exit 0"
        else:
            failed = bool(result.is_error)
        if failed:
            line = _fold(
                first_error_line(content) or (content.strip().splitlines() or ["failed"])[0], _ENTRY_CHARS
            )
            self.errors.put(key, line)
            self._failures.append(_Failure(key, line, is_line=True))
        elif key in self.errors.entries:
            self.errors.close(key)

    def _reference_shell(self, text):
        first, _, rest = text.partition("\n")
        if not first.startswith("$ "):
            return
        key = _fold(first[2:], _COMMAND_CHARS)
        status = exit_status(rest, False)
        self.commands.put(key, f"{status} (run by the user)")
        if status != "exit 0":
            line = _fold(first_error_line(rest) or status, _ENTRY_CHARS)
            self.errors.put(key, line)
            self._failures.append(_Failure(key, line, is_line=True))
        else:
            self.errors.close(key)


_PATHS = ("src/a.py", "src/b.py", "tests/test_a.py", "  spaced   path.py ")
_ARGUMENTS = st.one_of(
    st.fixed_dictionaries({"file_path": st.sampled_from(_PATHS)}),
    st.fixed_dictionaries({"path": st.sampled_from(_PATHS), "pattern": st.sampled_from(("x", "y z"))}),
    st.fixed_dictionaries({"command": st.sampled_from(("pytest -q", "make", "ls", "echo [ds4:secret]"))}),
    st.fixed_dictionaries({"file_path": st.sampled_from(_PATHS), "old_string": st.sampled_from(("a", "b"))}),
    st.fixed_dictionaries({"command": st.sampled_from(("view", "create")), "path": st.sampled_from(_PATHS)}),
    st.fixed_dictionaries({"file_path": st.sampled_from(_PATHS), "limit": st.sampled_from((1, True, 1.0))}),
    st.fixed_dictionaries({"paths": st.just(["src/a.py"])}),
    st.fixed_dictionaries({"query": st.sampled_from(("q", "[DS4:x]"))}),
)
_NAMES = ("read", "edit", "write", "bash", "grep", "ls", "str_replace_based_edit_tool", "web_fetch")
_CONTENTS = (
    "ok",
    "1 passed",
    "Traceback (most recent call last):\n  File x\nValueError: bad",
    "FAILED test_a.py\nexit code 1",
    "[exit code 2]",
    "Error: nope\n[exit code 0]",
    "",
    "==== FAILURES ====\r\nerrorx\r\nKeyError: 'k'\nexit code 1",
    "İ: not found\n[exit code 3]",
    "except\u0131on \u017f\nfatal: no",
)
_STEP = st.one_of(
    st.tuples(st.just("user"), st.sampled_from(("fix it", "/model x", "then this", "[ds4:private] no"))),
    st.tuples(
        st.just("call"), st.lists(st.tuples(st.sampled_from(_NAMES), _ARGUMENTS), min_size=1, max_size=3)
    ),
    st.tuples(st.just("result"), st.tuples(st.sampled_from(_CONTENTS), st.booleans())),
    st.tuples(st.just("shell"), st.sampled_from(("$ make\nok", "$ pytest\nError: x\nexit code 1", "no"))),
    st.tuples(st.just("summary"), st.just("## Goal\nship it\n<modified-files>\nsrc/a.py\n</modified-files>")),
)


def _history(steps):
    messages, open_calls = [], []

    def message(role, *blocks, original_role=None):
        entry = f"e{len(messages)}"
        provenance = core.Provenance(
            source="pi-session", session_id="s", entry_id=entry, runtime_id="r", original_role=original_role
        )
        messages.append(
            core.CanonicalMessage(
                id=f"s:{entry}", source_entry_id=entry, role=role, blocks=blocks, provenance=provenance
            )
        )

    for kind, value in steps:
        if kind == "user":
            message("user", core.TextBlock(text=value))
        elif kind == "call":
            blocks = []
            for name, arguments in value:
                call_id = f"c{len(messages)}-{len(blocks)}"
                open_calls.append((call_id, name))
                blocks.append(core.ToolCallBlock(id=call_id, name=name, arguments=arguments))
            message("assistant", *blocks)
        elif kind == "result" and open_calls:
            call_id, name = open_calls.pop(0)
            content, error = value
            message(
                "tool",
                core.ToolResultBlock(tool_call_id=call_id, tool_name=name, content=content, is_error=error),
            )
        elif kind == "shell":
            message("user", core.TextBlock(text=value), original_role="bashExecution")
        elif kind == "summary":
            message("user", core.TextBlock(text=value), original_role="compactionSummary")
    return messages


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(_STEP, max_size=60),
    split=st.integers(min_value=0, max_value=60),
    cap=st.sampled_from((1, 3, 2_000)),
    budget=st.sampled_from((200, 600, 8_000)),
)
def test_digest_is_byte_identical_to_reading_every_message_in_full(steps, split, cap, budget):
    history = _history(steps)
    fast, reference = TaskDigestBuilder(max_entries=cap), _Reference(max_entries=cap)
    # fed in two parts, as a planner does when the cut moves on
    for builder in (fast, reference):
        builder.feed(history[:split])
        builder.feed(history[split:])
    assert fast.render(budget) == reference.render(budget)
    assert fast.consumed == reference.consumed == len(history)


def test_an_error_passed_since_keeps_its_line_when_read_late():
    run = ("call", [("bash", {"command": "pytest -q"})])
    steps = [("user", "fix it"), run, ("result", ("[exit code 2]", False)), run, ("result", ("ok", False))]
    steps += [("call", [("bash", {"command": "make"})]), ("result", ("Error: x\nexit code 1", True))]
    history = _history(steps)
    fast, reference = TaskDigestBuilder(), _Reference()
    fast.feed(history)
    reference.feed(history)
    text = fast.render(8_000)
    assert text == reference.render(8_000)
    assert "- pytest -q: [exit code 2] (passed since)" in text


def test_a_rerun_that_fails_otherwise_keeps_the_earlier_error_line():
    # The same command fails three times, the second time with another error: the digest's one entry for
    # it gives the newest line first, then the other one, once, and keeps both after the call passes.
    run = ("call", [("bash", {"command": "pytest -q"})])
    first = ("result", ("E   KeyError: 'cli-550'\n[exit code 1]", False))
    second = ("result", ("E   KeyError: 'cli-761'\n[exit code 1]", False))
    steps = [("user", "fix it"), run, first, run, second, run, second]
    fast, reference = TaskDigestBuilder(), _Reference()
    fast.feed(_history(steps))
    reference.feed(_history(steps))
    text = fast.render(8_000)
    assert text == reference.render(8_000)
    errors = text.split("Errors, newest first", 1)[1].splitlines()[1]
    assert errors == "- pytest -q: E KeyError: 'cli-761' (earlier: E KeyError: 'cli-550')", text
    fast.feed(_history([*steps, run, ("result", ("3 passed", False))])[len(steps) :])
    assert (
        "- pytest -q: E KeyError: 'cli-761' (earlier: E KeyError: 'cli-550') (passed since)"
        in fast.render(8_000)
    )


def test_an_earlier_error_line_leaves_with_the_failure_once_ten_newer_failures_were_read():
    run = ("call", [("bash", {"command": "pytest -q"})])
    other = ("call", [("bash", {"command": "make"})])
    steps = [run, ("result", ("E   KeyError: 'old'\n[exit code 1]", False))]
    steps += [other, ("result", ("Error: make\n[exit code 2]", False))] * 10
    steps += [run, ("result", ("E   KeyError: 'new'\n[exit code 1]", False))]
    builder = TaskDigestBuilder()
    builder.feed(_history(steps))
    text = builder.render(8_000)
    assert "- pytest -q: E KeyError: 'new'" in text
    assert "'old'" not in text
