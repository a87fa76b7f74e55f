"""``ds4_restore``: the tool the model calls to get back what a receipt or a trimmed result stands for.

A receipt or a trim marker names an id only when the host offers this tool (core's
``pruning.restore_tool``, which :func:`offer_restore_tool` sets), so the model never sees an id it
cannot use. The handler is read-only and built on ``/context restore`` (:func:`context_restore`): it
re-plans the session, finds the id in that plan and returns the originals as text, bounded to
``RESTORE_TOOL_MAX_CHARS`` in all. A bad call gives an error result with a stable code, never an
exception: the turn goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ds4_context_core.adapter import ToolDefinition
from ds4_context_core.config import Ds4ContextConfig
from ds4_context_engine._exceptions import CommandError

from ._planned import context_restore
from ._workspace import ContextWorkspace

__all__ = [
    "RESTORE_TOOL_CODES",
    "RESTORE_TOOL_MAX_CHARS",
    "RESTORE_TOOL_NAME",
    "RestoreToolOutput",
    "handle_restore_tool_call",
    "offer_restore_tool",
    "restore_tool_definition",
]

RESTORE_TOOL_NAME: Final = "ds4_restore"
RESTORE_TOOL_MAX_CHARS: Final = 16_000
_MAX_ID_CHARS: Final = 256
RESTORE_TOOL_CODES: Final = ("restore-tool-arguments-invalid", "restore-unknown-id")


class RestoreToolOutput(msgspec.Struct, frozen=True, kw_only=True):
    """What the tool returns to the model: ``text``, and ``code`` with ``is_error`` when it failed."""

    text: str
    is_error: bool = False
    code: str | None = None
    truncated: bool = False


def restore_tool_definition(name: str = RESTORE_TOOL_NAME) -> ToolDefinition:
    """The tool spec to offer the model (JSON Schema of its one argument, ``id``)."""
    return ToolDefinition(
        name=name,
        description=(
            "Show the original messages behind a context receipt or a trimmed tool result. Pass the id "
            "the receipt or the trim marker names. Read-only: it never runs or repeats a tool call."
        ),
        parameters={
            "type": "object",
            "properties": {
                "id": {
                    "type": "string",
                    "description": "The id a receipt or a trim marker names.",
                    "minLength": 1,
                    "maxLength": _MAX_ID_CHARS,
                }
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    )


def offer_restore_tool(
    config: Ds4ContextConfig | Mapping[str, Any] | None, name: str = RESTORE_TOOL_NAME
) -> dict[str, Any]:
    """``config`` (as a mapping) with ``pruning.restore_tool`` set, so receipts name ids for the tool."""
    settings: dict[str, Any] = (
        config.model_dump() if isinstance(config, Ds4ContextConfig) else dict(config or {})
    )
    pruning = dict(settings.get("pruning") or {})
    pruning["restore_tool"] = name
    settings["pruning"] = pruning
    return settings


def _error(code: str, text: str) -> RestoreToolOutput:
    return RestoreToolOutput(text=f"{RESTORE_TOOL_NAME} failed ({code}): {text}", is_error=True, code=code)


def handle_restore_tool_call(workspace: ContextWorkspace, arguments: object) -> RestoreToolOutput:
    """Answer one ``ds4_restore`` call of the model against ``workspace``'s current plan."""
    reference = arguments.get("id") if isinstance(arguments, Mapping) else None
    if (
        not isinstance(reference, str)
        or not 0 < len(reference) <= _MAX_ID_CHARS
        or not reference.isprintable()
        or (isinstance(arguments, Mapping) and set(arguments) - {"id"})
    ):
        return _error("restore-tool-arguments-invalid", 'pass exactly one argument, "id", a string')
    try:
        result = context_restore(workspace, reference)
    except CommandError as error:
        if getattr(error, "code", None) == "restore-unknown-id":
            return _error("restore-unknown-id", "no receipt or trimmed result in this context has that id")
        raise
    parts: list[str] = [f"Originals of {result.restored_id} ({len(result.messages)} message(s)):"]
    used = len(parts[0])
    truncated = False
    for message in result.messages:
        head = f"--- {message.role} {message.message_id}{' (shortened)' if message.truncated else ''} ---"
        room = RESTORE_TOOL_MAX_CHARS - used - len(head) - 2
        if room <= 0:
            truncated = True
            break
        body = message.text if len(message.text) <= room else message.text[:room]
        truncated = truncated or message.truncated or len(body) < len(message.text)
        parts.extend((head, body))
        used += len(head) + len(body) + 2
    if truncated:
        parts.append("[ds4-context: the originals are longer than this tool returns; shown in part]")
    return RestoreToolOutput(text="\n".join(parts), truncated=truncated)
