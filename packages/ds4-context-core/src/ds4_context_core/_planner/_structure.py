"""Provider structure: repair a plan so the destination format the host names accepts its shape.

Anthropic's Messages API rejects a conversation whose first non-system message is not from the user; a
cut (or a receipt) can leave an assistant message first. The repair keeps every message and inserts one
short synthetic user message before it, with an id derived from the message it precedes, so the same plan
always gets the same bytes (cache-stable). Each repair leaves a diagnostic code.
"""

from __future__ import annotations

from typing import Final

from ds4_context_core._history._model import CanonicalMessage, MessageFlags, Provenance, TextBlock

from ._common import hash16
from ._decisions import FallbackError, PlanInputs
from ._emit import Emitted
from ._types import PRIORITY_RECENT_TURN, PlanDiagnostic, PlanItem

DESTINATIONS: Final = ("anthropic", "openai-chat", "openai-responses")
OMITTED_NOTE: Final = "[earlier conversation omitted]"
_SYSTEM_ROLES: Final = frozenset({"system", "developer"})


def check_destination(destination: object) -> str | None:
    """The destination, or :class:`FallbackError` ``destination-invalid`` for an unknown one."""
    if destination is None or (isinstance(destination, str) and destination in DESTINATIONS):
        return destination
    raise FallbackError("destination-invalid", f"destination must be one of {', '.join(DESTINATIONS)}")


def _first_turn(messages: list[CanonicalMessage]) -> int:
    return next((i for i, m in enumerate(messages) if m.role not in _SYSTEM_ROLES), len(messages))


def repair_structure(inputs: PlanInputs, emitted: Emitted, destination: str | None) -> None:
    """Insert what ``destination`` needs so the plan is accepted; never removes a message."""
    if destination != "anthropic":
        return
    messages = emitted.messages
    first = _first_turn(messages)
    if first == len(messages) or messages[first].role == "user":
        return
    before = messages[first]
    note_id = f"ds4:omitted:{hash16('omitted', before.id)}"
    note = CanonicalMessage(
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
    tokens = inputs.estimator(note)
    messages.insert(first, note)
    emitted.items.insert(
        first,
        PlanItem(
            message_id=note_id,
            kind="message",
            reason="structure-repair",
            tokens=tokens,
            priority=PRIORITY_RECENT_TURN,
        ),
    )
    emitted.history_tokens += tokens
    inputs.diagnostics.append(
        PlanDiagnostic(code="structure-first-user-inserted", detail="a user note precedes the first turn")
    )


def structure_problem(messages: tuple[CanonicalMessage, ...], destination: str | None) -> str | None:
    """``None`` when ``destination`` accepts the plan's shape; else a short reason."""
    if destination == "anthropic":
        first = next((m for m in messages if m.role not in _SYSTEM_ROLES), None)
        if first is not None and first.role != "user":
            return "the first non-system message is not from the user"
    return None
