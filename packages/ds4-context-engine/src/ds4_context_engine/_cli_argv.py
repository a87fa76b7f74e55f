"""The read commands of ``ds4-context`` and a parser for their plain command lines, without typer.

``ds4-context plan SESSION --model openai:gpt-4.1-mini --window 128000 --json`` should cost what reading
and planning the session costs, not the 0.2-0.3 s that importing typer (which builds a pydantic
``TypeAdapter`` for each parameter of each command), pydantic and rich takes. So :func:`run_fast` parses
the command lines of ``plan`` and of the read commands (``status``, ``manifest``, ``config`` ...) itself,
and runs them with the same code the typer application runs (:mod:`ds4_context_engine._cli_common`).

It accepts only what it understands completely: the command's own options, each at most once, written
``--name value`` or ``--name=value``, plain decimal integers within the option's range, and one session
path. Anything else (``--help``, an unknown or repeated option, a missing or odd value, ``--``, options
before the command, shell completion) returns ``False`` without a side effect, and the typer application
then parses the same command line and prints its own help or usage error. So both give the same output,
error codes and exit statuses; only the start-up differs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

__all__ = [
    "PLANNING_OPTIONS",
    "PLAN_COMMANDS",
    "PLAN_OPTIONS",
    "READ_COMMANDS",
    "FastCommand",
    "ReadCommand",
    "parse_fast",
    "run_fast",
]

PLANNING_OPTIONS: Final = ("store", "no_store", "model", "window", "max_tokens", "leaf", "config")
"""The workspace options most session commands take (``plan`` adds ``retrieve`` and ``digest``)."""


class ReadCommand(NamedTuple):
    """A session command that only reads: its name, the ``/context`` function and its help line."""

    name: str
    function: str
    summary: str


_PLAN_NOTE: Final = " Needs --window N (and --model provider:model if the session names no model)."
PLAN_COMMANDS: Final = ("manifest", "included", "excluded", "compact-preview", "retrieved", "compaction")
"""The read commands listed under "Plan, explain, restore" in ``--help``."""
READ_COMMANDS: Final = tuple(
    ReadCommand(*row)
    for row in (
        ("status", "context_status", "The session at a glance: branch, model, size, pins, issues."),
        ("adapter", "context_adapter", "The runtime-adapter view: capabilities as negotiated, diagnostics."),
        (
            "tokens",
            "context_tokens",
            "Token estimate (chars-v1) of the native context, by role, largest first.",
        ),
        (
            "manifest",
            "context_manifest",
            "What the plan includes and leaves out, with its budget." + _PLAN_NOTE,
        ),
        (
            "included",
            "context_included",
            "Every message in the plan with its kind, reason and tokens." + _PLAN_NOTE,
        ),
        ("excluded", "context_excluded", "What the plan leaves out, and why." + _PLAN_NOTE),
        ("pins", "context_pins", "Pinned entries (replayed from the session's custom entries)."),
        (
            "privacy",
            "context_privacy",
            "What privacy enforcement would do to the next request (counts only).",
        ),
        ("model", "context_model", "The model the session uses and the one the planner budgets against."),
        (
            "compact-preview",
            "context_compact_preview",
            "What compaction would do now (dry run)." + _PLAN_NOTE,
        ),
        (
            "summaries",
            "context_summaries",
            "Compaction and branch summaries in the session, checked against summary-contract-v1.",
        ),
        (
            "compaction",
            "context_compaction",
            "Compaction entries and what they cut; with --model and --window, whether a plan would compact.",
        ),
        (
            "retrieved",
            "context_retrieved",
            "Retrieved-history items of the plan: source entry, tokens, score, reason." + _PLAN_NOTE,
        ),
        ("artifacts", "context_artifacts", "Large tool outputs the derived store keeps for this session."),
        ("storage", "context_storage", "Sizes and counts of the derived store."),
        ("health", "context_health", "Session issues, history validation and the store's state."),
        ("config", "context_config", "The effective configuration and any warnings from loading it."),
    )
)
"""Every read-only session command, in ``--help`` order."""

PLAN_OPTIONS: Final = (*PLANNING_OPTIONS, "retrieve", "digest")
"""``plan``'s workspace options."""

_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,17}")  # ASCII digits, no sign, no leading zero, < 10**18
_COMPLETION_VARIABLE: Final = re.compile(r"_.+_COMPLETE")


class _Option(NamedTuple):
    parameter: str
    kind: str  # "flag", "str", "int" or "path"
    value: object = None  # what a flag sets
    minimum: int = 0


