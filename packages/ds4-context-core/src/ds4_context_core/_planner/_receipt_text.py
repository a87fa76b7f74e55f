"""What a receipt says about each call: one fact line per tool kind, from the call and its result.

A receipt stands in for tool steps the plan no longer sends verbatim, so each line carries what the model
needs to go on without them: for a read the path and range (two reads of different ranges must not look
the same), for an edit or a write the path and how many lines changed, for a shell command the command,
its exit status and its first error line, for a search the pattern, where, and how many hits, for any
other tool its name and main argument. Lines never invite the model to repeat a call that changed
something; how to see an original again depends on whether the host offers a restore tool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from ._index import normalize_tool_name

TOOL_KINDS: Final = ("read", "edit", "write", "shell", "search", "other")

# Normalised names (lower case, no ``_``/``-``) of Pi's tools and those of other common hosts.
_READ: Final = frozenset({"read", "readfile", "view", "cat", "open", "notebookread", "fetch", "webfetch"})
_EDIT: Final = frozenset(
    {"edit", "multiedit", "strreplace", "applypatch", "patch", "notebookedit", "replace", "editfile"}
)
_WRITE: Final = frozenset({"write", "writefile", "create", "createfile"})
_EDITORS: Final = frozenset({"strreplaceeditor", "strreplacebasededittool", "texteditor"})
# The (normalized) tool names whose kind depends on their arguments, not on the name alone.
KIND_BY_ARGUMENTS: Final = _EDITORS
_SHELL: Final = frozenset(
    {"bash", "shell", "sh", "zsh", "exec", "run", "terminal", "command", "runcommand", "execcommand"}
)
_SEARCH: Final = frozenset(
    {"grep", "rg", "ripgrep", "glob", "find", "search", "ls", "list", "listdir", "tree", "websearch"}
)
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filename", "file", "target_file")
_SEARCH_KEYS: Final = ("pattern", "query", "glob", "regex", "name")
_SHELL_KEYS: Final = ("command", "cmd", "script")
_OTHER_KEYS: Final = ("command", "file_path", "path", "pattern", "query", "url", "glob", "name", "id")
_ARGUMENT_CHARS: Final = 120
_ERROR_LINE_CHARS: Final = 160
_EXIT: Final = re.compile(
    r"(?:\[exit code (-?\d+)\]|exited with (?:code|status) (-?\d+)|exit (?:code|status)[:= ]+(-?\d+))",
    re.IGNORECASE,
)
_ERROR_WORDS: Final = re.compile(
    r"\b(?:error|errors|failed|failure|fail|traceback|exception|panic|fatal|denied|not found)\b|Error\b",
    re.IGNORECASE,
)


_LINE_END: Final = re.compile(r"[\r\n]")
# A substring of every word ``_ERROR_WORDS`` matches, lower case.
_ERROR_STEMS: Final = ("error", "fail", "traceback", "exception", "panic", "fatal", "denied", "not found")
_ERROR_STEM: Final = re.compile("|".join(_ERROR_STEMS))
# ``_ERROR_WORDS`` for lowered ASCII text: no case to ignore.
_LOWER_ERROR_WORDS: Final = re.compile(_ERROR_WORDS.pattern.replace("|Error", "|error"))
# Where ``exit_status`` looks first.
_EXIT_TAIL_CHARS: Final = 2_048
# A traceback's header, which names no error.
_BARE_HEADER: Final = re.compile(r"^\s*Traceback \(most recent call last\):?\s*$")


def tool_kind(name: str, arguments: Mapping[str, object] | None = None) -> str:
    """``read``, ``edit``, ``write``, ``shell``, ``search`` or ``other`` for a tool name (any host's)."""
    normal = normalize_tool_name(name) if isinstance(name, str) else ""
    if normal in _EDITORS:  # Anthropic's text editor: the command decides
        command = arguments.get("command") if arguments else None
        return (
            {"view": "read", "create": "write"}.get(command, "edit") if isinstance(command, str) else "edit"
        )
    for kind, names in (
        ("read", _READ),
        ("edit", _EDIT),
        ("write", _WRITE),
        ("shell", _SHELL),
        ("search", _SEARCH),
    ):
        if normal in names:
            return kind
    return "other"


def mutating(kind: str) -> bool:
    """Whether a call of ``kind`` may have changed something outside the session."""
    return kind in ("edit", "write", "shell", "other")


def _short(value: str, limit: int) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _first(arguments: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    return None


def _lines(value: object) -> int:
    return value.count("\n") + 1 if isinstance(value, str) and value else 0


def _edit_change(arguments: Mapping[str, object]) -> str:
    """``replaced 3 lines with 5`` from whichever old/new pair a host's edit tool uses."""
    pairs: list[tuple[object, object]] = []
    edits = arguments.get("edits")
    if isinstance(edits, list):
        for edit in edits:
            if isinstance(edit, Mapping):
                pairs.append(_pair(edit))
    else:
        pairs.append(_pair(arguments))
    pairs = [(old, new) for old, new in pairs if old is not None or new is not None]
    if not pairs:
        patch = arguments.get("patch") or arguments.get("input") or arguments.get("diff")
        if isinstance(patch, str):
            added = sum(
                1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")
            )
            removed = sum(
                1 for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")
            )
            return f"patch +{added} -{removed} lines"
        inserted = arguments.get("insert_line")
        if inserted is not None:
            return f"inserted at line {inserted}"
        return "changed"
    old_lines = sum(_lines(old) for old, _ in pairs)
    new_lines = sum(_lines(new) for _, new in pairs)
    where = f" in {len(pairs)} places" if len(pairs) > 1 else ""
    return f"replaced {old_lines} line(s) with {new_lines}{where}"


def _pair(arguments: Mapping[str, object]) -> tuple[object, object]:
    old = next(
        (arguments[k] for k in ("old_string", "oldText", "old_str", "old_text", "old") if k in arguments),
        None,
    )
    new = next(
        (arguments[k] for k in ("new_string", "newText", "new_str", "new_text", "new") if k in arguments),
        None,
    )
    return old, new


def exit_status(result: str, is_error: bool) -> str:
    """``exit 0``, ``exit 2``, or ``failed`` when the result names no code but is an error."""
    # the last one: a command's own output may quote other exit codes first. It is almost always at
    # the end: the tail is searched first, and a match there is the last one of the whole text.
    start = max(0, len(result) - _EXIT_TAIL_CHARS)
    found = None
    if "xit" in result.lower():  # every form the pattern matches has these letters; finding them is cheap
        found = _last_match(result, start) if start else None
        if found is None:
            found = _last_match(result, 0)
    if found is not None:
        code = next(group for group in found.groups() if group is not None)
        return f"exit {code}"
    return "failed" if is_error else "exit 0"


def _last_match(text: str, start: int) -> re.Match[str] | None:
    found = None
    for found in _EXIT.finditer(text, start):  # noqa: B007 - the loop keeps the last one
        pass
    return found


def first_error_line(result: str) -> str | None:
    """The first line of ``result`` that reads like an error and says which, shortened; ``None`` when
    there is none.

    A bare ``Traceback (most recent call last):`` header says only that something failed: the line
    that names the exception (or any later error line) is taken instead, and the header only when
    nothing follows it.
    """
    header: str | None = None
    lowered = result.lower()
    if len(lowered) != len(result):  # a character whose lower case is longer: positions would not match
        lines = (line for line in result.splitlines() if _ERROR_WORDS.search(line))
        line = next((line for line in lines if not _BARE_HEADER.match(line)), None)
        return _short(line, _ERROR_LINE_CHARS) if line is not None else None
    # The pattern scans slowly (case-insensitive alternatives): it only runs on the lines where a plain
    # search of the lowered text finds one of its words, and no other line can match. On ASCII text the
    # lowered text matches a case-sensitive copy of the pattern exactly where the original matches it.
    plain = result.isascii()
    words, text = (_LOWER_ERROR_WORDS.search, lowered) if plain else (_ERROR_WORDS.search, result)
    found = _ERROR_STEM.search(lowered)
    while found is not None:
        first = found.start()
        end = _LINE_END.search(result, first)
        stop = end.start() if end is not None else len(result)
        begin = -1
        if not plain:  # the case-insensitive pattern may match where the lowered text holds no word
            begin = max(lowered.rfind("\n", 0, first), lowered.rfind("\r", 0, first)) + 1
        # On ASCII text every match begins with an error word and none is found on this line before
        # ``first``: the line's match, if any, begins there (``\b`` still sees the character before).
        if words(text, first if plain else begin, stop) is not None:
            if plain:
                begin = max(lowered.rfind("\n", 0, first), lowered.rfind("\r", 0, first)) + 1
            line = result[begin:stop]
            if not _BARE_HEADER.match(line):
                return _short(line, _ERROR_LINE_CHARS)
            header = header or line
        found = _ERROR_STEM.search(lowered, stop)
    return _short(header, _ERROR_LINE_CHARS) if header is not None else None


def _hits(result: str) -> int:
    return sum(1 for line in result.splitlines() if line.strip())


def call_line(
    name: str,
    arguments: Mapping[str, object],
    *,
    result: str,
    output_chars: int,
    is_error: bool,
    interrupted: bool,
) -> str:
    """The fact line of one call (without the leading ``- ``)."""
    kind = tool_kind(name, arguments)
    tool = _short(name, 60) if isinstance(name, str) else "?"
    path = _first(arguments, _PATH_KEYS)
    where = f" {_short(path, _ARGUMENT_CHARS)}" if path else ""
    if kind == "read":
        target = where or f" {_short(_first(arguments, ('url',)) or '', _ARGUMENT_CHARS)}"
        extent = "".join(
            f" {key}={arguments[key]}"
            for key in ("offset", "limit", "view_range", "start_line", "end_line")
            if isinstance(arguments.get(key), int | list) and not isinstance(arguments.get(key), bool)
        )
        fact = f"read{target.rstrip()}{extent}"
        outcome = f"{output_chars} chars, {_lines(result)} lines"
    elif kind == "edit":
        fact = f"edited{where}: {_edit_change(arguments)}"
        outcome = "done"
    elif kind == "write":
        content = arguments.get("content") or arguments.get("file_text") or arguments.get("text")
        size = f"{_lines(content)} lines, {len(content)} chars" if isinstance(content, str) else "content"
        fact = f"wrote{where}: {size}"
        outcome = "done"
    elif kind == "shell":
        command = _first(arguments, _SHELL_KEYS) or ""
        fact = f"ran `{_short(command, _ARGUMENT_CHARS)}`"
        outcome = f"{exit_status(result, is_error)}, {output_chars} chars of output"
    elif kind == "search":
        pattern = _first(arguments, _SEARCH_KEYS)
        what = f" `{_short(pattern, _ARGUMENT_CHARS)}`" if pattern else ""
        fact = f"{tool}{what}{' in' + where if where and pattern else where}"
        outcome = f"{_hits(result)} hit line(s)"
    else:
        main = _first(arguments, _OTHER_KEYS)
        fact = f"{tool} {_short(main, _ARGUMENT_CHARS)}" if main else tool
        outcome = f"{output_chars} chars"
    if interrupted:
        return f"{fact} -> interrupted: no result came back"
    if is_error and kind != "shell":
        outcome = "failed" if kind in ("edit", "write") else f"{outcome}, failed"
    line = f"{fact} -> {outcome}"
    if is_error or (kind == "shell" and not exit_status(result, is_error).endswith(" 0")):
        error = first_error_line(result)
        if error:
            line += f'; first error: "{error}"'
    return line
