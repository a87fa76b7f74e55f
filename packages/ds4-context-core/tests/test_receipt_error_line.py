"""A result's first error line and exit status, as receipts and the task digest quote them, read the
same as the line-by-line reading they replaced: one search for the next error word, and a case-sensitive
pattern on lowered ASCII text, must not change a byte of what is quoted."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ds4_context_core._planner._receipt_text import (
    _BARE_HEADER,
    _ERROR_LINE_CHARS,
    _ERROR_STEMS,
    _ERROR_WORDS,
    _LINE_END,
    _short,
    first_error_line,
)


def _reference(result: str) -> str | None:
    """The reading before: every error word looked for again after each line, the case-insensitive
    pattern on the original text."""
    header: str | None = None
    lowered = result.lower()
    if len(lowered) != len(result):
        lines = (line for line in result.splitlines() if _ERROR_WORDS.search(line))
        line = next((line for line in lines if not _BARE_HEADER.match(line)), None)
        if line is not None:
            return _short(line, _ERROR_LINE_CHARS)
        lowered = ""
    position = 0
    while lowered:
        hits = [at for word in _ERROR_STEMS if (at := lowered.find(word, position)) >= 0]
        if not hits:
            break
        first = min(hits)
        begin = max(lowered.rfind("\n", 0, first), lowered.rfind("\r", 0, first)) + 1
        end = _LINE_END.search(result, first)
        stop = end.start() if end is not None else len(result)
        line = result[begin:stop]
        position = stop
        if not _ERROR_WORDS.search(line):
            continue
        if not _BARE_HEADER.match(line):
            return _short(line, _ERROR_LINE_CHARS)
        header = header or line
    return _short(header, _ERROR_LINE_CHARS) if header is not None else None


# Pieces that make error words, near misses (``FAILURES``, ``xerror``), word boundaries, both line ends,
# the traceback header, and characters whose case folds oddly: the dotless i, the long s, the Kelvin
# sign, a dotted capital I (longer in lower case) and a German sharp s.
_PIECES = (
    "error",
    "Error",
    "ERRORS",
    "xerror",
    "errorx",
    "fail",
    "FAILED",
    "FAILURES",
    "failure",
    "Traceback",
    "Traceback (most recent call last):",
    "exception",
    "panic",
    "fatal",
    "denied",
    "not found",
    "not  found",
    "except\u0131on",
    "error\u017f",
    "\u212a",
    "İ",
    "ß",
    "_",
    " ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\x0b",
    "ok",
    "1 passed",
    "ValueError: bad",
    "é",
)


@settings(max_examples=1_000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=24).map("".join))
def test_first_error_line_reads_as_the_line_by_line_reference(result):
    assert first_error_line(result) == _reference(result)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_first_error_line_on_any_text_reads_as_the_reference(result):
    assert first_error_line(result) == _reference(result)


def test_a_long_result_names_its_first_error_past_near_misses():
    noise = "FAILURES ====\nerrorx here\n" * 50
    result = noise + "Traceback (most recent call last):\n  File x\nKeyError: 'k'\n" + "ok\n" * 100
    assert first_error_line(result) == "KeyError: 'k'" == _reference(result)
    assert first_error_line(re.sub("K", "\u212a", result)) == _reference(re.sub("K", "\u212a", result))


def test_a_word_only_the_case_insensitive_pattern_sees_still_names_its_line():
    # the dotless i matches an ``i`` only when case is ignored: no error word is found in the lowered
    # text before ``FAILURES``, which is no error word itself, yet the line is an error line
    for result in ("except\u0131on FAILURES", "ok\nexcept\u0131on FAILURES\nValueError: x", "fa\u0131led"):
        assert first_error_line(result) == _reference(result)
    assert first_error_line("ok\nexcept\u0131on FAILURES\nValueError: x") == "except\u0131on FAILURES"
