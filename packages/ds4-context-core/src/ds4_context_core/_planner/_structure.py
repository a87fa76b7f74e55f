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
diagnostic code. The self-check then reads the plan as the destination's converter writes it and checks
the rules above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from ds4_context_core._history._model import (
    CanonicalMessage,
    MessageFlags,
    OpaqueProviderBlock,
    Provenance,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

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


# ------------------------------------------------------------------ the rules, on the plan as converted

# The checks below read the canonical plan the way each converter writes it (``_interop``), in one pass
# over the blocks: converting the plan only to look at it cost ten times the plan itself on long plans.
# The property tests check the same rules on the real conversion, so the two cannot drift apart.

_SKIPPED: Final = (ThinkingBlock, OpaqueProviderBlock)


def _anthropic_problem(messages: Sequence[CanonicalMessage]) -> str | None:
    """Anthropic: system messages are lifted out, tool messages are user turns, and every run of one
    role is one turn with its tool results first."""
    role: str | None = None  # of the turn being read
    calls: set[str] = set()  # tool_use ids of the turn being read (assistant) or the one before (user)
    answered: set[str] = set()
    for message in messages:
        if message.role in _SYSTEM_ROLES or not message.blocks:
            continue
        side = "assistant" if message.role == "assistant" else "user"
        if side != role:
            if role is None and side != "user":
                return "the first turn is not from the user"
            if role == "user" and not calls <= answered:
                return "a tool call whose result is not in the next turn"
            if side == "user":
                answered = set()
            else:
                calls = set()
            role = side
        other = False
        for block in message.blocks:
            kind = type(block)
            if kind is ToolCallBlock:
                if side != "assistant":
                    return "a tool block in a turn of the wrong role"
                calls.add(block.id)  # type: ignore[union-attr]
            elif kind is ToolResultBlock:
                if side != "user":
                    return "a tool block in a turn of the wrong role"
                if block.tool_call_id not in calls:  # type: ignore[union-attr]
                    return "a tool result not right after its call"
                if other and message.role != "tool":
                    return "a tool result after other content"
                answered.add(block.tool_call_id)  # type: ignore[union-attr]
            else:
                other = True
    if role == "assistant" and calls:
        return "a tool call whose result is not in the next turn"
    if role == "user" and not calls <= answered:
        return "a tool call whose result is not in the next turn"
    return None


def _chat_problem(messages: Sequence[CanonicalMessage]) -> str | None:
    """Chat: one ``tool`` message per result, written before the rest of its message; an assistant
    message right after a calling one (before its results) joins it."""
    pending: set[str] = set()
    joinable = False  # the last message written was an assistant message with calls
    for message in messages:
        results = [b for b in message.blocks if type(b) is ToolResultBlock]
        for result in results:
            if result.tool_call_id not in pending:
                return "a tool message not right after the message that called it"
            pending.discard(result.tool_call_id)
            joinable = False
        if message.role == "tool" or not any(
            type(b) not in (*_SKIPPED, ToolResultBlock) for b in message.blocks
        ):
            continue
        calls = {b.id for b in message.blocks if type(b) is ToolCallBlock}
        if message.role == "assistant" and joinable:
            pending |= calls
            continue
        if pending:
            return "a message between a tool call and its tool message"
        pending = calls if message.role == "assistant" else set()
        joinable = bool(pending)
    return "a tool call without its tool message" if pending else None


def _responses_problem(messages: Sequence[CanonicalMessage]) -> str | None:
    """Responses: a message's outputs, then its content, then its calls, each an item of its own."""
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for block in message.blocks:
            if type(block) is ToolResultBlock:
                call_id = block.tool_call_id
                if call_id not in called or call_id in answered:
                    return "a tool output without an earlier call"
                answered.add(call_id)
        called.update(b.id for b in message.blocks if type(b) is ToolCallBlock)
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
    except Exception as error:  # a message whose fields are not what its type says
        return f"the plan cannot be checked ({type(error).__name__})"
