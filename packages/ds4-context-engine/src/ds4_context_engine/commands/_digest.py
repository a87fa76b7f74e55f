"""The task digest: what a plan's cut took away from the task, kept as one small deterministic summary.

When a long session is cut, the model loses the user's original request, the instructions given since,
which files were read and changed, which commands ran and what failed: the task state that LLM-written
summaries are known to drop. The digest is built from the cut messages alone, without a model: the first
request (a slash command or mode switch is no request), the later user instructions (the first few and
the latest), the files changed and read, every distinct tool call (tool and main argument, once, with a
count and the last outcome), the recent errors, and what the host's own compaction summaries said. It goes
to the planner as a ``summary`` supplement, which the planner puts in front of the history.

It is bounded by leaving out whole entries (oldest first, with a count), never by cutting one, and it
is built incrementally: a :class:`DigestBuilder` reads each cut message once, so a compaction costs what
it newly cut. Between compactions the cut does not move, so the digest, and with it the cached prefix,
stays byte-identical.
"""

from __future__ import annotations

import copy
import re
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NamedTuple

from ds4_context_core import CanonicalMessage, TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_core.config import DEFAULT_WRITE_TOOLS
from ds4_context_core.planner import ContextPlan, SupplementalItem
from ds4_context_core.pruning import call_path, is_host_command, normalize_tool_name

# What the commands package exports (its lazy map names the same; tests/test_lazy_exports.py). The
# builder and the cut helpers are the package's own: siblings import them by name.
__all__ = [
    "CUT_SUPPLEMENT_PASSES",
    "TASK_DIGEST_HEADER",
    "TASK_DIGEST_ID",
    "TASK_DIGEST_MAX_CHARS",
    "SettledPlan",
    "TaskDigestReader",
    "plan_with_cut_supplements",
    "settle_cut_supplements",
    "task_digest",
]

CUT_SUPPLEMENT_PASSES: Final = 3
TASK_DIGEST_ID: Final = "ds4-task-digest"
TASK_DIGEST_HEADER: Final = "[task state: what the earlier messages this context leaves out established]"
TASK_DIGEST_MAX_CHARS: Final = 16_000
_MIN_DIGEST_CHARS: Final = 1_000
# The digest takes at most a sixth of the hard limit and three quarters of the summaries' ceiling
# (less what the model-written summaries placed with it take).
_HARD_LIMIT_SHARE: Final = 6
_CEILING_SHARE: Final = 0.75
_CHARS_PER_TOKEN: Final = 3  # paths and commands tokenise densely: a safe side for the budget
_REQUEST_CHARS: Final = 600
_INSTRUCTION_CHARS: Final = 160
_OPEN_ERRORS: Final = 10  # as many as the results a model looks back on
_ARGUMENT_CHARS: Final = 160
_ERROR_CHARS: Final = 160
_EARLY_INSTRUCTIONS: Final = 4
_LATE_INSTRUCTIONS: Final = 8
_MAX_ENTRIES: Final = 2_000  # per category while feeding: a source with 10,000 edits stays bounded
_HOST_SUMMARY_ROLES: Final = frozenset({"compactionSummary", "branchSummary"})
_FILE_TAGS: Final = re.compile(r"<(modified-files|read-files)>\s*(.*?)\s*</\1>", re.DOTALL)
_GOAL: Final = re.compile(r"^#+\s*Goal\s*$(.*?)(?=^#+\s|\Z)", re.MULTILINE | re.DOTALL | re.IGNORECASE)
_SHELL_TOOLS: Final = frozenset({"bash", "shell", "exec", "run", "terminal", "execcommand", "runcommand"})
_SEARCH_TOOLS: Final = frozenset({"grep", "glob", "find", "search", "rg", "ripgrep", "ls", "list"})
_READ_TOOLS: Final = frozenset({"read", "readfile", "view", "cat", "open"})
_MAIN_KEYS: Final = (
    "command", "cmd", "script", "file_path", "path", "notebook_path", "filename",
    "pattern", "query", "url", "glob", "name",
)  # fmt: skip
_EXIT: Final = re.compile(r"\[exit code (-?\d+)\]|exit (?:code|status)[ =:]*(-?\d+)", re.IGNORECASE)
_ERROR_LINE: Final = re.compile(r"error|fail|traceback|exception|panic", re.IGNORECASE)
_PASSED: Final = " (passed since)"
_BARE_TRACEBACK: Final = re.compile(r"\s*traceback \(most recent call last\):?\s*$", re.IGNORECASE)
# Text holding a privacy marker tag is left out: its spans only mean what they say in their own string.
_TAG: Final = re.compile(r"\[/?ds4:", re.IGNORECASE)
# Kinds whose items send a history message as it was written.
_VERBATIM_KINDS: Final = frozenset({"message", "pin", "current-request"})


