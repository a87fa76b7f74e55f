"""Layers 1 and 2: judged trimming of old tool results and deterministic receipts for read-only steps."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Final, Protocol, runtime_checkable

import msgspec

from ds4_context_core.config import DEFAULT_EVIDENCE_WORDS, DEFAULT_READ_ONLY_TOOLS, DEFAULT_WRITE_TOOLS

from ._index import normalize_tool_name
from ._receipt_text import call_line, mutating, tool_kind

JUDGE_REASONS: Final = (
    "edited-later",
    "evidence",
    "recent",
    "reread-later",
    "side-effect",
    "size",
    "tool-kind",
)

# Why a candidate was not trimmed or receipted; counted per compaction in ``CompactionReport``.
PRUNING_GATES: Final = (
    "assistant-text-too-long",
    "evidence",
    "keep-above-quantile",
    "low-gain",
    "max-per-pass",
    "never-prune",
    "not-read-only",
    "protected",
    "range-too-small",
    "reasoning-too-long",
    "receipt-too-large",
    "recent",
    "side-effect",
    "too-small",
)

TRIM_MARKER_PREFIX: Final = "[ds4-context: "
RECEIPT_HEADER: Final = "[ds4-context receipt]"
_IDENTIFYING_KEYS: Final = (
    "command",
    "file_path",
    "notebook_path",
    "pattern",
    "query",
    "path",
    "url",
    "glob",
)
_PAYLOAD_KEYS: Final = frozenset(
    {"content", "old_string", "new_string", "prompt", "new_source", "edits", "patch"}
)
_ARGUMENT_CHARS: Final = 120
_SHELL_TOOLS: Final = frozenset({"bash", "shell", "sh", "exec", "run", "terminal", "command"})
# How many rounded keep probabilities one judge remembers (see ``DefaultJudge._one``).
_ROUNDED_KEEPS: Final = 4096
# Evidence words sharing a substring this long are searched behind it first (see ``_search_groups``).
_GUARD_CHARS: Final = 4


class JudgeCandidate(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One old tool result that could be trimmed. ``content`` is the (sanitized) result text."""

    message_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, object]
    content: str
    is_error: bool
    messages_after: int
    later_reread: bool
    later_edited: bool
    has_evidence: bool


