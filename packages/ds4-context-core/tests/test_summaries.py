"""The summary contract: sections, files and exact values checked against the source, codes only."""

from __future__ import annotations

import time

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ds4_context_core import Ds4ContextError
from ds4_context_core.summaries import (
    SUMMARY_CONTRACT_VERSION,
    SUMMARY_INPUT_ERROR_CODES,
    SUMMARY_MAX_CHARS,
    SUMMARY_PROBLEM_CODES,
    SUMMARY_SECTIONS,
    SummaryInputError,
    SummaryProblem,
    SummaryValidation,
    render_summary_template,
    validate_summary,
)

SOURCE = (
    "Port the CLI flags to typer. Keep --verbose, it is used by the release script.",
    "read /home/dev/projects/cli/src/cli.py (240 lines)",
    "$ pytest -q tests/test_cli.py\n3 passed; window=4096",
    "edited src/flags.py: added `--max-tokens`",
)

BODIES = {
    "Objective": "Port the CLI flags to typer.",
    "User Constraints": "- keep `--verbose`",
    "Durable Decisions": "typer replaces argparse",
    "Completed Work": "flags ported",
    "Current State": "tests pass",
    "Files Read": "- `src/cli.py`",
    "Files Modified": "- src/flags.py (new flag)",
    "Commands / Tests": "- `pytest -q tests/test_cli.py`",
    "Errors / Risks": "none",
    "Open Questions": "none",
    "Next Actions": "release",
    "Critical Exact Values": "- window `4096`\n- flag `--max-tokens`",
}


def summary(bodies=None, order=SUMMARY_SECTIONS, style="## {name}\n{body}"):
    bodies = BODIES if bodies is None else bodies
    return "\n\n".join(style.format(name=name, body=bodies.get(name, "")) for name in order)


def problems(result):
    return {(problem.code, problem.section): problem.count for problem in result.problems}


def test_contract_constants():
    assert SUMMARY_CONTRACT_VERSION == "summary-contract-v1"
    assert len(SUMMARY_SECTIONS) == 12
    assert SUMMARY_SECTIONS[0] == "Objective"
    assert SUMMARY_SECTIONS[-1] == "Critical Exact Values"
    assert len(set(SUMMARY_PROBLEM_CODES)) == len(SUMMARY_PROBLEM_CODES)
    assert SUMMARY_INPUT_ERROR_CODES == ("summary-source-invalid", "summary-text-invalid")


def test_a_complete_summary_whose_files_and_values_are_in_the_source_is_valid():
    result = validate_summary(summary(), SOURCE)
    assert result == SummaryValidation(
        contract_version=SUMMARY_CONTRACT_VERSION,
        valid=True,
        sections_found=12,
        files_checked=2,
        values_checked=4,
        problems=(),
    )
    assert result.codes == ()
    # frozen and encodable: a host may store it beside its own compaction
    assert msgspec.json.decode(msgspec.json.encode(result), type=SummaryValidation) == result
    with pytest.raises(AttributeError):
        result.valid = False  # type: ignore[misc]


def test_the_template_has_every_section_in_order_and_is_only_invalid_for_being_empty():
    template = render_summary_template()
    positions = [template.index(f"## {name}\n") for name in SUMMARY_SECTIONS]
    assert positions == sorted(positions)
    result = validate_summary(template, SOURCE)
    assert result.sections_found == 12
    assert problems(result) == {("summary-empty", None): 1}


@pytest.mark.parametrize(
    "style",
    [
        "## {name}\n{body}",
        "# {name}\n{body}",
        "   ###   {name}   ##\n{body}",
        "## {name}:\n{body}",
        "{name}:\n{body}",
        "{name}: {body}",
        "**{name}:** {body}",
        "**{name}**:\n{body}",
    ],
)
def test_heading_styles_are_accepted(style):
    result = validate_summary(summary(style=style), SOURCE)
    assert result.valid, result.problems
    assert result.sections_found == 12