def cut_messages(messages: Sequence[CanonicalMessage], plan: ContextPlan) -> Sequence[CanonicalMessage]:
    """The messages before ``plan``'s cut, empty when the plan sends every one of them verbatim.

    The cut is the planner's sticky one (``plan.state.dropped_messages``), which moves only in a
    compaction: what is built from it (the digest, the retrieved history) then stays byte-identical from
    one step to the next, whatever the plan keeps in front of it (pins, an earlier request held there).
    """
    if plan.fallback is not None:
        return messages[:0]
    cut = min(plan.state.dropped_messages, len(messages))
    held = {
        item.original_index
        for item in plan.items
        if item.kind in _VERBATIM_KINDS and item.original_index is not None and item.original_index < cut
    }
    return messages[:0] if len(held) >= cut else messages[:cut]


def digest_chars(plan: ContextPlan, *, beside: Iterable[SupplementalItem] = ()) -> int:
    """The characters the digest of ``plan``'s cut may take: a share of its hard limit and of the
    summaries' ceiling, less what the ``beside`` summaries (placed with it, same ceiling) take."""
    budget = plan.budget
    ceiling = int(budget.summary_ceiling * _CEILING_SHARE) * _CHARS_PER_TOKEN
    ceiling -= sum(len(item.text) for item in beside if item.kind == "summary")
    chars = min(ceiling, budget.hard_limit // _HARD_LIMIT_SHARE * _CHARS_PER_TOKEN)
    return max(_MIN_DIGEST_CHARS, min(TASK_DIGEST_MAX_CHARS, chars))


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(message: CanonicalMessage) -> str:
    return "\n".join(block.text for block in message.blocks if isinstance(block, TextBlock))


def _main_argument(arguments: object) -> str | None:
    if isinstance(arguments, dict):
        for key in _MAIN_KEYS:
            value = arguments.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return None


def _outcome(result: ToolResultBlock) -> tuple[str, str | None]:
    """``(status, first error line)`` of a result: status ``""`` when it went through."""
    content = result.content if isinstance(result.content, str) else ""
    # re's IGNORECASE scan costs ~0.1 ms per KB; most results never say "exit", and casefold is cheap
    found = _EXIT.search(content) if "exit" in content.casefold() else None
    code = next((group for group in found.groups() if group is not None), "0") if found else "0"
    if not result.is_error and code == "0":
        return "", None
    # a line that says something: not a banner of '=' or '-' around one word (pytest's FAILURES), and
    # not a bare traceback header, which only says that something failed (the exception's line does)
    lines = [line for line in content.splitlines() if len(line.strip(" =-_*#")) > len("FAILURES")]
    matching = [line for line in lines if _ERROR_LINE.search(line)]
    named = (line for line in matching if not _BARE_TRACEBACK.match(line))
    line = next(named, matching[0] if matching else lines[0] if lines else "failed")
    return (f"exit {code}" if code != "0" else "error"), _shorten(line, _ERROR_CHARS)


class _Recent:
    """Keys in order of their last mention (newest last), each with a value; at most ``cap`` kept."""

    __slots__ = ("cap", "entries", "forgotten")

    def __init__(self, cap: int = _MAX_ENTRIES) -> None:
        self.cap = cap
        self.entries: OrderedDict[str, list[object]] = OrderedDict()
        self.forgotten = 0

    def copy(self) -> _Recent:
        twin = _Recent(self.cap)
        twin.entries = OrderedDict((key, list(record)) for key, record in self.entries.items())
        twin.forgotten = self.forgotten
        return twin

    def touch(self, key: str) -> list[object]:
        """The record of ``key`` (``[count, status]``), counted once more and moved to the newest end."""
        record = self.entries.get(key)
        if record is None:
            record = self.entries[key] = [0, ""]
            if len(self.entries) > self.cap:
                self.entries.popitem(last=False)
                self.forgotten += 1
        else:
            self.entries.move_to_end(key)
        record[0] = int(str(record[0])) + 1
        return record


class DigestBuilder:
    """Reads cut messages once, in history order, and renders the digest of all it has read.

    ``consumed`` messages were fed; ``last_id`` is the id of the last one, so a caller can tell whether
    a longer cut of the same history extends what was fed (feed the rest) or not (start a new builder).
    """

    def __init__(self, *, write_tools: Iterable[str] = DEFAULT_WRITE_TOOLS) -> None:
        self.writers = frozenset(normalize_tool_name(name) for name in write_tools)
        self.consumed = 0
        self.last_id: str | None = None
        self.used = 0  # messages neither local-only nor synthetic
        self.request: tuple[str, str] | None = None  # (message id, text)
        self.early: list[tuple[str, str]] = []
        self.late: list[tuple[str, str]] = []
        self.skipped = 0
        self.changed = _Recent()  # path -> [count, "edit"/"write" ...]
        self.read = _Recent()
        self.calls: dict[str, _Recent] = {}  # tool -> identity -> [count, last status]
        # identity -> first error line of its newest failure (marked once the same call went through)
        self.errors: OrderedDict[str, str] = OrderedDict()
        # (identity, error line) of the newest failures read: a call that failed again with another
        # error still shows the earlier one while it is among the results a model looks back on
        self.failures: deque[tuple[str, str]] = deque(maxlen=_OPEN_ERRORS)
        self.host: list[str] = []  # goals of the host's own compaction summaries, newest last
        self.tools: Counter[str] = Counter()
        self._pending: dict[str, tuple[str, str]] = {}  # call id -> (tool, identity)

    def copy(self) -> DigestBuilder:
        """An independent builder that has read the same: fed more, it leaves this one as it is."""
        twin = copy.copy(self)
        twin.early, twin.late, twin.host = list(self.early), list(self.late), list(self.host)
        twin.changed, twin.read = self.changed.copy(), self.read.copy()
        twin.calls = {name: records.copy() for name, records in self.calls.items()}
        twin.errors, twin.tools = OrderedDict(self.errors), Counter(self.tools)
        twin.failures = deque(self.failures, maxlen=_OPEN_ERRORS)
        twin._pending = dict(self._pending)
        return twin

    def feed(self, messages: Iterable[CanonicalMessage]) -> None:
        for message in messages:
            self.consumed += 1
            self.last_id = message.id
            if message.flags.local_only or message.flags.synthetic:
                continue
            self.used += 1
            if message.provenance.original_role in _HOST_SUMMARY_ROLES:
                self._host_summary(_text(message))
                continue
            if message.role == "user" and not message.tool_result_ids:
                self._instruction(message)
            for block in message.blocks:
                if isinstance(block, ToolCallBlock):
                    self._call(block)
                elif isinstance(block, ToolResultBlock):
                    self._result(block)

    def _instruction(self, message: CanonicalMessage) -> None:
        text = _text(message).strip()
        if not text or _TAG.search(text) or is_host_command(text):
            return
        if self.request is None:
            self.request = (message.id, _shorten(text, _REQUEST_CHARS))
            return
        entry = (message.id, _shorten(text, _INSTRUCTION_CHARS))
        if len(self.early) < _EARLY_INSTRUCTIONS:
            self.early.append(entry)
            return
        self.late.append(entry)
        if len(self.late) > _LATE_INSTRUCTIONS:
            self.late.pop(0)
            self.skipped += 1

    def _host_summary(self, text: str) -> None:
        if not text or _TAG.search(text):
            return
        for tag, body in _FILE_TAGS.findall(text):
            for line in body.splitlines():
                path = line.strip()
                if path:
                    if tag == "modified-files":
                        self.changed.touch(_shorten(path, _ARGUMENT_CHARS))[1] = "per the host's summary"
                    else:
                        self.read.touch(_shorten(path, _ARGUMENT_CHARS))
        goal = _GOAL.search(text)
        gist = goal.group(1) if goal else _FILE_TAGS.sub("", text)
        self.host = [*self.host[-3:], _shorten(gist, _REQUEST_CHARS)]

    def _call(self, call: ToolCallBlock) -> None:
        name, arguments = call.name, call.arguments
        if not isinstance(name, str) or _TAG.search(repr(arguments)):
            return
        self.tools[name] += 1
        tool = normalize_tool_name(name)
        path = call_path(call)
        short = _shorten(path, _ARGUMENT_CHARS) if path else None
        if short is not None and tool in self.writers:
            record = self.changed.touch(short)
            record[1] = "write" if "write" in tool or "create" in tool else "edit"
            identity = short
        elif short is not None and tool in _READ_TOOLS:
            self.read.touch(short)
            identity = short
        else:
            main = _main_argument(arguments)
            identity = _shorten(main, _ARGUMENT_CHARS) if main else ""
            if tool in _SEARCH_TOOLS and isinstance(arguments, dict):
                pattern = arguments.get("pattern") or arguments.get("query")
                if isinstance(pattern, str) and pattern.strip() and short is not None:
                    identity = f"`{_shorten(pattern, _ARGUMENT_CHARS)}` in {short}"
            self.calls.setdefault(name, _Recent()).touch(identity)
        if isinstance(call.id, str):
            self._pending[call.id] = (name, identity)

    def _result(self, result: ToolResultBlock) -> None:
        found = self._pending.pop(result.tool_call_id, None)
        if found is None:
            return
        name, identity = found
        status, line = _outcome(result)
        calls = self.calls.get(name)
        if calls is not None and identity in calls.entries:
            calls.entries[identity][1] = status
        key = f"{name} {identity}".strip()
        if line is not None:
            self.errors.pop(key, None)
            self.errors[key] = line  # the newest failure of the call, open until the same call goes through
            self.failures.append((key, line))
            if len(self.errors) > _MAX_ENTRIES:
                self.errors.popitem(last=False)
        elif key in self.errors and not self.errors[key].endswith(_PASSED):
            # kept in its place, marked: the model still reads what the recent failure said
            self.errors[key] += _PASSED

    def _error_entry(self, key: str, line: str) -> str:
        """The newest error line of ``key``, with the other lines of its failures among the newest read
        (oldest first): a rerun that fails otherwise does not hide what the previous run said."""
        passed = line.endswith(_PASSED)
        newest = line.removesuffix(_PASSED)
        earlier = list(
            dict.fromkeys(seen for failed, seen in self.failures if failed == key and seen != newest)
        )
        if earlier:
            newest += f" (earlier: {' | '.join(earlier)})"
        return newest + _PASSED if passed else newest

    def source_ids(self) -> tuple[str, ...]:
        """The requests the digest quotes (restore shows them)."""
        quoted = [self.request, *self.early, *self.late] if self.request is not None else []
        return tuple(message_id for message_id, _ in quoted if message_id)

    def render(self, max_chars: int = TASK_DIGEST_MAX_CHARS) -> str | None:
        """The digest within ``max_chars``: whole entries only, the oldest left out first, with counts."""
        if not self.used or (self.request is None and not self.tools and not self.host):
            return None
        # What does not change from one compaction to the next comes first (the header, the original
        # request, the first instructions, the host's summaries), then the lists that grow at their ends,
        # then what moves (the latest instructions, the recent errors, the counts): a provider's prompt
        # cache keeps the longest run of unchanged text.
        lines = [TASK_DIGEST_HEADER]
        if self.request is not None:
            lines.append(f"Original request: {self.request[1]}")
        if self.early:
            lines.append("First instructions:")
            lines.extend(f"- {text}" for _, text in self.early)
        lines.extend(f"Host summary of earlier work: {gist}" for gist in self.host)
        moving: list[str] = []
        if self.late:
            more = f" ({self.skipped} before them not shown)" if self.skipped else ""
            moving.append(f"Latest instructions, oldest first{more}:")
            moving.extend(f"- {text}" for _, text in self.late)
        counts = ", ".join(f"{name} {count}" for name, count in sorted(self.tools.items()))
        tail = [f"Tool calls: {counts}"] if counts else []
        tail.append(f"(from the {self.consumed} earlier messages this context leaves out)")
        room = max_chars - sum(len(line) + 1 for line in lines + moving + tail)

        def entries(records: _Recent, show: Callable[[str, list[object]], str]) -> list[str]:
            return [show(key, record) for key, record in reversed(records.entries.items())]

        def counted(key: str, record: list[object]) -> str:
            count, status = int(str(record[0])), str(record[1])
            extra = [f"x{count}"] if count > 1 else []
            if status:
                extra.append(status)
            return f"{key} ({', '.join(extra)})" if extra else key

        errors = [f"{key}: {self._error_entry(key, line)}" for key, line in reversed(self.errors.items())]
        # (title, entries newest first, forgotten, separator, moving): in the order the budget serves them
        sections: list[tuple[str, list[str], int, str, bool]] = [
            ("Files changed", entries(self.changed, counted), self.changed.forgotten, ", ", False),
            ("Recent errors", errors[:_OPEN_ERRORS], max(0, len(errors) - _OPEN_ERRORS), "; ", True),
        ]
        for name in sorted(self.calls):
            records = self.calls[name]
            shown = [entry for entry in entries(records, counted) if entry]
            sections.append((f"{name} calls", shown, records.forgotten, " | ", False))
        read_only = [key for key in reversed(self.read.entries) if key not in self.changed.entries]
        sections.append(("Files read", read_only, self.read.forgotten, ", ", False))
        # every section's title first, then entries newest first, section by section, while they fit
        taken: list[list[str]] = [[] for _ in sections]
        room -= sum(len(title) + 24 for title, listed, _, _, _ in sections if listed)
        for number, (_, listed, _, separator, _) in enumerate(sections):
            for entry in listed:
                cost = len(entry) + len(separator)
                if cost > room:
                    break
                taken[number].append(entry)
                room -= cost
        body: list[str] = []
        for (title, listed, forgotten, separator, moves), chosen in zip(sections, taken, strict=True):
            if not listed:
                continue
            left = len(listed) - len(chosen) + forgotten
            note = f" ({left} older not shown)" if left else ""
            # oldest first on the line, so what a later compaction adds goes at the end
            line = f"{title}{note}: {separator.join(reversed(chosen))}" if chosen else f"{title}{note}"
            (moving if moves else body).append(line)
        text = "\n".join([*lines, *body, *moving, *tail])
        while len(text) > max_chars and len(lines) > 1:
            lines.pop()  # a whole line at a time, should the instructions alone pass the budget
            text = "\n".join([*lines, *body, *moving, *tail])
        return text if len(text) <= max_chars else None


def task_digest(
    messages: Sequence[CanonicalMessage],
    plan: ContextPlan,
    *,
    write_tools: Iterable[str] = DEFAULT_WRITE_TOOLS,
    max_chars: int | None = None,
) -> SupplementalItem | None:
    """The digest of what ``plan`` cut from ``messages``, or None when it cut nothing usable.

    Messages flagged ``local_only`` or ``synthetic`` are left out of it. ``write_tools`` (normalised
    names, as in the pruning configuration) decide which files count as changed. ``max_chars``
    (default :func:`digest_chars` of the plan) bounds it.
    """
    builder = DigestBuilder(write_tools=write_tools)
    builder.feed(cut_messages(messages, plan))
    return digest_item(builder, max_chars if max_chars is not None else digest_chars(plan))


def digest_item(builder: DigestBuilder, max_chars: int) -> SupplementalItem | None:
    """The supplement of what ``builder`` read, within ``max_chars``; None when there is nothing."""
    text = builder.render(max_chars)
    if text is None:
        return None
    return SupplementalItem(id=TASK_DIGEST_ID, kind="summary", text=text, source_ids=builder.source_ids())


class TaskDigestReader:
    """The task digest of a growing history's cut, each message read once for all the plans of a session.

    A compaction feeds it only what it newly cut, so a 10,000-edit history costs one pass in all, not one
    per compaction. It keeps the few newest readers (the planning passes of one step may try a cut and
    come back to an earlier one): a copy of the furthest that read a prefix of the cut is fed the rest. A
    history that is not an extension of what was read (a host compaction starts another branch view) is
    read afresh. ``fed`` counts the messages read in all, for a host that checks what a step costs.
    """

    def __init__(self, *, write_tools: Iterable[str] = DEFAULT_WRITE_TOOLS, keep: int = 4) -> None:
        self._write_tools = tuple(write_tools)
        self._keep = max(1, keep)
        self._held: list[tuple[str | None, DigestBuilder]] = []
        self.fed = 0

    def digest(
        self,
        messages: Sequence[CanonicalMessage],
        plan: ContextPlan,
        *,
        beside: Iterable[SupplementalItem] = (),
        max_chars: int | None = None,
    ) -> SupplementalItem | None:
        """The digest of what ``plan`` cut from ``messages`` (as :func:`task_digest` builds it)."""
        cut = len(cut_messages(messages, plan))
        if not cut:
            return None
        limit = max_chars if max_chars is not None else digest_chars(plan, beside=beside)
        return digest_item(self.builder(messages, cut), limit)

    def builder(self, messages: Sequence[CanonicalMessage], cut: int) -> DigestBuilder:
        """The reader fed with ``messages[:cut]``, from the furthest kept one that read a prefix of it."""
        first = messages[0].id if messages else None
        best: DigestBuilder | None = None
        for held_first, held in self._held:
            if (
                held_first == first
                and held.consumed <= cut
                and (not held.consumed or messages[held.consumed - 1].id == held.last_id)
                and (best is None or held.consumed > best.consumed)
            ):
                best = held
        if best is not None and best.consumed == cut:
            return best
        builder = best.copy() if best is not None else DigestBuilder(write_tools=self._write_tools)
        self.fed += cut - builder.consumed
        builder.feed(messages[builder.consumed : cut])
        self._held = [*self._held, (first, builder)][-self._keep :]
        return builder


def cut_key(messages: Sequence[CanonicalMessage], plan: ContextPlan) -> tuple[int, str | None, str | None]:
    """What names the cut of ``plan`` in a session that grows by appends: its length, first and last id.

    Two plans with the same key cut the same messages, so what was built from the cut still holds.
    """
    cut = len(cut_messages(messages, plan))
    if not cut:
        return 0, None, None
    return cut, messages[0].id, messages[cut - 1].id


def plan_with_cut_supplements(
    messages: Sequence[CanonicalMessage],
    plan: ContextPlan,
    supplements_for: Callable[[ContextPlan], Sequence[SupplementalItem]],
    replan: Callable[[tuple[SupplementalItem, ...]], ContextPlan],
    *,
    passes: int = CUT_SUPPLEMENT_PASSES,
) -> ContextPlan:
    """``plan`` again with the supplements that stand for what it cut, until they sit on their own cut.

    ``supplements_for(plan)`` gives them (the task digest, retrieved history); ``replan(extra)`` must plan
    the same messages from the same state as ``plan`` with ``extra`` added. The supplements' tokens come
    from the oldest kept history, which can move the cut; they are then rebuilt for the new cut, at most
    ``passes`` times, so that the next turn (whose cut is this one while nothing is compacted) builds the
    very same digest and the cached prefix survives.
    """
    return settle_cut_supplements(messages, plan, supplements_for, replan, passes=passes).plan


class SettledPlan(NamedTuple):
    """A plan with the supplements built for its cut, and the cut they were built for."""

    plan: ContextPlan
    extra: tuple[SupplementalItem, ...]
    key: tuple[int, str | None, str | None]


def settle_cut_supplements(
    messages: Sequence[CanonicalMessage],
    plan: ContextPlan,
    supplements_for: Callable[[ContextPlan], Sequence[SupplementalItem]],
    replan: Callable[[tuple[SupplementalItem, ...]], ContextPlan],
    *,
    planned_with: tuple[SupplementalItem, ...] = (),
    planned_for: tuple[int, str | None, str | None] | None = None,
    passes: int = CUT_SUPPLEMENT_PASSES,
) -> SettledPlan:
    """:func:`plan_with_cut_supplements` starting from a plan made with ``planned_with`` already.

    ``planned_for`` is the cut key ``planned_with`` was built for (the previous step's). When ``plan``
    still cuts there, nothing is rebuilt and nothing is planned again: between compactions a step costs
    one plan, and the digest and the retrieved items stay byte-identical (updated in batches, at each
    compaction, not at every step). The key returned is the cut of the plan returned, which was planned
    with the supplements returned: should the passes end before the supplements sit on their own cut,
    the next step at that cut still keeps them byte for byte instead of rebuilding them.

    A plan at the very edge of the soft limit can still change them without compacting: the plan with
    the carried supplements compacts, the supplements rebuilt for its cut come out a few tokens smaller,
    and the plan made with them fits at the old cut. That plan is returned (it holds what was cut, where
    keeping the old supplements on the moved cut would lose it); the next step compacts.
    """
    extra = planned_with
    built_for = planned_for
    for _ in range(passes):
        key = cut_key(messages, plan)
        if key == built_for:
            break
        fresh = tuple(supplements_for(plan)) if key[0] else ()
        built_for = key
        if fresh == extra:
            break
        extra = fresh
        plan = replan(extra)
    return SettledPlan(plan, extra, cut_key(messages, plan))
