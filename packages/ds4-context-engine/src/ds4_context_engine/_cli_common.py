"""What the session commands of ``ds4-context`` do once their command line is parsed, without typer.

Two parsers share it: the typer application (:mod:`ds4_context_engine._cli_app`, every command, its help
and its usage errors) and the fast path (:mod:`ds4_context_engine._cli_fast`), which parses the plain
command lines of the read commands itself, so that ``plan --json`` does not pay for typer, pydantic and
rich. Everything a command prints or exits with is decided here, so the two cannot disagree: an error is
one line ``error [code]: ...`` on stderr and a :class:`SystemExit` with one of the ``EXIT_*`` statuses.
rich is imported only when a table is drawn, the commands package on first use.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeVar

import msgspec

from ds4_context_core import Ds4ContextError

from ._cli_rich import Console, Table, escape  # rich itself only when a table is drawn
from .cli import EXIT_ERROR, EXIT_FALLBACK, EXIT_INTERNAL, EXIT_USAGE

if TYPE_CHECKING:
    from .commands import ContextWorkspace

__all__ = [
    "echo",
    "fail",
    "guard",
    "internal_error",
    "plan_action",
    "print_composition",
    "print_plan",
    "print_planned",
    "print_result",
    "print_status",
    "read_action",
    "run_session_command",
    "short_id",
    "silence_stdout",
    "usage",
]

_BAR_WIDTH: Final = 60
_R = TypeVar("_R")
# what click.echo removes from text written to something that is not a terminal
_ANSI_CODES: Final = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")


def _stream(err: bool) -> TextIO:
    return sys.stderr if err else sys.stdout


def echo(text: str, *, err: bool = False) -> None:
    """One line on stdout (or stderr), as ``click.echo`` writes it: ANSI codes dropped off a terminal."""
    stream = _stream(err)
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        text = _ANSI_CODES.sub("", text)
    stream.write(text + "\n")
    stream.flush()


def fail(code: str, message: str, status: int = EXIT_ERROR) -> SystemExit:
    """``error [code]: message`` on stderr; raise the returned exit (status :data:`EXIT_ERROR`)."""
    echo(f"error [{code}]: {message}", err=True)
    return SystemExit(status)


def usage(code: str, message: str) -> SystemExit:
    """A command line that cannot work as written: one line, exit :data:`EXIT_USAGE`."""
    return fail(code, message, EXIT_USAGE)


def internal_error(error: BaseException) -> SystemExit:
    """The last resort: one line naming the exception's type only, exit :data:`EXIT_INTERNAL`.

    Its message may quote a session, a prompt or a payload, and a traceback would print the local values
    of the frames that held them.
    """
    echo(
        f"error [internal-error]: unexpected {type(error).__name__} (a bug in ds4-context; the "
        "message is not shown, as it may hold session content)",
        err=True,
    )
    return SystemExit(EXIT_INTERNAL)


def silence_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's final flush does not fail again."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test runner's buffer)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, descriptor)
    os.close(null)


def guard(action: Callable[[], _R]) -> _R:
    """Run ``action``; a library error or an ``OSError`` becomes ``error [code]: ...`` and exit 2."""
    try:
        return action()
    except Ds4ContextError as error:
        raise fail(error.code, str(error.args[0]) if error.args else error.code) from None
    except OSError as error:
        raise fail("file-unreadable", error.strerror or "cannot read a file") from None


def _commands() -> Any:
    """The commands package, imported on first use."""
    from . import commands  # noqa: PLC0415

    return commands


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _model_reference(reference: str | None, window: int | None) -> tuple[str, str] | None:
    """``--model`` parsed, checked before anything is opened: a usage error needs no session to be read."""
    if reference is None:
        return None
    if window is None:
        raise usage("window-required", "--model needs --window N (the context window in tokens)")
    from .providers import ModelReferenceError, parse_model_reference  # noqa: PLC0415 - only when asked

    try:
        parsed = parse_model_reference(reference)
    except ModelReferenceError as error:
        raise usage(error.code, "the model must be written provider:model") from None
    return parsed.provider, parsed.model


def _model(
    reference: tuple[str, str] | None,
    window: int | None,
    max_tokens: int | None,
    workspace_model: tuple[str | None, str | None],
) -> Any:
    """The model to plan for: ``--model``, else the one the session records; ``None`` without ``--window``."""
    if window is None:
        return None
    provider, model_id = reference or workspace_model
    if not provider or not model_id:
        raise usage("model-required", "the session names no model; pass --model provider:model")
    from ds4_context_core import ModelDescriptor  # noqa: PLC0415 - with the workspace, on first use

    return ModelDescriptor(
        provider=provider, id=model_id, context_window=window, max_tokens=max_tokens
    )  # no max_tokens: the library's default reserve (docs/core/planner.md), as for any host


def _load_config(path: Path | None) -> Any:
    if path is None:
        return None
    from ._config_file import read_config_file  # noqa: PLC0415 - only with --config

    return guard(lambda: read_config_file(path))


@contextmanager
def _workspace(
    session: Path,
    *,
    store: str | None,
    no_store: bool = False,
    model: str | None = None,
    window: int | None = None,
    max_tokens: int | None = None,
    leaf: str | None = None,
    config: Path | None = None,
    retrieve: int | None = None,
    digest: bool = True,
) -> Iterator[ContextWorkspace]:
    reference = _model_reference(model, window)
    settings = _load_config(config)
    commands = _commands()
    hits = commands.RETRIEVAL_HITS_DEFAULT if retrieve is None else retrieve

    def open_workspace() -> ContextWorkspace:
        workspace: ContextWorkspace = commands.ContextWorkspace.open(
            session, store_path=store, no_store=no_store, config=settings, leaf_id=leaf, retrieval_hits=hits,
            task_digest=digest,
        )  # fmt: skip
        context = workspace.context
        workspace.model = _model(reference, window, max_tokens, (context.provider, context.model_id))
        return workspace

    workspace = guard(open_workspace)
    if settings is not None:  # without --config there is nothing that could have been rejected
        _warn_config(workspace)
    try:
        yield workspace
    finally:
        workspace.close()


def _warn_config(workspace: ContextWorkspace) -> None:
    """Each part of the config that was rejected (and replaced by its default), one line on stderr.

    The lines name the key path and a fixed word, never a value; ``ds4-context config`` lists them too.
    """
    for warning in workspace.config_result.warnings:
        echo(f"warning [{warning.code}]: {warning.path or '-'}: {warning.detail}", err=True)


Printer = Callable[["ContextWorkspace", Any, bool], None]


def run_session_command(
    action: Callable[..., Any],
    printer: Printer,
    *,
    session: Path,
    as_json: bool,
    opening: dict[str, Any],
    arguments: dict[str, Any],
) -> None:
    """Open the workspace ``opening`` describes, run ``action(workspace, **arguments)``, print, close."""
    with _workspace(session, **opening) as workspace:
        result = guard(lambda: action(workspace, **arguments))
        printer(workspace, result, as_json)


def read_action(function: str) -> Callable[[ContextWorkspace], msgspec.Struct]:
    """The action of a read command: the ``/context`` function named ``function`` on the workspace."""

    def action(workspace: ContextWorkspace) -> msgspec.Struct:
        return getattr(_commands(), function)(workspace)  # type: ignore[no-any-return]

    return action


def echo_json(command: str, body: Any) -> None:
    """Print ``body`` in the one ``--json`` convention: snake_case, every field, a ``command`` key."""
    from .commands._render import json_data  # noqa: PLC0415 - with the commands, on first use

    data = json_data(body)
    if not isinstance(data, dict):
        raise TypeError("a command's JSON is an object")
    echo(msgspec.json.encode({**data, "command": command}, order="sorted").decode())


def emit(result: msgspec.Struct, as_json: bool) -> None:
    if as_json:
        echo(_commands().render_json(result))
    else:
        _console().print(_commands().render_rich(result))


def print_result(workspace: ContextWorkspace, result: Any, as_json: bool) -> None:
    del workspace  # a /context result renders by itself
    emit(result, as_json)


def print_status(workspace: ContextWorkspace, result: Any, as_json: bool) -> None:
    """The status tables and, when there is a model to plan for (``--window``), the plan's composition."""
    emit(result, as_json)
    if as_json or workspace.model is None:
        return
    plan = guard(workspace.plan)
    print_composition(_console(), plan)