def test_headings_are_case_and_whitespace_tolerant():
    text = (
        summary()
        .replace("## Commands / Tests", "##   commands/TESTS")
        .replace("## Files Read", "## FILES   read")
    )
    assert validate_summary(text, SOURCE).valid


def test_headings_that_are_not_contract_sections_are_body_text():
    text = summary().replace("## Objective\n", "## Objective\n### Background\n#NoSpace\n####### Seven\n")
    result = validate_summary(text, SOURCE)
    assert result.valid
    assert result.sections_found == 12


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_an_empty_summary(text):
    result = validate_summary(text, SOURCE)
    assert not result.valid
    assert result.problems == (SummaryProblem(code="summary-empty", section=None, count=1),)


def test_text_without_any_section_is_missing_every_section_but_not_empty():
    result = validate_summary("Goal: port the CLI. Constraint: keep --verbose.", SOURCE)
    assert result.sections_found == 0
    assert problems(result) == {("summary-section-missing", name): 1 for name in SUMMARY_SECTIONS}


def test_a_summary_over_the_limit_is_not_parsed():
    result = validate_summary("x" * (SUMMARY_MAX_CHARS + 1), SOURCE)
    assert result.problems == (SummaryProblem(code="summary-too-large", section=None, count=1),)


def test_a_missing_section_is_named():
    order = [name for name in SUMMARY_SECTIONS if name not in ("Open Questions", "Files Read")]
    result = validate_summary(summary(order=order), SOURCE)
    assert not result.valid
    assert problems(result) == {
        ("summary-section-missing", "Files Read"): 1,
        ("summary-section-missing", "Open Questions"): 1,
    }
    # reported in contract order
    assert [problem.section for problem in result.problems] == ["Files Read", "Open Questions"]


def test_a_duplicate_section_is_counted():
    text = summary() + "\n## Objective\nagain\nobjective: and again\n"
    result = validate_summary(text, SOURCE)
    assert problems(result) == {("summary-section-duplicate", "Objective"): 2}


def test_sections_out_of_order():
    order = list(SUMMARY_SECTIONS)
    order[0], order[3] = order[3], order[0]  # Completed Work first, Objective fourth
    result = validate_summary(summary(order=order), SOURCE)
    assert problems(result) == {
        ("summary-section-out-of-order", "User Constraints"): 1,
        ("summary-section-out-of-order", "Durable Decisions"): 1,
        ("summary-section-out-of-order", "Objective"): 1,
    }


def test_a_listed_file_absent_from_the_source_is_caught():
    bodies = dict(BODIES)
    bodies["Files Read"] = "- `src/cli.py`\n- `src/missing.py`\n- ghost.py, opened twice"
    bodies["Files Modified"] = "- src/flags.py\n- `flags.py`\n- cli.py\n- lags.py"
    result = validate_summary(summary(bodies), SOURCE)
    assert result.files_checked == 7
    assert problems(result) == {
        ("summary-file-not-in-source", "Files Read"): 2,
        ("summary-file-not-in-source", "Files Modified"): 1,  # lags.py is only part of a word
    }
    assert result.codes == ("summary-file-not-in-source",)


def test_a_backticked_value_absent_from_the_source_is_caught():
    bodies = dict(BODIES)
    bodies["Critical Exact Values"] = "- window `4097`\n- `409`\n- `--verbose`\n- `pytest -q`\n- `-q pytest`"
    bodies["Current State"] = "the `src/cli.py` file, `window=4096` and `3 passed`"
    result = validate_summary(summary(bodies), SOURCE)
    assert problems(result) == {("summary-exact-value-not-in-source", "Critical Exact Values"): 3}


def test_nothing_to_list_is_not_a_file():
    bodies = dict(BODIES)
    bodies["Files Read"] = "none"
    bodies["Files Modified"] = "- None\n- n/a\n\n-"
    result = validate_summary(summary(bodies), SOURCE)
    assert result.valid
    assert result.files_checked == 0


