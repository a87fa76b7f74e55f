"""``/context <command> [args]`` as a host types it: parse, run, render."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Final

import msgspec

from ds4_context_engine._exceptions import CommandError

from ._basic import (
    context_config,
    context_health,
    context_memory,
    context_model,
    context_pin,
    context_pins,
    context_rebuild_index,
    context_status,
    context_storage,
    context_tokens,
    context_unpin,
)
from ._planned import (
    context_compact_preview,
    context_excluded,
    context_explain,
    context_included,
    context_manifest,
    context_restore,
)
from ._render import render_text
from ._runtime import context_adapter, context_privacy
from ._views import context_artifacts, context_compaction, context_retrieved, context_summaries
from ._workspace import ContextWorkspace

__all__ = ["CONTEXT_COMMANDS", "run_context_command", "run_context_command_text"]

CONTEXT_COMMANDS: Final = (
    "adapter",
    "artifacts",
    "compact-preview",
    "compaction",
    "config",
    "excluded",
    "explain",
    "health",
    "included",
    "manifest",
    "memory",
    "model",
    "pin",
    "pins",
    "privacy",
    "rebuild-index",
    "restore",
    "retrieved",
    "status",
    "storage",
    "summaries",
    "tokens",
    "unpin",
)

_NO_ARGUMENTS: Final[dict[str, Callable[[ContextWorkspace], msgspec.Struct]]] = {
    "adapter": context_adapter,
    "artifacts": context_artifacts,
    "compact-preview": context_compact_preview,
    "compaction": context_compaction,
    "config": context_config,
    "excluded": context_excluded,
    "health": context_health,
    "included": context_included,
    "manifest": context_manifest,
    "model": context_model,
    "pins": context_pins,
    "privacy": context_privacy,
    "rebuild-index": context_rebuild_index,
    "retrieved": context_retrieved,
    "status": context_status,
    "storage": context_storage,
    "summaries": context_summaries,
    "tokens": context_tokens,
}


def _one_id(name: str, arguments: list[str]) -> str:
    if len(arguments) != 1:
        raise CommandError("command-argument-invalid", f"/context {name} takes exactly one id")
    return arguments[0]


def run_context_command(workspace: ContextWorkspace, text: str) -> msgspec.Struct:
    """Run ``/context ...`` (the ``/context`` prefix is optional; no command means ``status``)."""
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise CommandError("command-argument-invalid", "unbalanced quotes in the command") from error
    if words and words[0] == "/context":
        words = words[1:]
    name, arguments = (words[0], words[1:]) if words else ("status", [])
    if name in _NO_ARGUMENTS:
        if arguments:
            raise CommandError("command-argument-invalid", f"/context {name} takes no arguments")
        return _NO_ARGUMENTS[name](workspace)
    if name == "explain":
        return context_explain(workspace, _one_id(name, arguments))
    if name == "restore":
        return context_restore(workspace, _one_id(name, arguments))
    if name == "unpin":
        return context_unpin(workspace, _one_id(name, arguments))
    if name == "pin":
        if not arguments:
            raise CommandError(
                "command-argument-invalid", "/context pin takes an entry id and an optional label"
            )
        return context_pin(workspace, arguments[0], label=" ".join(arguments[1:]) or None)
    if name == "memory":
        if not arguments:
            return context_memory(workspace)
        if arguments[0] == "add" and len(arguments) > 1:
            return context_memory(workspace, add=" ".join(arguments[1:]))
        if arguments[0] == "remove" and len(arguments) == 2:
            return context_memory(workspace, remove=arguments[1])
        raise CommandError("command-argument-invalid", "use /context memory [add TEXT | remove ID]")
    raise CommandError("command-unknown", "unknown /context command; try /context status")


def run_context_command_text(workspace: ContextWorkspace, text: str) -> str:
    """Run a command and render it as plain text; command errors are rendered, never raised."""
    try:
        return render_text(run_context_command(workspace, text))
    except CommandError as error:
        return f"/context error [{error.code}]: {error.args[0] if error.args else ''}"
