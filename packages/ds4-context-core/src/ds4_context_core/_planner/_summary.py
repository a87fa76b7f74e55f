"""The summary contract (``summary-contract-v1``): twelve fixed sections, checked against the source.

A summary that replaces part of a history must keep the task. The contract fixes what it holds (the
twelve sections of :data:`SUMMARY_SECTIONS`, in that order) and :func:`validate_summary` checks a
summary deterministically, with no model: every section present once and in order, every listed file
and every backticked exact value present in the text the summary was made from. The result holds codes,
section names and counts only, never a word of the summary or of the source.

Cost is linear in the size of the summary plus the sources: the sources are indexed once (a set of
words and a set of adjacent word pairs) and every check is a set lookup.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import pairwise
from typing import Final

import msgspec

from ds4_context_core._exceptions import SummaryInputError

__all__ = [
    "SUMMARY_CONTRACT_VERSION",
    "SUMMARY_INPUT_ERROR_CODES",
    "SUMMARY_MAX_CHARS",
    "SUMMARY_PROBLEM_CODES",
    "SUMMARY_SECTIONS",
    "SummaryInputError",
    "SummaryProblem",
    "SummaryValidation",
    "render_summary_template",
    "validate_summary",
]

SUMMARY_CONTRACT_VERSION: Final = "summary-contract-v1"
SUMMARY_SECTIONS: Final = (
    "Objective",
    "User Constraints",
    "Durable Decisions",
    "Completed Work",
    "Current State",
    "Files Read",
    "Files Modified",
    "Commands / Tests",
    "Errors / Risks",
    "Open Questions",
    "Next Actions",
    "Critical Exact Values",
)
#: Problem codes, in the order problems are reported.
SUMMARY_PROBLEM_CODES: Final = (
    "summary-empty",
    "summary-too-large",
    "summary-section-missing",
    "summary-section-duplicate",
    "summary-section-out-of-order",
    "summary-file-not-in-source",
    "summary-exact-value-not-in-source",
)
SUMMARY_INPUT_ERROR_CODES: Final = ("summary-source-invalid", "summary-text-invalid")
#: A longer summary is not parsed: it is reported as ``summary-too-large``.
SUMMARY_MAX_CHARS: Final = 1_000_000

_FILE_SECTIONS: Final = frozenset({"Files Read", "Files Modified"})
# Longest label (before a ':') or heading text looked up as a section name.
_MAX_LABEL_CHARS: Final = 64
# Path suffixes indexed per source word (``a/b/c.py`` -> ``b/c.py``, ``c.py``), and the longest word split.
_MAX_PATH_SUFFIXES: Final = 16
_MAX_SPLIT_WORD_CHARS: Final = 4096
# A file-section line that says there is nothing to list.
_NOTHING: Final = frozenset({"none", "n/a", "na", "nothing", "-", "(none)", "none.", "no files", "n/a."})
_BULLETS: Final = ("- ", "* ", "+ ", "\u2022 ")
# Characters trimmed from the edges of a word before it is indexed or looked up.
_QUOTES: Final = "`'\"\u2018\u2019\u201c\u201d"
_RIGHT_PUNCTUATION: Final = ",;:.!?"
_PAIRS: Final = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSERS: Final = {closing: opening for opening, closing in _PAIRS.items()}
# Bounded, so a word of a thousand brackets costs a few scans of it, not a thousand.
_TRIM_PASSES: Final = 4


class SummaryProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One kind of problem in one section: ``count`` occurrences. ``section`` is ``None`` for the whole."""

    code: str
    section: str | None
    count: int