def test_the_result_never_holds_summary_or_source_text():
    secret = "sk-live-abcdefghijklmnop"
    bodies = dict(BODIES)
    bodies["Critical Exact Values"] = f"`{secret}`"
    bodies["Files Read"] = f"`/etc/{secret}.txt`"
    encoded = msgspec.json.encode(validate_summary(summary(bodies), [*SOURCE, "other " + secret[:4]]))
    assert secret.encode() not in encoded
    assert b"etc" not in encoded


def test_sources_may_be_one_string_or_any_iterable_of_strings():
    text = summary()
    assert validate_summary(text, "\n".join(SOURCE)).valid
    assert validate_summary(text, iter(SOURCE)).valid
    assert validate_summary(text, (s for s in SOURCE)).valid


@pytest.mark.parametrize(
    ("text", "sources", "code"),
    [
        (b"## Objective", SOURCE, "summary-text-invalid"),
        (None, SOURCE, "summary-text-invalid"),
        ("## Objective", None, "summary-source-invalid"),
        ("## Objective", 42, "summary-source-invalid"),
        ("## Objective", b"bytes", "summary-source-invalid"),
        ("## Objective", ["ok", 3], "summary-source-invalid"),
    ],
)
def test_wrong_types_raise_a_type_error_with_a_stable_code(text, sources, code):
    with pytest.raises(SummaryInputError) as caught:
        validate_summary(text, sources)
    assert caught.value.code == code
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, Ds4ContextError)


def test_validation_is_linear_in_the_source():
    # 20,000 words of source and 2,000 values, each a set lookup in the index built once
    source = " ".join(f"word{number}" for number in range(20_000))
    values = "\n".join(f"- `word{number}`" for number in range(0, 20_000, 10))
    bodies = dict(BODIES)
    bodies["Critical Exact Values"] = values
    started = time.process_time()  # CPU time: another process's load does not count
    result = validate_summary(summary(bodies), [*SOURCE, source])
    assert time.process_time() - started < 2.0  # ~0.2 s linear; a quadratic walk takes minutes
    assert result.valid
    assert result.values_checked == 2_000 + 2


def test_hostile_words_stay_linear():
    # one huge bracketed word and one huge path: each is trimmed and split a bounded number of times
    source = ["(" * 200_000 + "x" + ")" * 3, "a/" * 2_000 + "b.py", "c/" * 100_000 + "d.py", "k:" * 100_000]
    bodies = dict(BODIES)
    # a word over 4,096 characters is indexed whole only: its path suffixes are not
    bodies["Files Read"] = "- `src/cli.py`\n- `a/a/b.py`\n- `c/d.py`"
    bodies["Critical Exact Values"] = "`" + "(" * 50_000 + "`"
    started = time.process_time()  # CPU time: another process's load does not count
    result = validate_summary(summary(bodies), [*SOURCE, *source])
    assert time.process_time() - started < 2.0  # ~0.2 s linear; a quadratic walk takes minutes
    assert problems(result) == {
        ("summary-file-not-in-source", "Files Read"): 1,
        ("summary-exact-value-not-in-source", "Critical Exact Values"): 1,
    }


@settings(max_examples=300, deadline=None)
@given(st.text(), st.lists(st.text(), max_size=4))
def test_validation_never_raises_on_text_and_is_deterministic(text, sources):
    first = validate_summary(text, sources)
    assert first == validate_summary(text, list(sources))
    assert first.valid == (not first.problems)
    assert set(first.codes) <= set(SUMMARY_PROBLEM_CODES)
    assert all(problem.count >= 1 for problem in first.problems)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from([*SUMMARY_SECTIONS, "Notes", "`x`", "- `a.py`", "", "#", "## ", "Objective:"]),
        max_size=30,
    ),
    st.sampled_from(["## {}", "{}:", "# {}", "{}"]),
)
def test_headings_in_any_arrangement_are_reported_consistently(lines, style):
    text = "\n".join(style.format(line) for line in lines)
    result = validate_summary(text, "a.py x")
    missing = sum(p.count for p in result.problems if p.code == "summary-section-missing")
    if text.strip():
        assert result.sections_found + missing == len(SUMMARY_SECTIONS)
    else:
        assert result.codes == ("summary-empty",)