def print_composition(console: Console, plan: Any) -> None:
    from ._cli_bars import composition, render_bar  # noqa: PLC0415 - tables only

    budget = plan.budget
    parts = composition(
        plan.items,
        window=budget.context_window,
        output_reserve=budget.output_reserve,
        fixed_tokens=budget.fixed_tokens,
    )
    console.print(f"window ({budget.context_window:,} tokens)", style="bold")
    console.print(render_bar(parts, _BAR_WIDTH, window=budget.context_window))


def print_planned(workspace: ContextWorkspace, plan: Any, as_json: bool) -> None:
    """``plan``'s output; a fallback plan is printed too, then exits :data:`EXIT_FALLBACK`."""
    if as_json:
        from ._cli_json import PlanOutput  # noqa: PLC0415 - with the planner, on first use

        model = workspace.model
        body = PlanOutput(
            model=f"{model.provider}:{model.id}" if model else None,
            manifest=plan.manifest,
            budget=plan.budget,
            items=plan.items,
        )
        echo_json("plan", body)
    else:
        print_plan(_console(), workspace, plan)
    fallback = plan.manifest.fallback
    if fallback is not None:
        # the plan is printed either way; a script must still be able to tell it did not fit
        echo(f"warning [{fallback.code}]: the planner fell back ({fallback.mode})", err=True)
        raise SystemExit(EXIT_FALLBACK)


