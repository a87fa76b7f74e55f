"""LLM summaries: summarize() through a completion callable, the contract check, and planner placement."""

from __future__ import annotations

import anyio
import msgspec
import pytest
from _messages import message

import ds4_context_core as core
from ds4_context_core.adapter import CompletionCompleted, CompletionFallback, CompletionRequest
from ds4_context_core.planner import SupplementalItem, plan_context
from ds4_context_core.privacy import PrivacySummary
from ds4_context_core.summaries import (
    SUMMARY_FAILURE_CODES,
    SUMMARY_ID_PREFIX,
    SUMMARY_SECTIONS,
    SummaryInputError,
    summarize,
    summary_prompt,
    summary_span_hash,
    summary_supplement,
    validate_summary,
)

MODEL = core.ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=32_000, max_tokens=2_000)

SPAN = [
    message("e1", "user", [core.TextBlock(text="Make the retry budget configurable; keep max_retries=3.")]),
    message(
        "e2",
        "assistant",
        [core.ToolCallBlock(id="c1", name="read", arguments={"path": "src/retry/policy.py"})],
    ),
    message("e3", "tool", [core.ToolResultBlock(tool_call_id="c1", tool_name="read", content="MAX = 3")]),
    message(
        "e4",
        "assistant",
        [core.ToolCallBlock(id="c2", name="bash", arguments={"command": "pytest -q tests/test_retry.py"})],
    ),
    message(
        "e5",
        "tool",
        [
            core.ToolResultBlock(
                tool_call_id="c2", tool_name="bash", content="2 failed, 5 passed", is_error=True
            )
        ],
    ),
]


def summary_text(*, files_read="`src/retry/policy.py`", value="`max_retries=3`", drop=None) -> str:
    bodies = {
        "Objective": "Make the retry budget configurable.",
        "User Constraints": f"- keep {value}",
        "Durable Decisions": "none",
        "Completed Work": "read the policy",
        "Current State": "tests fail",
        "Files Read": files_read,
        "Files Modified": "none",
        "Commands / Tests": "- `pytest -q tests/test_retry.py`: 2 failed",
        "Errors / Risks": "two failing tests",
        "Open Questions": "none",
        "Next Actions": "fix the failures",
        "Critical Exact Values": f"- {value}",
    }
    return "\n".join(f"## {name}\n{bodies[name]}" for name in SUMMARY_SECTIONS if name != drop)


class Scripted:
    """A completion callable that answers with ``answer`` and records each request."""

    def __init__(self, answer: object, *, delay_s: float = 0.0) -> None:
        self.answer = answer
        self.delay_s = delay_s
        self.requests: list[CompletionRequest] = []

    async def __call__(self, request: CompletionRequest) -> object:
        self.requests.append(request)
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def completed(text: str) -> CompletionCompleted:
    privacy = PrivacySummary(
        provider="openai", destination="remote", changed=False, blocked_blocks=0, secret_redactions=0
    )
    return CompletionCompleted(output=_Output(text), privacy=privacy)


class _Output:
    def __init__(self, text: str) -> None:
        self.text = text


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_a_good_summary_is_accepted_and_becomes_a_stable_supplement(anyio_backend: str) -> None:
    transport = Scripted(completed(summary_text()))
    outcome = await summarize(SPAN, transport, model=MODEL)
    assert (outcome.status, outcome.code) == ("accepted", None)
    assert outcome.validation is not None
    assert outcome.validation.valid
    assert outcome.source_ids == tuple(m.id for m in SPAN)
    assert outcome.span_hash == summary_span_hash(SPAN)
    (request,) = transport.requests
    assert request.system is not None
    assert "summary-contract-v1" in request.system
    sent = request.messages[0].blocks[0]
    assert isinstance(sent, core.TextBlock)
    assert "src/retry/policy.py" in sent.text
    assert "<transcript>" in sent.text
    item = summary_supplement(outcome)
    assert item is not None
    assert item.kind == "summary"
    assert item.id.startswith(SUMMARY_ID_PREFIX)
    assert outcome.text is not None
    assert outcome.text in item.text
    again = summary_supplement(await summarize(SPAN, Scripted(completed(summary_text())), model=MODEL))
    assert again == item  # the same span and answer: a byte-identical supplement


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("text", "code"),
    [
        (summary_text(files_read="`src/retry/backoff.py`"), "summary-file-not-in-source"),
        (summary_text(value="`max_retries=5`"), "summary-exact-value-not-in-source"),
        ("   ", "summary-empty"),
        (summary_text(drop="Open Questions"), "summary-section-missing"),
        (summary_text() + "\n" + "x" * 20_000, "summary-too-large"),
    ],
)
async def test_a_bad_summary_is_rejected_with_its_code_and_no_text(
    anyio_backend: str, text: str, code: str
) -> None:
    outcome = await summarize(SPAN, Scripted(text), model=MODEL)
    assert (outcome.status, outcome.code, outcome.text) == ("rejected", code, None)
    assert summary_supplement(outcome) is None


