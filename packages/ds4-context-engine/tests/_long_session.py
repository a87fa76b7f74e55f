"""A long coding session in a real Pi file, for the tests of what a plan's cut leaves behind."""

from __future__ import annotations

from ds4_context_engine.pi import append_pi_entries, create_pi_session

FACT = "the flaky test is test_rounds_twice because quantize() rounds the budget twice"


def pi_message(role, content, **extra):
    return ("message", {"message": {"role": role, "content": content, "timestamp": 0, **extra}})


REQUEST = "Why does quantize round the budget twice?"
FIRST_REQUEST = "Find out why CI is red."


def write_long_session(
    path, *, steps=150, early_fact=FACT, tail_request=REQUEST, first_request=FIRST_REQUEST, early=()
):
    """A coding session: ``first_request``, a bash step whose result holds ``early_fact``, the ``early``
    entries, then ``steps`` unrelated read steps and ``tail_request``."""
    stamp = "2026-03-01T09:00:00.000Z"
    create_pi_session(path, cwd=str(path.parent), session_id="retrieval", timestamp=stamp)
    entries = [
        pi_message("user", first_request),
        pi_message(
            "assistant",
            [{"type": "toolCall", "id": "call-early", "name": "bash", "arguments": {"command": "pytest -x"}}],
        ),
        pi_message(
            "toolResult",
            [{"type": "text", "text": f"FAILED tests/test_budget.py: {early_fact}"}],
            toolCallId="call-early",
            toolName="bash",
            isError=True,
        ),
    ]
    entries.extend(early)
    for step in range(steps):
        entries.append(pi_message("user", f"Now step {step}: tidy the logging module part {step}."))
        call_id = f"call-{step}"
        entries.append(
            pi_message(
                "assistant",
                [{"type": "toolCall", "id": call_id, "name": "read", "arguments": {"path": f"p{step}.py"}}],
            )
        )
        body = "\n".join(f"logger.info('line {line} of part {step}')" for line in range(40))
        entries.append(
            pi_message(
                "toolResult",
                [{"type": "text", "text": body}],
                toolCallId=call_id,
                toolName="read",
                isError=False,
            )
        )
        entries.append(pi_message("assistant", [{"type": "text", "text": f"Part {step} is tidy."}]))
    entries.append(pi_message("user", tail_request))
    append_pi_entries(path, entries)
    return path