def plan_action(workspace: ContextWorkspace) -> Any:
    """Plan the session for a model: what is kept, trimmed, receipted and left out, and why."""
    if not _stderr_may_be_terminal():  # a pipe or a log gets the result only, without loading rich
        return workspace.plan()
    progress = Console(stderr=True)
    if not progress.is_terminal:
        return workspace.plan()
    with progress.status(f"planning {len(workspace.context.messages):,} messages", spinner="dots"):
        return workspace.plan()


def _stderr_may_be_terminal() -> bool:
    """False when rich would surely see no terminal on stderr (see ``Console.is_terminal``)."""
    forced = os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR") is not None
    return forced or sys.stderr.isatty()


def short_id(message_id: str) -> str:
    return message_id.rsplit(":", 1)[-1]


_FIXED_SOURCES: Final = {"usage": ", measured from the session's usage", "explicit": ", as configured"}


def print_plan(console: Console, workspace: ContextWorkspace, plan: Any) -> None:
    manifest = plan.manifest
    budget = plan.budget
    summary = Table(title="plan", show_header=False, title_justify="left")
    summary.add_column("field", style="bold")
    summary.add_column("value")
    model = workspace.model
    summary.add_row("model", f"{model.provider}:{model.id}" if model else "-")
    summary.add_row("window / hard limit", f"{budget.context_window:,} / {budget.hard_limit:,} tokens")
    history_tokens = f"{manifest.native_tokens:,} tokens"
    if budget.fixed_tokens:
        # the messages alone are what `status` and `tokens` estimate: show both parts of the sum
        messages_only = manifest.native_tokens - budget.fixed_tokens
        history_tokens += f" ({messages_only:,} + {budget.fixed_tokens:,} fixed)"
    summary.add_row("history", f"{manifest.history_messages} messages, {history_tokens}")
    # supplements (task digest, retrieved history, memory) are items but not history messages: say so, so
    # that the kept table's total (every item) adds up to this line
    supplements = len(plan.items) - manifest.included_messages
    extra = f" + {supplements} supplement{'s' if supplements != 1 else ''}" if supplements else ""
    summary.add_row(
        "planned", f"{manifest.included_messages} messages{extra}, {manifest.planned_tokens:,} tokens"
    )
    summary.add_row("saved", f"{manifest.saved_tokens:,} tokens")
    if budget.fixed_tokens:
        # history and planned both count the request's fixed part: say how much, so the rows add up
        source = _FIXED_SOURCES.get(getattr(workspace, "fixed_tokens_source", ""), "")
        summary.add_row(
            "fixed overhead",
            f"{budget.fixed_tokens:,} tokens (system prompt and tools{source}; in history and planned)",
        )
    if manifest.fallback is not None:
        summary.add_row("fallback", f"[red]{manifest.fallback.mode}: {manifest.fallback.code}[/red]")
    console.print(summary)
    print_composition(console, plan)
    kept = Counter((item.kind, item.reason) for item in plan.items)
    tokens: Counter[tuple[str, str]] = Counter()
    for item in plan.items:
        tokens[(item.kind, item.reason)] += item.tokens
    table = Table(title="kept (in the plan)", title_justify="left")
    for column in ("kind", "why", "messages", "tokens"):
        table.add_column(column)
    for key, count in sorted(kept.items(), key=lambda pair: -tokens[pair[0]]):
        table.add_row(key[0], key[1], str(count), f"{tokens[key]:,}")
    if budget.fixed_tokens:
        table.add_row("fixed overhead", "system prompt and tools", "-", f"{budget.fixed_tokens:,}")
    table.add_section()
    total = sum(tokens.values()) + budget.fixed_tokens  # = the planned tokens of the summary
    table.add_row("total", "", str(len(plan.items)), f"{total:,}", style="bold")
    console.print(table)
    if manifest.receipts:
        receipts = Table(title="receipted (whole read-only steps replaced; restorable)", title_justify="left")
        receipts.add_column("receipt", overflow="fold")
        for column in ("originals", "original tokens", "receipt tokens"):
            receipts.add_column(column)
        for record in manifest.receipts:
            receipts.add_row(
                short_id(record.receipt_id), str(len(record.original_message_ids)),
                f"{record.original_tokens:,}", f"{record.receipt_tokens:,}",
            )  # fmt: skip
        console.print(receipts)
    if manifest.exclusions:
        left = Table(title="left out", title_justify="left")
        for column in ("why", "messages", "tokens"):
            left.add_column(column)
        for column in ("from", "to"):
            # an id is never cut: two ids may differ only in their last characters
            left.add_column(column, overflow="fold")
        for exclusion in manifest.exclusions:
            left.add_row(
                exclusion.reason, str(exclusion.count), f"{exclusion.tokens:,}",
                escape(short_id(exclusion.first_message_id or "-")),
                escape(short_id(exclusion.last_message_id or "-")),
            )  # fmt: skip
        console.print(left)
