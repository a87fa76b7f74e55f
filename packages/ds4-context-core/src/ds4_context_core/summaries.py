"""The summary contract: twelve fixed sections, checked deterministically against the source.

::

    from ds4_context_core.summaries import render_summary_template, validate_summary

    prompt = "Summarise the session in exactly these sections:\n\n" + render_summary_template()
    verdict = validate_summary(summary_text, [message_text, ...])
    if not verdict.valid:
        ...  # keep the host's own compaction; verdict.problems says why (codes and counts only)

A model writes one through any completion transport (a ``RuntimeAdapter``'s ``complete`` or an engine
transport's), checked against the span before it is used::

    outcome = await summarize(cut_messages, transport.complete, model=descriptor)
    item = summary_supplement(outcome)  # None unless accepted: receipts and the digest stand in
    plan = plan_context(messages, model=descriptor, supplemental=[item] if item else [])

See ``docs/core/summaries.md`` for the accepted headings and how files and exact values are matched.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._planner._summarize import (
    SUMMARY_DEFAULT_MAX_CHARS,
    SUMMARY_FAILURE_CODES,
    SUMMARY_ID_PREFIX,
    SummaryOutcome,
    summarize,
    summary_prompt,
    summary_source_texts,
    summary_span_hash,
    summary_supplement,
)
from ._planner._summary import (
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

__all__ = [
    "SUMMARY_CONTRACT_VERSION",
    "SUMMARY_DEFAULT_MAX_CHARS",
    "SUMMARY_FAILURE_CODES",
    "SUMMARY_ID_PREFIX",
    "SUMMARY_INPUT_ERROR_CODES",
    "SUMMARY_MAX_CHARS",
    "SUMMARY_PROBLEM_CODES",
    "SUMMARY_SECTIONS",
    "SummaryInputError",
    "SummaryOutcome",
    "SummaryProblem",
    "SummaryValidation",
    "render_summary_template",
    "summarize",
    "summary_prompt",
    "summary_source_texts",
    "summary_span_hash",
    "summary_supplement",
    "validate_summary",
]

adopt_public_names(__name__, globals())