class SummaryValidation(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict on one summary. Metadata only: codes, section names and counts."""

    contract_version: str
    valid: bool
    sections_found: int
    files_checked: int
    values_checked: int
    problems: tuple[SummaryProblem, ...]

    @property
    def codes(self) -> tuple[str, ...]:
        """The distinct problem codes, in report order."""
        return tuple(dict.fromkeys(problem.code for problem in self.problems))


def _normalize_name(text: str) -> str:
    """Case-folded, whitespace collapsed, no spaces around ``/``: ``commands/tests``."""
    words = " ".join(text.split()).casefold()
    return words.replace(" /", "/").replace("/ ", "/")


_SECTION_KEYS: Final = {_normalize_name(name): name for name in SUMMARY_SECTIONS}
_SECTION_INDEX: Final = {name: index for index, name in enumerate(SUMMARY_SECTIONS)}


def render_summary_template() -> str:
    """The empty twelve-section skeleton, as Markdown ``##`` headings in contract order.

    Give it to the model that writes a summary; what it fills in passes :func:`validate_summary` when
    every file and backticked value it names is in the source.
    """
    return "\n".join(f"## {name}\n" for name in SUMMARY_SECTIONS)


def _heading(line: str) -> tuple[str, str] | None:
    """``(section, rest of the line)`` when ``line`` opens a contract section, else ``None``."""
    stripped = line.strip()
    if not stripped:
        return None
    if stripped[0] == "#":
        level = len(stripped) - len(stripped.lstrip("#"))
        rest = stripped[level:]
        if level > 6 or not rest or not rest[0].isspace():
            return None
        label = rest.strip().rstrip("#").strip().strip("*_").strip().rstrip(":").strip()
        if len(label) > _MAX_LABEL_CHARS:
            return None
        section = _SECTION_KEYS.get(_normalize_name(label))
        return None if section is None else (section, "")
    colon = stripped.find(":", 0, _MAX_LABEL_CHARS + 8)
    if colon < 0:
        return None
    label = stripped[:colon].strip().strip("*_").strip()
    section = _SECTION_KEYS.get(_normalize_name(label))
    if section is None:
        return None
    return section, stripped[colon + 1 :].lstrip("*_").strip()


def _trim(word: str) -> str:
    """``word`` without quotes, trailing punctuation or unbalanced brackets at its edges.

    At most ``_TRIM_PASSES`` passes, each linear in the word: ``("`x`"),`` becomes ``x``.
    """
    for _ in range(_TRIM_PASSES):
        before = word
        word = word.strip(_QUOTES).rstrip(_RIGHT_PUNCTUATION)
        if word and word[0] in _PAIRS and word.count(word[0]) > word.count(_PAIRS[word[0]]):
            word = word[1:]
        if word and word[-1] in _CLOSERS and word.count(word[-1]) > word.count(_CLOSERS[word[-1]]):
            word = word[:-1]
        if word == before:
            break
    return word


class _TextWords:
    """Every word of one text (with its path suffixes and ``=``/``:`` parts) and every adjacent pair."""

    def __init__(self, text: str) -> None:
        self.words: set[str] = set()
        self.pairs: set[tuple[str, str]] = set()
        previous: str | None = None
        for raw in text.split():
            word = _trim(raw)
            if not word:
                continue
            self._add_word(raw, word)
            if previous is not None:
                self.pairs.add((previous, word))
            previous = word

    def _add_word(self, raw: str, word: str) -> None:
        words = self.words
        words.add(raw)
        words.add(word)
        if len(word) > _MAX_SPLIT_WORD_CHARS:
            return
        pieces = {word}
        if "=" in word or ":" in word:
            pieces.update(_trim(piece) for piece in word.replace("=", ":").split(":"))
        for piece in pieces:
            if not piece:
                continue
            words.add(piece)
            if "/" in piece:
                parts = piece.split("/")
                for start in range(max(1, len(parts) - _MAX_PATH_SUFFIXES), len(parts)):
                    suffix = "/".join(parts[start:])
                    if suffix:
                        words.add(suffix)


class _SourceIndex:
    """Whether a value stands in the sources as a whole word, or as a run of whole words.

    Every word a text yields is a substring of it, so a question first finds the texts that hold the value
    as a substring (a C-level search) and splits only those into words, each text once. A summary names a
    few dozen values: most of a long history is never split at all.
    """

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts
        self._words: dict[int, _TextWords] = {}

    def _of(self, position: int) -> _TextWords:
        words = self._words.get(position)
        if words is None:
            words = self._words[position] = _TextWords(self._texts[position])
        return words

    def _holding(self, *fragments: str) -> Iterator[int]:
        for position, text in enumerate(self._texts):
            if all(fragment in text for fragment in fragments):
                yield position

    def _has_word(self, word: str) -> bool:
        return any(word in self._of(position).words for position in self._holding(word))

    def holds(self, value: str) -> bool:
        parts = [word for word in (_trim(raw) for raw in value.split()) if word]
        if not parts:
            return True
        if len(parts) == 1:
            word = parts[0]
            return self._has_word(word) or self._has_word(word.removeprefix("./"))
        return all(
            any(pair in self._of(position).pairs for position in self._holding(*pair))
            for pair in pairwise(parts)
        )


def _backticked(text: str) -> list[str]:
    """Spans between single backticks on one line (a line's unpaired backtick opens nothing)."""
    spans: list[str] = []
    for line in text.splitlines():
        pieces = line.split("`")
        spans.extend(pieces[index] for index in range(1, len(pieces) - 1, 2) if pieces[index].strip())
    return spans


def _file_entries(body: str) -> list[str]:
    """The files a Files section lists: one entry per non-blank line (bullet removed); the backticked
    spans of a line, or else its first word; lines saying there is nothing are skipped."""
    files: list[str] = []
    for raw_line in body.splitlines():
        line = raw_line.strip()
        for bullet in _BULLETS:
            if line.startswith(bullet):
                line = line[len(bullet) :].strip()
                break
        if not line or line.casefold() in _NOTHING:
            continue
        spans = _backticked(line)
        if spans:
            files.extend(span.strip() for span in spans)
        else:
            first = _trim(line.split()[0])
            if first and first.casefold() not in _NOTHING:
                files.append(first)
    return files


def _sources(source_texts: object) -> list[str]:
    if isinstance(source_texts, str):
        return [source_texts]
    if not isinstance(source_texts, Iterable):
        raise SummaryInputError("summary-source-invalid", "the sources must be a str or an iterable of str")
    texts: list[str] = []
    for text in source_texts:  # bytes iterate as ints: refused here too
        if not isinstance(text, str):
            raise SummaryInputError(
                "summary-source-invalid", f"a source is a {type(text).__name__[:40]}, not a str"
            )
        texts.append(text)
    return texts


def _result(
    problems: dict[tuple[str, str | None], int], *, sections: int, files: int, values: int
) -> SummaryValidation:
    order = {code: index for index, code in enumerate(SUMMARY_PROBLEM_CODES)}

    def key(item: tuple[tuple[str, str | None], int]) -> tuple[int, int]:
        (code, section), _ = item
        return order[code], -1 if section is None else _SECTION_INDEX[section]

    records = tuple(
        SummaryProblem(code=code, section=section, count=count)
        for (code, section), count in sorted(problems.items(), key=key)
    )
    return SummaryValidation(
        contract_version=SUMMARY_CONTRACT_VERSION,
        valid=not records,
        sections_found=sections,
        files_checked=files,
        values_checked=values,
        problems=records,
    )


def validate_summary(
    text: str, source_texts: str | Iterable[str], *, max_chars: int = SUMMARY_MAX_CHARS
) -> SummaryValidation:
    """Check ``text`` against ``summary-contract-v1`` and the texts it was made from.

    ``max_chars`` (at most :data:`SUMMARY_MAX_CHARS`) is the longest summary accepted; a longer one is
    reported as ``summary-too-large`` and not parsed.

    ``source_texts`` is one ``str`` or an iterable of them (say, one per message). Any ``str`` summary
    gets a verdict; only arguments of the wrong type raise :class:`SummaryInputError` (a ``TypeError``).
    See ``docs/core/summaries.md`` for exactly which headings, files and values are recognised.
    """
    if not isinstance(text, str):
        raise SummaryInputError(
            "summary-text-invalid", f"the summary is a {type(text).__name__[:40]}, not a str"
        )
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
        raise SummaryInputError("summary-text-invalid", "max_chars must be a positive int")
    limit = min(max_chars, SUMMARY_MAX_CHARS)
    sources = _sources(source_texts)
    problems: dict[tuple[str, str | None], int] = {}

    def add(code: str, section: str | None) -> None:
        problems[code, section] = problems.get((code, section), 0) + 1

    if len(text) > limit:
        add("summary-too-large", None)
        return _result(problems, sections=0, files=0, values=0)
    if not text.strip():
        add("summary-empty", None)
        return _result(problems, sections=0, files=0, values=0)

    bodies: dict[str, list[str]] = {}
    current: list[str] | None = None
    highest = -1
    for line in text.splitlines():
        opened = _heading(line)
        if opened is None:
            if current is not None:
                current.append(line)
            continue
        section, rest = opened
        if section in bodies:
            add("summary-section-duplicate", section)
        else:
            bodies[section] = []
            index = _SECTION_INDEX[section]
            if index < highest:
                add("summary-section-out-of-order", section)
            highest = max(highest, index)
        current = bodies[section]
        if rest:
            current.append(rest)
    for section in SUMMARY_SECTIONS:
        if section not in bodies:
            add("summary-section-missing", section)
    if bodies and not any(line.strip() for lines in bodies.values() for line in lines):
        add("summary-empty", None)  # headings alone (the bare template) say nothing

    source_index = _SourceIndex(sources)

    files = values = 0
    for section, lines in bodies.items():
        body = "\n".join(lines)
        if section in _FILE_SECTIONS:
            for path in _file_entries(body):
                files += 1
                if not source_index.holds(path):
                    add("summary-file-not-in-source", section)
            continue
        for value in _backticked(body):
            values += 1
            if not source_index.holds(value):
                add("summary-exact-value-not-in-source", section)
    return _result(problems, sections=len(bodies), files=files, values=values)
