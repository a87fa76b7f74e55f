"""The task digest: what the history before the cut says about the task, as deterministic facts.

When the plan's cut leaves old messages out, the model still needs to know what it was asked, what it
changed, what it ran and what is still failing. :class:`TaskDigestBuilder` reads messages once, in
order (``feed``), keeping per category a bounded, most-recent-first record; ``render`` writes the digest
within a character budget by leaving out whole entries, oldest first, and saying how many. Feeding is
O(1) per block and the kept entries are capped, so a source with 10,000 edits stays bounded and linear.

It also reads the summaries a host wrote when it compacted its own history (Pi's ``compaction`` and
``branch_summary`` entries, which the engine turns into user messages whose provenance says
``compactionSummary`` / ``branchSummary``): their goal and their file lists go into the digest, so what
the host compacted is not lost a second time.

The planner keeps one builder in its state and renders the digest only when the cut moves (a
compaction): between compactions it is byte-identical, so the cached prefix survives.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Final, NamedTuple

from ds4_context_core._history._model import CanonicalMessage, TextBlock, ToolCallBlock, ToolResultBlock

from ._index import normalize_tool_name
from ._receipt_text import KIND_BY_ARGUMENTS, exit_status, first_error_line, tool_kind

TASK_DIGEST_HEADER: Final = "[ds4-context task digest]"
# Entries kept per category while feeding: the render can never show more, so more is not kept.
MAX_DIGEST_ENTRIES: Final = 2_000
_REQUEST_CHARS: Final = 1_200
_INSTRUCTION_CHARS: Final = 300
_ENTRY_CHARS: Final = 200
# A command is named by its head: enough to tell it from the others (and to find it again), not a
# whole script.
_COMMAND_CHARS: Final = 100
# At most this many of the newest later instructions and errors take the budget before the
# identities of the calls (commands, searches, other calls, reads) have theirs; older ones follow
# when there is room left.
_FIRST_INSTRUCTIONS: Final = 6
_FIRST_ERRORS: Final = 8
_PASSED_SINCE: Final = " (passed since)"
_RECENT_FAILURES: Final = 10  # as many as the results a model looks back on
_SUMMARY_CHARS: Final = 1_500
_HOST_SUMMARY_ROLES: Final = frozenset({"compactionSummary", "branchSummary"})
# A user message that is only a host command (``/mode plan``, ``/model x``, ``/compact``) is no request.
_COMMAND: Final = re.compile(r"^/[A-Za-z][\w:.-]*(?:\s+\S+){0,3}$")
# Text holding a privacy marker tag is left out: its spans only mean what they say in their own string.
_TAG: Final = re.compile(r"\[/?ds4:", re.IGNORECASE)
_FILE_TAGS: Final = re.compile(r"<(modified-files|read-files)>\s*(.*?)\s*</\1>", re.DOTALL)
_GOAL: Final = re.compile(r"^#+\s*Goal\s*$(.*?)(?=^#+\s|\Z)", re.MULTILINE | re.DOTALL | re.IGNORECASE)
# How many tool names' kinds a builder remembers (those in ``KIND_BY_ARGUMENTS`` never are).
_KIND_CACHE: Final = 256
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filename", "file", "target_file")
_SHELL_KEYS: Final = ("command", "cmd", "script")
_SEARCH_KEYS: Final = ("pattern", "query", "glob", "regex")


def _tagged(text: str) -> bool:
    """Whether ``text`` holds a privacy marker tag. Every tag holds ``4:`` as it is (digits and colons
    have no case), and finding that is far cheaper than the case-insensitive pattern."""
    return "4:" in text and _TAG.search(text) is not None


def _arguments_tagged(arguments: object) -> bool:
    """Whether a call's arguments hold a privacy marker tag: its keys and text values looked at one
    by one (a flat mapping, the usual case), else its whole ``repr``."""
    if not isinstance(arguments, dict):
        return _tagged(repr(arguments))
    for key, value in arguments.items():
        if isinstance(key, str) and _tagged(key):
            return True
        if isinstance(value, str):
            if _tagged(value):
                return True
        elif not (value is None or isinstance(value, int | float)):  # bool is an int
            return _tagged(repr(arguments))
    return False


def _fold(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _text(message: CanonicalMessage) -> str:
    blocks = message.blocks
    if len(blocks) == 1 and type(blocks[0]) is TextBlock:  # the usual user message: nothing to join
        return blocks[0].text.strip()
    return "\n".join(block.text for block in blocks if type(block) is TextBlock).strip()


def _argument(arguments: object, keys: tuple[str, ...]) -> str | None:
    if isinstance(arguments, dict):
        for key in keys:
            value = arguments.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return None


def is_host_command(text: str) -> bool:
    """Whether a user message is only a slash command or a mode switch, not a request."""
    return bool(_COMMAND.match(text.strip()))


class _Seen(NamedTuple):
    """What one call puts: the entry it puts in which store (a read only when the file was not
    changed), and what its result needs (its kind, its identity and its path)."""

    store: _Recent
    entry: str
    value: str
    read: bool
    found: tuple[str, str, str | None]


def _flat(arguments: object) -> bool:
    """Whether a call's arguments are a mapping of text keys to text, numbers or nothing: then equal
    arguments are read the same way, whichever objects hold them."""
    if type(arguments) is not dict:
        return False
    for key, value in arguments.items():
        if type(key) is not str or not (value is None or type(value) in (str, int, float, bool)):
            return False
    return True


class _Recent:
    """Keys in order of their last mention (newest last), each with a value and how many times it was
    mentioned; at most ``cap`` kept."""

    __slots__ = ("cap", "counting", "counts", "entries", "forgotten")

    def __init__(self, cap: int, *, counting: bool = False) -> None:
        self.cap = cap
        self.counting = counting  # whether mentions are counted (only the commands show a count)
        self.entries: OrderedDict[str, str] = OrderedDict()
        self.counts: dict[str, int] = {}
        self.forgotten = 0

    def put(self, key: str, value: str, *, mention: bool = True) -> None:
        entries = self.entries
        if key in entries:
            entries.move_to_end(key)
        entries[key] = value
        if self.counting and (mention or key not in self.counts):
            self.counts[key] = self.counts.get(key, 0) + 1
        if len(entries) > self.cap:
            gone, _ = entries.popitem(last=False)
            self.counts.pop(gone, None)
            self.forgotten += 1

    def pop(self, key: str) -> None:
        self.entries.pop(key, None)
        self.counts.pop(key, None)

    def close(self, key: str) -> None:
        """Mark an error as passed since, in place: it ages out with the errors of its time."""
        value = self.entries.get(key)
        if value is not None and not value.endswith(_PASSED_SINCE):
            self.entries[key] = value + _PASSED_SINCE


class _Failure:
    """One failed call: its identity and its result, read down to its error line once asked."""

    __slots__ = ("is_line", "key", "text")

    def __init__(self, key: str, text: str, *, is_line: bool = False) -> None:
        self.key, self.text, self.is_line = key, text, is_line

    def line(self) -> str:
        if not self.is_line:
            text = self.text
            line = first_error_line(text) or (text.strip().splitlines() or ["failed"])[0]
            self.text, self.is_line = _fold(line, _ENTRY_CHARS), True
        return self.text


class TaskDigestBuilder:
    """Reads messages once, in history order, and renders the task digest of all it has read."""

    def __init__(self, *, max_entries: int = MAX_DIGEST_ENTRIES) -> None:
        cap = max(1, max_entries)
        self.consumed = 0  # how many messages were fed
        self.request: str | None = None
        self.instructions = _Recent(cap)
        self.changed = _Recent(cap)  # path -> what was done to it
        self.read = _Recent(cap)  # path -> "read"
        self.commands = _Recent(cap, counting=True)  # command -> its last outcome (and its runs)
        self.searches = _Recent(cap)  # "grep pattern in path" -> ""
        self.other = _Recent(cap)  # "tool argument" -> ""
        self.errors = _Recent(cap)  # call identity -> its first error line (and whether it passed since)
        self.summaries = _Recent(8)  # host summaries: entry id -> goal text
        self._pending: dict[str, tuple[str, str, str | None]] = {}  # call id -> (kind, key, path)
        self._kinds: dict[str, str] = {}  # tool name -> its kind (a session uses few names, many times)
        self._serial = 0
        # errors whose line is not read yet (call identity -> its newest failure): a later failure of the
        # same call replaces it unread, the rest are read when the feed ends
        self._unread: dict[str, _Failure] = {}
        # the newest failures: a call that failed again with another error still shows the earlier line
        # while it is among the results a model looks back on (each read only when rendered)
        self._failures: deque[_Failure] = deque(maxlen=_RECENT_FAILURES)

    def feed(self, messages: Iterable[CanonicalMessage]) -> None:
        try:
            self._feed(messages)
        finally:
            self._read_errors()

    def _read_errors(self) -> None:
        unread, entries = self._unread, self.errors.entries
        for key, failure in unread.items():
            if key in entries:  # not aged out since
                entries[key] = failure.line()
        unread.clear()

    def _read_error(self, key: str) -> None:
        failure = self._unread.pop(key, None)
        if failure is not None and key in self.errors.entries:
            self.errors.entries[key] = failure.line()

    def _feed(self, messages: Iterable[CanonicalMessage]) -> None:  # noqa: PLR0915 - one loop, all left out
        # What a call adds depends only on its name and its arguments, and a session repeats its calls
        # (the same file read, the same test run): a flat call is worked out once per feed and then
        # replayed (the entry it puts, its identity and its path); the rest are worked out each time.
        # This loop runs for every message a cold plan leaves out, so what it does per block is kept to
        # dictionary look-ups; anything more is a method call made only when a block can add something.
        seen: dict[tuple[object, ...], _Seen | None] = {}
        pending = self._pending
        open_errors = self.errors.entries
        changed = self.changed.entries
        counted = 0
        try:
            for message in messages:
                counted += 1
                flags = message.flags
                if flags.local_only or flags.synthetic:
                    continue
                original_role = message.provenance.original_role
                if original_role is not None and original_role in _HOST_SUMMARY_ROLES:
                    self._host_summary(message)
                    continue
                if message.role == "user":
                    self._user(message)
                for block in message.blocks:
                    if type(block) is ToolResultBlock:
                        found = pending.pop(block.tool_call_id, None)
                        if found is None:
                            continue
                        if found[0] != "shell" and not block.is_error:
                            # a call that went through only closes its own open error, if it has one
                            if found[1] in open_errors:
                                self._close(found[1])
                            continue
                        self._outcome(block, found)
                    elif type(block) is ToolCallBlock:
                        arguments = block.arguments
                        done: _Seen | None
                        if type(arguments) is dict:
                            try:
                                signature = (block.name, *arguments.items())
                                done = seen[signature]
                            except KeyError:
                                done = self._call(block)
                                if _flat(arguments):
                                    seen[signature] = done
                            except TypeError:  # a value that cannot be hashed
                                done = self._call(block)
                            else:
                                if done is not None and not (done.read and done.entry in changed):
                                    done.store.put(done.entry, done.value)
                        else:
                            done = self._call(block)
                        if done is not None and isinstance(block.id, str):
                            pending[block.id] = done.found
                if original_role == "bashExecution":  # a command the user ran in the host's shell
                    self._user_shell(_text(message))
        finally:
            self.consumed += counted

    def _user(self, message: CanonicalMessage) -> None:
        text = _text(message)
        if not text or _tagged(text):
            return
        blocks = message.blocks
        # one text block answers no call: no need to look for results
        answers = not (len(blocks) == 1 and type(blocks[0]) is TextBlock) and bool(message.tool_result_ids)
        if not answers and not is_host_command(text):
            if self.request is None:
                self.request = _fold(text, _REQUEST_CHARS)
            else:
                self._serial += 1
                self.instructions.put(str(self._serial), _fold(text, _INSTRUCTION_CHARS))

    def _host_summary(self, message: CanonicalMessage) -> None:
        text = _text(message)
        if not text or _tagged(text):
            return
        for tag, body in _FILE_TAGS.findall(text):
            for line in body.splitlines():
                path = line.strip()
                if path:
                    (self.changed if tag == "modified-files" else self.read).put(
                        _fold(path, _ENTRY_CHARS),
                        "changed (per the host's summary)" if tag == "modified-files" else "read",
                    )
        goal = _GOAL.search(text)
        gist = goal.group(1) if goal else _FILE_TAGS.sub("", text)
        self.summaries.put(message.id, _fold(gist, _SUMMARY_CHARS))

    def _call(self, call: ToolCallBlock) -> _Seen | None:
        """Puts what ``call`` says and returns it (to replay for the same call again), or None when it
        says nothing (it holds a tag, or it is a shell call without a command)."""
        name, arguments = call.name, call.arguments
        if not isinstance(name, str) or _arguments_tagged(arguments):
            return None
        kind = self._kinds.get(name)
        if kind is None:
            kind = tool_kind(name, arguments if isinstance(arguments, dict) else None)
            if len(self._kinds) < _KIND_CACHE and normalize_tool_name(name) not in KIND_BY_ARGUMENTS:
                self._kinds[name] = kind
        path = _argument(arguments, _PATH_KEYS)
        short_path = _fold(path, _ENTRY_CHARS) if path else None
        if kind in ("edit", "write") and short_path:
            value = "written" if kind == "write" else "edited"
            done = _Seen(self.changed, short_path, value, False, (kind, f"{name} {short_path}", short_path))
        elif kind == "read" and short_path:
            done = _Seen(self.read, short_path, "read", True, (kind, f"{name} {short_path}", short_path))
        elif kind == "shell":
            command = _argument(arguments, _SHELL_KEYS)
            if not command:
                return None
            key = _fold(command, _COMMAND_CHARS)
            done = _Seen(self.commands, key, "", False, (kind, key, short_path))
        elif kind == "search":
            pattern = _argument(arguments, _SEARCH_KEYS)
            where = f" in {short_path}" if short_path else ""
            key = f"{name} `{_fold(pattern, _ENTRY_CHARS)}`{where}" if pattern else f"{name}{where}"
            done = _Seen(self.searches, key, "", False, (kind, key, short_path))
        else:
            main = _argument(arguments, ("command", "query", "url", "pattern", "name", *_PATH_KEYS))
            key = f"{name} {_fold(main, _ENTRY_CHARS)}" if main else name
            done = _Seen(self.other, key, "", False, (kind, key, short_path))
        if not (done.read and done.entry in self.changed.entries):  # a file changed is not listed as read too
            done.store.put(done.entry, done.value)
        return done

    def _close(self, key: str) -> None:
        self._read_error(key)
        self.errors.close(key)

    def _result(self, result: ToolResultBlock) -> None:
        found = self._pending.pop(result.tool_call_id, None)
        if found is not None:
            self._outcome(result, found)

    def _outcome(self, result: ToolResultBlock, found: tuple[str, str, str | None]) -> None:
        kind, key, _ = found
        content = result.content if isinstance(result.content, str) else ""
        if kind == "shell":
            status = exit_status(content, result.is_error)
            self.commands.put(key, status, mention=False)
            failed = status != "exit 0"
        else:
            failed = bool(result.is_error)
        if failed:
            self.errors.put(key, "")  # its line is read once no later failure of the call replaces it
            # one read of its line serves both the entry and the earlier lines of a later rerun
            failure = _Failure(key, content)
            self._unread[key] = failure
            self._failures.append(failure)
        elif key in self.errors.entries:
            self._close(key)  # the same call went through since: no longer open, said so

    def _user_shell(self, text: str) -> None:
        first, _, rest = text.partition("\n")
        if not first.startswith("$ "):
            return
        key = _fold(first[2:], _COMMAND_CHARS)
        status = exit_status(rest, False)
        self.commands.put(key, f"{status} (run by the user)")
        if status != "exit 0":
            self._unread.pop(key, None)
            line = _fold(first_error_line(rest) or status, _ENTRY_CHARS)
            self.errors.put(key, line)
            self._failures.append(_Failure(key, line, is_line=True))
        else:
            self._close(key)

    def _errors(self) -> list[str]:
        """The open and recent errors, newest first: each call's newest error line, then the other lines
        its failures among the newest said (oldest first), so a rerun that fails otherwise hides nothing."""
        earlier: dict[str, list[str]] = {}
        for failure in self._failures:
            earlier.setdefault(failure.key, []).append(failure.line())
        lines = []
        for key, value in reversed(self.errors.entries.items()):
            passed = value.endswith(_PASSED_SINCE)
            newest = value.removesuffix(_PASSED_SINCE)
            others = [line for line in dict.fromkeys(earlier.get(key, ())) if line != newest]
            if others:
                newest += f" (earlier: {' | '.join(others)})"
            entry = newest + _PASSED_SINCE if passed else newest
            lines.append(f"{key}: {entry}" if entry else key)
        return lines

    def render(self, max_chars: int) -> str | None:
        """The digest within ``max_chars`` (whole entries only, newest kept first), or None when empty.

        One short line per call identity: a command run several times is listed once, with its count
        and its last exit status. The budget goes first to the files changed, the newest errors, the
        host's summaries and the newest instructions, then to the identities of the calls, then to the
        older errors and instructions; what does not fit is counted, never cut.
        """

        def values(store: _Recent) -> list[str]:
            return list(reversed(store.entries.values()))

        def keys(store: _Recent) -> list[str]:
            return list(reversed(store.entries))

        def runs(store: _Recent) -> list[str]:
            counts = store.counts
            lines = []
            for key, value in reversed(store.entries.items()):
                count = counts.get(key, 1)
                head = f"{key} (x{count})" if count > 1 else key
                lines.append(f"{head}: {value}" if value else head)
            return lines

        read_only = [path for path in keys(self.read) if path not in self.changed.entries]
        # In the order they are shown; ``_PASSES`` says which fill the budget first.
        sections = [
            ("Host summary of earlier work", values(self.summaries), self.summaries.forgotten),
            ("Later instructions, newest first", values(self.instructions), self.instructions.forgotten),
            ("Errors, newest first", self._errors(), self.errors.forgotten),
            ("Files changed, newest first", keys(self.changed), self.changed.forgotten),
            ("Commands run, newest first, with exit status", runs(self.commands), self.commands.forgotten),
            ("Searches", keys(self.searches), self.searches.forgotten),
            ("Other tool calls", keys(self.other), self.other.forgotten),
            ("Files read", read_only, self.read.forgotten),
        ]
        if self.request is None and not any(entries for _, entries, _ in sections):
            return None
        lines = [TASK_DIGEST_HEADER + " what the earlier messages, no longer shown, established:"]
        if self.request is not None:
            lines.append(f"Original request: {self.request}")
        used = sum(len(line) + 1 for line in lines)
        used += sum(len(title) + 30 for title, entries, _ in sections if entries)  # titles and counts
        taken: dict[int, list[str]] = {number: [] for number in range(len(sections))}
        full: set[int] = set()
        for number, most in _PASSES:
            entries, chosen = sections[number][1], taken[number]
            if number in full:
                continue
            for entry in entries[len(chosen) : most]:
                if used + len(entry) + 3 > max_chars:
                    full.add(number)  # newest first: an older entry never takes a newer one's place
                    break
                chosen.append(entry)
                used += len(entry) + 3
        for number, (title, entries, forgotten) in enumerate(sections):
            if not entries:
                continue
            chosen = taken[number]
            left = len(entries) - len(chosen) + forgotten
            if chosen:
                lines.append(f"{title} ({left} older not shown):" if left else f"{title}:")
                lines.extend(f"- {entry}" for entry in chosen)
            else:
                lines.append(f"{title}: {left} not shown")
        while len(lines) > 2 and sum(len(line) + 1 for line in lines) > max_chars + 1:
            lines.pop()  # a whole line at a time, should the estimate above have been short
        return "\n".join(lines)


# (section, how many of its newest entries at most) in the order they take the budget: the files
# changed (the host's summaries' lists included), the newest errors, the host's summaries, the newest
# instructions, the identities of the calls, then the older errors and instructions.
_PASSES: Final = (
    (3, MAX_DIGEST_ENTRIES),
    (2, _FIRST_ERRORS),
    (0, MAX_DIGEST_ENTRIES),
    (1, _FIRST_INSTRUCTIONS),
    (4, MAX_DIGEST_ENTRIES),
    (5, MAX_DIGEST_ENTRIES),
    (6, MAX_DIGEST_ENTRIES),
    (7, MAX_DIGEST_ENTRIES),
    (2, MAX_DIGEST_ENTRIES),
    (1, MAX_DIGEST_ENTRIES),
)


def build_task_digest(messages: Iterable[CanonicalMessage], *, max_chars: int = 8_000) -> str | None:
    """The task digest of ``messages`` (e.g. what a plan left out), without the planner or any store."""
    builder = TaskDigestBuilder()
    builder.feed(messages)
    return builder.render(max_chars)
