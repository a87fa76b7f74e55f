"""Provider structure: repair a plan so the destination format the host names accepts its shape, and
check it in that format.

What each provider rejects (a 400 before the model sees anything):

* Anthropic Messages: a first turn that is not from the user; two consecutive turns of one role; a
  ``tool_use`` whose ``tool_result`` is not in the very next user turn, first in its content.
* OpenAI Chat Completions: an assistant message with ``tool_calls`` that is not followed directly by one
  ``tool`` message per call; a ``tool`` message without that assistant message.
* OpenAI Responses: a ``function_call_output`` before (or without) its ``function_call``; a call left
  without an output.

The planner already sends each tool unit (a call and all its results) as one contiguous run in history
order, and the converters join what a format cannot keep apart (Anthropic: every run of same-role
messages becomes one turn; Chat: a second calling turn before the results joins the first). What is left
is the first turn: a cut (or a receipt) can leave an assistant message first, and the repair inserts one
short synthetic user message before it, with an id derived from the message it precedes, so the same plan
always gets the same bytes (cache-stable). A repair only adds or joins, never drops; each leaves a
diagnostic code. The self-check then converts the plan with the destination's own converter and checks
the rules above on the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from ds4_context_core._history._model import CanonicalMessage, MessageFlags, Provenance, TextBlock
from ds4_context_core._interop._anthropic import to_anthropic_messages
from ds4_context_core._interop._openai import to_openai_chat, to_openai_responses

from ._common import hash16
from ._decisions import FallbackError, PlanInputs
from ._emit import Emitted
from ._types import PRIORITY_RECENT_TURN, PlanDiagnostic, PlanItem

DESTINATIONS: Final = ("anthropic", "openai-chat", "openai-responses")
OMITTED_NOTE: Final = "[earlier conversation omitted]"
_SYSTEM_ROLES: Final = frozenset({"system", "developer"})
_FIRST_USER_CODE: Final = "structure-first-user-inserted"


def check_destination(destination: object) -> str | None:
    """The destination, or :class:`FallbackError` ``destination-invalid`` for an unknown one."""
    if destination is None or (isinstance(destination, str) and destination in DESTINATIONS):
        return destination
    raise FallbackError("destination-invalid", f"destination must be one of {', '.join(DESTINATIONS)}")


def _first_turn(messages: Sequence[CanonicalMessage]) -> int:
    return next((i for i, m in enumerate(messages) if m.role not in _SYSTEM_ROLES), len(messages))


def omitted_note(before: CanonicalMessage) -> CanonicalMessage:
    """The synthetic user message that opens a conversation whose first kept turn is ``before``."""
    note_id = f"ds4:omitted:{hash16('omitted', before.id)}"
    return CanonicalMessage(
        id=note_id,
        source_entry_id=note_id,
        role="user",
        blocks=(TextBlock(text=OMITTED_NOTE),),
        provenance=Provenance(
            source=before.provenance.source,
            session_id=before.provenance.session_id,
            entry_id=note_id,
            runtime_id=before.provenance.runtime_id,
        ),
        flags=MessageFlags(synthetic=True),
    )


def insert_first_user(
    messages: list[CanonicalMessage],
    items: list[PlanItem],
    destination: str | None,
    estimator: Callable[[CanonicalMessage], int],
) -> int:
    """Insert the note ``destination`` needs before the first turn (in place); the tokens it added."""
    if destination != "anthropic":
        return 0
    first = _first_turn(messages)
    if first == len(messages) or messages[first].role == "user":
        return 0
    note = omitted_note(messages[first])
    tokens = estimator(note)
    messages.insert(first, note)
    items.insert(
        first,
        PlanItem(
            message_id=note.id,
            kind="message",
            reason="structure-repair",
            tokens=tokens,
            priority=PRIORITY_RECENT_TURN,
        ),
    )
    return tokens


def first_user_diagnostic() -> PlanDiagnostic:
    return PlanDiagnostic(code=_FIRST_USER_CODE, detail="a user note precedes the first turn")


def repair_structure(inputs: PlanInputs, emitted: Emitted, destination: str | None) -> None:
    """Insert what ``destination`` needs so the plan is accepted; never removes a message."""
    tokens = insert_first_user(emitted.messages, emitted.items, destination, inputs.estimator)
    if tokens:
        emitted.history_tokens += tokens
        inputs.diagnostics.append(first_user_diagnostic())


# ------------------------------------------------------------------ the rules, on the converted payload


def _parts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _of_type(parts: list[Any], kind: str, key: str) -> list[Any]:
    return [p.get(key) for p in parts if isinstance(p, dict) and p.get("type") == kind]


def _anthropic_problem(messages: Sequence[CanonicalMessage]) -> str | None:
    turns: list[Any] = list(to_anthropic_messages(messages)["messages"])
    if turns and turns[0].get("role") != "user":
        return "the first turn is not from the user"
    for number, turn in enumerate(turns):
        role, parts = turn.get("role"), _parts(turn.get("content"))
        if number and turns[number - 1].get("role") == role:
            return "two consecutive turns of one role"
        uses, results = _of_type(parts, "tool_use", "id"), _of_type(parts, "tool_result", "tool_use_id")
        if (uses and role != "assistant") or (results and role != "user"):
            return "a tool block in a turn of the wrong role"
        if results:
            if any(not isinstance(p, dict) or p.get("type") != "tool_result" for p in parts[: len(results)]):
                return "a tool result after other content"
            before = _parts(turns[number - 1].get("content")) if number else []
            if not set(results) <= set(_of_type(before, "tool_use", "id")):
                return "a tool result not right after its call"
        if uses:
            after = turns[number + 1] if number + 1 < len(turns) else None
            answered = _of_type(_parts(after.get("content")), "tool_result", "tool_use_id") if after else []
            if not set(uses) <= set(answered):
                return "a tool call whose result is not in the next turn"
    return None


def _chat_problem(messages: Sequence[CanonicalMessage]) -> str | None:
    pending: set[Any] = set()
    for entry in to_openai_chat(messages):
        message: dict[str, Any] = dict(entry)
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in pending:
                return "a tool message not right after the message that called it"
            pending.discard(message.get("tool_call_id"))
            continue
        if pending:
            return "a message between a tool call and its tool message"
        pending = {call.get("id") for call in message.get("tool_calls") or ()}
    return "a tool call without its tool message" if pending else None


def _responses_problem(messages: Sequence[CanonicalMessage]) -> str | None:
    called: set[Any] = set()
    answered: set[Any] = set()
    for entry in to_openai_responses(messages):
        item: dict[str, Any] = dict(entry)
        if item.get("type") == "function_call":
            called.add(item.get("call_id"))
        elif item.get("type") == "function_call_output":
            if item.get("call_id") not in called or item.get("call_id") in answered:
                return "a tool output without an earlier call"
            answered.add(item.get("call_id"))
    return None if answered == called else "a tool call without its output"


_CHECKS: Final[dict[str, Callable[[Sequence[CanonicalMessage]], str | None]]] = {
    "anthropic": _anthropic_problem,
    "openai-chat": _chat_problem,
    "openai-responses": _responses_problem,
}


def structure_problem(messages: Sequence[CanonicalMessage], destination: str | None) -> str | None:
    """``None`` when ``destination`` accepts the plan's shape once converted; else a short reason."""
    check = _CHECKS.get(destination) if destination is not None else None
    if check is None:
        return None
    try:
        return check(messages)
    except Exception as error:  # a block the converter cannot write: the plan cannot be sent as it is
        return f"the plan does not convert ({type(error).__name__})"