class Verdict(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """P(still needed verbatim for the goal) and P(the call changed state outside the session)."""

    keep_probability: float
    side_effect_probability: float
    reason: str = "tool-kind"


@runtime_checkable
class Judge(Protocol):
    """Scores trimming candidates. Must return one verdict per candidate, in order, deterministically."""

    def judge(self, candidates: Sequence[JudgeCandidate], *, goal: str) -> Sequence[Verdict]: ...


class DefaultJudge:
    """A deterministic, local judge: tool kind, recency, size, evidence words, later re-reads and edits."""

    def __init__(
        self,
        *,
        read_only_tools: Iterable[str] = DEFAULT_READ_ONLY_TOOLS,
        write_tools: Iterable[str] = DEFAULT_WRITE_TOOLS,
        recent_messages: int = 40,
    ) -> None:
        self._read_only = frozenset(normalize_tool_name(name) for name in read_only_tools)
        self._write = frozenset(normalize_tool_name(name) for name in write_tools)
        self._recent = max(1, recent_messages)
        self._names: dict[str, str] = {}  # tool name -> normalised, for the few names of one session
        # keep in [0, 1] -> rounded to 6 places: a session yields few distinct keeps, and rounding a
        # float to a number of places is the costliest step of judging one candidate.
        self._rounded: dict[float, float] = {}

    def judge(self, candidates: Sequence[JudgeCandidate], *, goal: str) -> Sequence[Verdict]:
        del goal  # the local judge scores structure, not meaning
        return [self._one(candidate) for candidate in candidates]

    def _one(self, candidate: JudgeCandidate) -> Verdict:
        tool_name = candidate.tool_name
        name = self._names.get(tool_name) if type(tool_name) is str else None
        if name is None:
            name = normalize_tool_name(tool_name)
            if type(tool_name) is str:
                self._names[tool_name] = name
        if name in self._read_only:
            keep, side_effect = 0.3, 0.02
        elif name in self._write:
            keep, side_effect = 0.6, 0.9
        elif name in _SHELL_TOOLS:
            keep, side_effect = 0.4, 0.6
        else:
            keep, side_effect = 0.45, 0.5
        reason = "tool-kind"
        freshness = max(0.0, 1.0 - candidate.messages_after / self._recent)
        if freshness > 0:
            keep += 0.3 * freshness
            reason = "recent"
        if len(candidate.content) > 8000:
            keep -= 0.1
            reason = "size" if reason == "tool-kind" else reason
        if candidate.later_edited:
            keep -= 0.2
            reason = "edited-later"
        elif candidate.later_reread:
            keep -= 0.15
            reason = "reread-later"
        if candidate.has_evidence or candidate.is_error:
            keep += 0.35
            reason = "evidence"
        if type(keep) is float:
            clamped = keep if keep > 0.0 else 0.0  # min(1.0, max(0.0, keep)), without two calls
            if not clamped < 1.0:
                clamped = 1.0
            rounded = self._rounded.get(clamped)
            if rounded is None:
                rounded = round(clamped, 6)
                if len(self._rounded) < _ROUNDED_KEEPS:
                    self._rounded[clamped] = rounded
        else:  # a candidate of odd field types: exactly as it always was
            rounded = round(min(1.0, max(0.0, keep)), 6)
        return Verdict(keep_probability=rounded, side_effect_probability=side_effect, reason=reason)


@lru_cache(maxsize=32)
def _evidence_words(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({word.strip().lower() for word in words if word.strip()}))


def _at_boundary(text: str, start: int, end: int) -> bool:
    # A word counts at an identifier or camelCase boundary: "debug" has no "bug", "parseError" has one.
    before = text[start - 1] if start > 0 else ""
    camel = (before.islower() or before.isdigit()) and text[start].isupper()
    if before.isalnum() and not camel:
        return False
    after = text[end : end + 3]
    if after[:1].islower() and after[:1].isalpha():
        # plural and past forms keep the word ("errors"); any other letter makes it a different word
        plural = after[:1] == "s" and not after[1:2].isalpha()
        return plural or (after[:2] == "ed" and not after[2:3].isalpha())
    return True


def contains_evidence(text: str, words: Sequence[str] = DEFAULT_EVIDENCE_WORDS) -> bool:
    """Whether ``text`` mentions an evidence word (errors, failures, todos, ...) that must be kept.

    Matching ignores case but respects identifier and camelCase boundaries, so ``debug`` does not
    contain ``bug`` while ``parseError`` and ``ERROR:`` contain ``error``.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters change length when lowered; stay exact
        lowered = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    return _found(text, lowered, _evidence_words(tuple(words)))


def evidence_words(words: Sequence[str]) -> tuple[str, ...]:
    """The word list ``contains_evidence`` searches for ``words`` (for ``scan_evidence``)."""
    return _evidence_words(tuple(words))


def scan_evidence(text: str, words: tuple[str, ...]) -> bool:
    """``contains_evidence`` with the word list already resolved by ``evidence_words``."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    return _found(text, lowered, words)


def _starts_in(guard: str, word: str) -> bool:
    return word.startswith(guard) or " " + guard in word


@lru_cache(maxsize=32)
def _search_groups(words: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``words`` in groups, each behind a *guard*: a substring of every word of its group.

    Where two or more words begin (or have a part that begins) with the same ``_GUARD_CHARS`` or more
    characters (``fail`` in ``fail:`` and ``failed``, ``trace`` in ``stack trace`` and ``traceback``),
    a text without them contains none of those words, so one search over a long text replaces
    several. Every word is in exactly one group (a word alone guards itself), so ``_found`` gives the
    same answer either way; the grouping only decides how many searches a text without evidence costs.
    """
    left = list(dict.fromkeys(words))
    groups: list[tuple[str, tuple[str, ...]]] = []
    while True:
        best: tuple[int, int, str] | None = None
        starts = {
            part[:end]
            for word in left
            for part in word.split(" ")
            for end in range(_GUARD_CHARS, len(part) + 1)
        }
        for guard in sorted(starts):
            shared = sum(1 for word in left if _starts_in(guard, word))
            if shared >= 2 and (best is None or (shared, len(guard)) > best[:2]):
                best = (shared, len(guard), guard)
        if best is None:
            break
        guard = best[2]
        groups.append((guard, tuple(word for word in left if _starts_in(guard, word))))
        left = [word for word in left if not _starts_in(guard, word)]
    groups.extend((word, (word,)) for word in left)
    return tuple(groups)


def _found(text: str, lowered: str, words: tuple[str, ...]) -> bool:
    find = lowered.find
    for guard, group in _search_groups(words):
        if len(group) > 1 and find(guard) < 0:
            continue  # no word of the group can occur
        for word in group:
            start = find(word)
            while start >= 0:
                if _at_boundary(text, start, start + len(word)):
                    return True
                start = find(word, start + 1)
    return False


def trim_text(
    text: str, head_chars: int, tail_chars: int, original_id: str, *, restore_tool: str | None = None
) -> str | None:
    """Head + one marker + tail, by code point; ``None`` when that would not strictly shrink ``text``.

    The marker names ``original_id`` only with ``restore_tool``, the tool the host offers the model to
    get the original back.
    """
    removed = len(text) - head_chars - tail_chars
    if removed <= 0:
        return None
    how = (
        f'; the original is restorable: call {restore_tool} with id "{_short(original_id)}"'
        if restore_tool
        else "; the original is intact and restorable by the host"
    )
    marker = f"\n{TRIM_MARKER_PREFIX}{removed} characters trimmed here{how}]\n"
    trimmed = text[:head_chars] + marker + (text[len(text) - tail_chars :] if tail_chars else "")
    return trimmed if len(trimmed) < len(text) else None


def _short(value: str, limit: int = _ARGUMENT_CHARS) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def identifying_arguments(arguments: object) -> str:
    """The most identifying argument of a call, else short ``key=value`` pairs without payload keys."""
    if not isinstance(arguments, dict):
        return ""
    for key in _IDENTIFYING_KEYS:
        value = arguments.get(key)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return _short(f"{key}={value}")
    pairs = []
    for key in sorted(arguments, key=str):
        value = arguments[key]
        if key in _PAYLOAD_KEYS or not isinstance(value, str | int | float | bool):
            continue
        pairs.append(f"{key}={value}")
    return _short(" ".join(pairs))


class ReceiptCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call a receipt names. ``result`` is the result's text (only facts are taken from it: a
    line count, an exit status, the first error line); ``interrupted`` marks a call without a result."""

    tool_name: str
    arguments: dict[str, object]
    output_chars: int
    is_error: bool
    result: str = ""
    interrupted: bool = False


def build_receipt_text(
    *,
    receipt_id: str,
    first_message_id: str,
    last_message_id: str,
    message_count: int,
    calls: Sequence[ReceiptCall],
    assistant_notes: str,
    note_chars: int,
    restore_tool: str | None = None,
) -> str:
    """The deterministic fact list that stands in for compacted tool steps (no model inference).

    One line per call (see ``_receipt_text.call_line``). The receipt id is named only with
    ``restore_tool``, the tool the host offers the model to get the originals back; without one the
    text names no id the model could not use. Calls that changed something are never offered for
    re-running. ``first_message_id`` and ``last_message_id`` stay out of the text for the same reason.
    """
    del first_message_id, last_message_id  # ids the model has no use for (the manifest records them)
    total = sum(call.output_chars for call in calls)
    kinds = {tool_kind(call.tool_name, call.arguments) for call in calls}
    lines = [
        f"{RECEIPT_HEADER} {len(calls)} earlier tool call(s) over {message_count} message(s), "
        f"{total} characters of output, shown here as facts."
    ]
    if restore_tool:
        lines.append(f'The originals are intact: call {restore_tool} with id "{receipt_id}" to see them.')
    elif any(mutating(kind) for kind in kinds):
        lines.append(
            "Edits, writes and commands listed here already ran: do not repeat them. "
            "Read or search again to see a file's current content."
        )
    else:
        lines.append("Read or search again to see a result.")
    notes = " ".join(assistant_notes.split())
    if notes and note_chars > 0:
        quoted = notes if len(notes) <= note_chars else notes[: max(0, note_chars - 3)] + "..."
        lines.append(f'Assistant notes: "{quoted}"')
    for call in calls:
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        line = call_line(
            call.tool_name,
            arguments,
            result=call.result,
            output_chars=call.output_chars,
            is_error=call.is_error,
            interrupted=call.interrupted,
        )
        lines.append(f"- {line}")
    return "\n".join(lines)