_OPTIONS: Final[Mapping[str, _Option]] = {
    "--store": _Option("store", "str"),
    "--no-store": _Option("no_store", "flag", True),
    "--model": _Option("model", "str"),
    "--window": _Option("window", "int", minimum=1),
    "--max-tokens": _Option("max_tokens", "int", minimum=1),
    "--leaf": _Option("leaf", "str"),
    "--config": _Option("config", "path"),
    "--retrieve": _Option("retrieve", "int", minimum=0),
    "--digest": _Option("digest", "flag", True),
    "--no-digest": _Option("digest", "flag", False),
    "--json": _Option("as_json", "flag", True),
}
_DEFAULTS: Final[Mapping[str, object]] = {
    "store": None,
    "no_store": False,
    "model": None,
    "window": None,
    "max_tokens": None,
    "leaf": None,
    "config": None,
    "retrieve": None,
    "digest": True,
    "as_json": False,
}
_COMMAND_OPTIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "plan": PLAN_OPTIONS,
    **{command.name: PLANNING_OPTIONS for command in READ_COMMANDS},
}


class FastCommand(NamedTuple):
    """A command line :func:`parse_fast` understood: the command, its session and its options."""

    name: str
    session: Path
    as_json: bool
    opening: dict[str, Any]


def _value(option: _Option, text: str) -> object:
    """``text`` as the option's value, or ``None`` when the typer application should judge it."""
    if option.kind == "int":
        if not _DECIMAL.fullmatch(text):
            return None
        number = int(text)
        return number if number >= option.minimum else None
    if option.kind == "path":
        return Path(text) if text and text != "-" else None
    return text if "\x00" not in text else None


def parse_fast(arguments: Sequence[str], environment: Mapping[str, str] | None = None) -> FastCommand | None:
    """The command line ``arguments`` (without the program name), or ``None`` when typer must parse it."""
    environ = os.environ if environment is None else environment
    if os.name == "nt" or any(_COMPLETION_VARIABLE.fullmatch(name) for name in environ):
        return None  # typer expands wildcards on Windows and answers shell completion
    if not arguments or arguments[0] not in _COMMAND_OPTIONS:
        return None
    allowed = _COMMAND_OPTIONS[arguments[0]]
    given: dict[str, object] = {}
    positional: list[str] = []
    rest = list(arguments[1:])
    while rest:
        word = rest.pop(0)
        if not word.startswith("-") or word == "-":
            positional.append(word)
            continue
        name, equals, inline = word.partition("=")
        option = _OPTIONS.get(name)
        if option is None or option.parameter in given:
            return None  # --help, --, a short option, an unknown or repeated option
        if option.parameter != "as_json" and option.parameter not in allowed:
            return None
        if option.kind == "flag":
            if equals:
                return None
            given[option.parameter] = option.value
            continue
        if equals:
            text = inline
        elif rest and not rest[0].startswith("-"):
            text = rest.pop(0)
        else:
            return None  # no value, or one that looks like an option: click's rules decide
        value = _value(option, text)
        if value is None:
            return None
        given[option.parameter] = value
    if len(positional) != 1 or not positional[0] or positional[0] == "-":
        return None
    values = {**_DEFAULTS, **given}
    return FastCommand(
        name=arguments[0],
        session=Path(positional[0]),
        as_json=bool(values["as_json"]),
        opening={parameter: values[parameter] for parameter in allowed},
    )


def run_fast(arguments: Sequence[str]) -> bool:
    """Run ``arguments`` if :func:`parse_fast` understands them; ``False`` (nothing done) otherwise.

    Ends as the typer application would: normally for status 0, with :class:`SystemExit` otherwise.
    """
    parsed = parse_fast(arguments)
    if parsed is None:
        return False
    from . import _cli_common as common  # noqa: PLC0415 - only for a command line it will run

    action: Callable[..., Any]
    printer: common.Printer
    if parsed.name == "plan":
        action, printer = common.plan_action, common.print_planned
    else:
        function = next(command.function for command in READ_COMMANDS if command.name == parsed.name)
        action = common.read_action(function)
        printer = common.print_status if parsed.name == "status" else common.print_result
    try:
        common.run_session_command(
            action,
            printer,
            session=parsed.session,
            as_json=parsed.as_json,
            opening=parsed.opening,
            arguments={},
        )
    except BrokenPipeError:
        # the reader went away (`| head`): nothing to report, and the exit the typer application gives
        common.silence_stdout()
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None  # what typer does on ^C
    except Exception as error:
        raise common.internal_error(error) from None
    return True