@pytest.mark.anyio
async def test_a_transport_that_falls_back_raises_or_hangs_fails_with_a_code(anyio_backend: str) -> None:
    fallback = CompletionFallback(code="transport-failed", reason="the transport failed", retryable=True)
    assert (await summarize(SPAN, Scripted(fallback), model=MODEL)).code == "summary-transport-failed"
    raised = await summarize(SPAN, Scripted(RuntimeError("boom sk-secret")), model=MODEL)
    assert (raised.status, raised.code) == ("failed", "summary-transport-failed")
    assert "boom" not in msgspec.json.encode(raised).decode()
    with anyio.fail_after(5):
        slow = await summarize(SPAN, Scripted(summary_text(), delay_s=10), model=MODEL, timeout_s=0.05)
    assert (slow.status, slow.code) == ("failed", "summary-timeout")
    silent = await summarize(SPAN, Scripted(None), model=MODEL)
    assert silent.code == "summary-transport-failed"
    assert {raised.code, slow.code} <= set(SUMMARY_FAILURE_CODES)


@pytest.mark.anyio
async def test_local_only_and_synthetic_messages_are_neither_sent_nor_sources(anyio_backend: str) -> None:
    private = message("e6", "user", [core.TextBlock(text="the token is hunter2")], local_only=True)
    ours = message("e7", "user", [core.TextBlock(text="[receipt] read x")], synthetic=True)
    transport = Scripted(summary_text(value="`hunter2`"))
    outcome = await summarize([*SPAN, private, ours], transport, model=MODEL)
    sent = transport.requests[0].messages[0].blocks[0]
    assert isinstance(sent, core.TextBlock)
    assert "hunter2" not in sent.text
    assert "[receipt]" not in sent.text
    assert outcome.code == "summary-exact-value-not-in-source"  # the private value is no source
    assert private.id not in outcome.source_ids
    assert summary_span_hash([*SPAN, private]) == summary_span_hash(SPAN)
    changed = [
        *SPAN[:-1],
        message("e5", "tool", [core.ToolResultBlock(tool_call_id="c2", tool_name="bash", content="ok")]),
    ]
    assert summary_span_hash(changed) != summary_span_hash(SPAN)
    only_private = await summarize([private], Scripted(summary_text()), model=MODEL)
    assert (only_private.status, only_private.code) == ("failed", "summary-span-empty")


@pytest.mark.anyio
async def test_wrong_argument_types_raise_a_coded_error(anyio_backend: str) -> None:
    for bad in ("text", [object()], None):
        with pytest.raises(SummaryInputError) as caught:
            await summarize(bad, Scripted(""), model=MODEL)  # type: ignore[arg-type]
        assert caught.value.code == "summary-source-invalid"
    with pytest.raises(SummaryInputError):
        await summarize(SPAN, Scripted(""), model=MODEL, timeout_s=0)
    with pytest.raises(SummaryInputError):
        summary_supplement("accepted")  # type: ignore[arg-type]
    with pytest.raises(SummaryInputError):
        validate_summary("## Objective", "x", max_chars=0)


def test_the_prompt_quotes_the_span_and_cuts_long_results() -> None:
    long = message(
        "e9", "tool", [core.ToolResultBlock(tool_call_id="c9", tool_name="read", content="y" * 50_000)]
    )
    system, user = summary_prompt([*SPAN, long], max_chars=900)
    assert "900 characters" in system
    assert all(f"## {name}" in system for name in SUMMARY_SECTIONS)
    assert user.startswith("<transcript>")
    assert "characters not shown" in user
    assert len(user) < 10_000


def test_the_planner_places_summaries_in_front_in_the_order_of_their_spans() -> None:
    history = [
        message(f"h{i}", "user" if i % 2 == 0 else "assistant", [core.TextBlock(text=f"turn {i} " * 400)])
        for i in range(40)
    ]
    early = SupplementalItem(
        id=SUMMARY_ID_PREFIX + "ffff",
        kind="summary",
        text="early span",
        source_ids=(history[0].id, history[1].id),
    )
    later = SupplementalItem(
        id=SUMMARY_ID_PREFIX + "0000", kind="summary", text="later span", source_ids=(history[2].id,)
    )
    digest = SupplementalItem(id="a-digest", kind="summary", text="digest", source_ids=(history[0].id,))
    excerpt = SupplementalItem(
        id="r1",
        kind="retrieved-history",
        text="excerpt",
        placement="front",
        priority=70,
        source_ids=(history[3].id,),
    )
    plan = plan_context(history, model=MODEL, supplemental=[digest, later, excerpt, early])
    kinds = [(item.kind, item.message_id) for item in plan.items[:5]]
    assert kinds == [
        ("summary", "ds4-supplement:" + early.id),
        ("summary", "ds4-supplement:" + later.id),
        ("summary", "ds4-supplement:a-digest"),
        # the planner's own task digest after the host's summaries (it changes whenever the cut moves),
        # before the retrieved excerpt (which changes with every request)
        ("summary", "ds4-supplement:ds4-core-task-digest"),
        ("retrieved-history", "ds4-supplement:r1"),
    ]
    assert plan.items[5].kind not in {"summary", "retrieved-history"}
    bad = SupplementalItem(id="r2", kind="memory", text="x", placement="back")  # type: ignore[arg-type]
    excluded = plan_context(history, model=MODEL, supplemental=[bad]).manifest.exclusions
    assert any(exclusion.reason == "supplement-invalid" for exclusion in excluded)
