"""The typer application behind ``ds4-context`` (see :mod:`ds4_context_engine.cli`).

It imports typer, rich and core when it is first used; ``ds4-context version`` never loads it, nor do
the plain command lines of ``plan`` and the read commands, which :mod:`ds4_context_engine._cli_argv`
parses itself. What a session command does once parsed is in :mod:`ds4_context_engine._cli_common`, which
both use, so that they print and exit alike.
"""

import inspect
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec
import typer
from typer.core import TyperGroup

from ds4_context_core import Ds4ContextError, ModelDescriptor

from ._cli_argv import PLAN_COMMANDS, PLAN_OPTIONS, PLANNING_OPTIONS, READ_COMMANDS
from ._cli_common import (
    Printer,
    echo_json,
    fail,
    guard,
    internal_error,
    plan_action,
    print_plan,
    print_planned,
    print_result,
    print_status,
    read_action,
    run_session_command,
    short_id,
    silence_stdout,
    usage,
)
from ._cli_rich import Console, Table, escape  # rich itself only when a table is drawn
from ._version import __version__
from .cli import DEMO_WINDOW_TOKENS, EXIT_ERROR, EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from .commands import ContextWorkspace

__all__ = ["app"]

_DEMO_PANEL_LINES: Final = 24
_DEMO_RESTORE_ROWS: Final = 8
_DEMO_WINDOW_CANDIDATES: Final = (20_000, 24_000, 16_000, 28_000, 32_000, 40_000, 48_000)
_EXIT_PIPE_CLOSED: Final = 1  # what rich does when the reader of its output goes away

# click's UsageError, found through typer's public BadParameter (typer may vendor click or use it)
_UsageError: Final[type[Exception]] = next(
    base for base in typer.BadParameter.__mro__ if base.__name__ == "UsageError"
)


# what click itself raises to end a command (an exit status, ^C, a usage or file error it prints)
_CLICK_OUTCOMES: Final[tuple[type[BaseException], ...]] = (
    typer.Exit,
    typer.Abort,
    next(base for base in _UsageError.__mro__ if base.__name__ == "ClickException"),
)


@contextmanager
def _outcomes() -> Iterator[None]:
    """Usage errors exit with :data:`EXIT_USAGE`; any exception no command expected, with one line.

    The last resort names the exception's type only: its message may quote a session, a prompt or a
    payload, and a traceback would print the local values of the frames that held them.
    """
    try:
        yield
    except _UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # a bare `ds4-context`: click prints the help
            error.exit_code = EXIT_USAGE  # type: ignore[attr-defined] # click says 2; 2 is for coded errors
            raise
        # one line like every other error (click draws a box with the usage above it)
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else "ds4-context"
        message = " ".join(error.format_message().split())  # type: ignore[attr-defined]
        raise usage("usage-invalid", f"{message} (see {command} --help)") from None
    except _CLICK_OUTCOMES:
        raise
    except BrokenPipeError:
        # the reader went away (`| head`): nothing to report, and the same exit rich uses for its tables
        silence_stdout()
        raise typer.Exit(_EXIT_PIPE_CLOSED) from None
    except Exception as error:
        raise internal_error(error) from None


class _Group(TyperGroup):
    """The root group: a command line click cannot parse exits with :data:`EXIT_USAGE`, and an
    unexpected exception with :data:`EXIT_INTERNAL` and one line, never a traceback."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _outcomes():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _outcomes():
            return super().invoke(ctx)


app = typer.Typer(
    name="ds4-context",
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    help="Context management for agent hosts: inspect, plan and restore Pi session files.",
)

# help panels, listed in this order by --help
_START: Final = "Start here"
_INSPECT: Final = "Inspect a session"
_PLAN: Final = "Plan, explain, restore"
_CHANGE: Final = "Pins and memory (appended to the session)"
_STORE: Final = "Derived store"
_ADAPTERS: Final = "Adapters and version"
_AGENT: Final = "Run an agent"

SessionArgument = Annotated[Path, typer.Argument(help="A Pi session file (.jsonl).", show_default=False)]


def _store_location(value: str | None) -> str | None:
    # a str option (it may be a URL, which a Path would mangle) checked as click checks a Path
    if value is not None and "\x00" in value:
        raise typer.BadParameter("the store path or URL holds a null byte")
    return value


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        callback=_store_location,
        help=(
            "Derived store: a SQLite file, or a postgresql:// URL shared by many hosts (password from "
            "$DS4_CONTEXT_STORE_PASSWORD or PGPASSWORD; default: $DS4_CONTEXT_STORE, else "
            "$XDG_CACHE_HOME/ds4-context/derived.sqlite3, with ~/.cache when XDG_CACHE_HOME is unset). "
            "A file that is not a ds4-context store is refused, never overwritten."
        ),
    ),
]
NoStoreOption = Annotated[bool, typer.Option("--no-store", help="Keep derived state in memory only.")]
ModelOption = Annotated[str | None, typer.Option("--model", help="The model to plan for, as provider:model.")]
WindowOption = Annotated[int | None, typer.Option("--window", min=1, help="Context window in tokens.")]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=1,
        help="The model's output limit (default: none; the reserve is then window / 4, at most 32768).",
    ),
]
LeafOption = Annotated[str | None, typer.Option("--leaf", help="Plan the branch ending at this entry id.")]
ConfigOption = Annotated[Path | None, typer.Option("--config", help="A ds4-context-config-v1 JSON file.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
RetrieveOption = Annotated[
    int | None,
    typer.Option(
        "--retrieve",
        min=0,
        help="At most this many cut messages matching the last request come back (0: none; default 4).",
        show_default=False,
    ),
]
DigestOption = Annotated[
    bool,
    typer.Option(
        "--digest/--no-digest",
        help="Put a task digest (request, instructions, files, tools) of what the plan cuts in front.",
    ),
]


def _commands() -> Any:
    """The commands package, imported on first use so that ``--help`` and ``version`` start fast."""
    from . import commands  # noqa: PLC0415

    return commands


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


# the shared behaviour under the names the commands below were written with
_fail = fail
_usage = usage
_guard = guard
_echo_json = echo_json
_short = short_id


# The options that say which workspace to open, each defined once; a command lists the ones it takes.
_WORKSPACE_PARAMETERS: Final = {
    parameter.name: parameter
    for parameter in (
        inspect.Parameter("store", inspect.Parameter.KEYWORD_ONLY, annotation=StoreOption, default=None),
        inspect.Parameter(
            "no_store", inspect.Parameter.KEYWORD_ONLY, annotation=NoStoreOption, default=False
        ),
        inspect.Parameter("model", inspect.Parameter.KEYWORD_ONLY, annotation=ModelOption, default=None),
        inspect.Parameter("window", inspect.Parameter.KEYWORD_ONLY, annotation=WindowOption, default=None),
        inspect.Parameter(
            "max_tokens", inspect.Parameter.KEYWORD_ONLY, annotation=MaxTokensOption, default=None
        ),
        inspect.Parameter("leaf", inspect.Parameter.KEYWORD_ONLY, annotation=LeafOption, default=None),
        inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=ConfigOption, default=None),
        inspect.Parameter(
            "retrieve", inspect.Parameter.KEYWORD_ONLY, annotation=RetrieveOption, default=None
        ),
        inspect.Parameter("digest", inspect.Parameter.KEYWORD_ONLY, annotation=DigestOption, default=True),
    )
}
_PLANNING: Final = PLANNING_OPTIONS
_STORE_ONLY: Final = ("store", "no_store")
_SESSION_PARAMETER: Final = inspect.Parameter(
    "session", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=SessionArgument
)
_JSON_PARAMETER: Final = inspect.Parameter(
    "as_json", inspect.Parameter.KEYWORD_ONLY, annotation=JsonOption, default=False
)


def _session_command(
    name: str,
    *,
    panel: str,
    options: tuple[str, ...] = _PLANNING,
    printer: Printer = print_result,
    summary: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``action(workspace, **own)`` as the command ``name`` taking a session file.

    The command's parameters are the session, ``action``'s own (after ``workspace``), the shared workspace
    ``options`` and ``--json``; the workspace is opened by :func:`_workspace` and closed after ``printer``
    has shown the result. A :class:`Ds4ContextError` or ``OSError`` becomes ``error [code]: ...``.
    """

    def register(action: Callable[..., Any]) -> Callable[..., Any]:
        own = list(inspect.signature(action).parameters.values())[1:]

        def command(**arguments: Any) -> None:
            session = arguments.pop("session")
            as_json = arguments.pop("as_json")
            opening = {option: arguments.pop(option) for option in options}
            run_session_command(
                action, printer, session=session, as_json=as_json, opening=opening, arguments=arguments
            )

        parameters = [_SESSION_PARAMETER, *own, *(_WORKSPACE_PARAMETERS[option] for option in options)]
        command.__signature__ = inspect.Signature([*parameters, _JSON_PARAMETER])  # type: ignore[attr-defined]
        command.__name__ = name.replace("-", "_")
        command.__doc__ = summary or action.__doc__
        app.command(name, rich_help_panel=panel)(command)
        return action

    return register


for _command in READ_COMMANDS:
    _panel = (
        _STORE
        if _command.name in ("storage", "artifacts")
        else _PLAN
        if _command.name in PLAN_COMMANDS
        else _INSPECT
    )
    _printer = print_status if _command.name == "status" else print_result
    _session_command(_command.name, panel=_panel, summary=_command.summary, printer=_printer)(
        read_action(_command.function)
    )


def _refuse_write(dry_run: bool) -> bool:
    if not dry_run:
        # plans are projections; the session is canonical and only the host compacts it
        raise _usage("compact-write-unsupported", "ds4-context never rewrites a session; use --dry-run")
    return dry_run


@_session_command("compact", panel=_PLAN)
def compact_command(
    workspace: "ContextWorkspace",
    *,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run/--write",
            help="Only show what compaction would do (the default).",
            callback=_refuse_write,
        ),
    ] = True,
) -> msgspec.Struct:
    """What compaction would do now (the same as compact-preview). Needs --window (--model if none named)."""
    del dry_run  # --write never gets here
    return _commands().context_compact_preview(workspace)  # type: ignore[no-any-return]


@_session_command("explain", panel=_PLAN)
def explain_command(
    workspace: "ContextWorkspace",
    message_id: Annotated[str, typer.Argument(help="A message id or a bare entry id.")],
) -> msgspec.Struct:
    """Why one message is in the plan, replaced by a receipt, trimmed, or left out."""
    return _commands().context_explain(workspace, message_id)  # type: ignore[no-any-return]


@_session_command("restore", panel=_PLAN)
def restore_command(
    workspace: "ContextWorkspace",
    message_id: Annotated[str, typer.Argument(help="A receipt id, a trimmed message id or any message id.")],
) -> msgspec.Struct:
    """Show the originals behind a receipt or trimmed result (read-only, 4,000 characters each)."""
    return _commands().context_restore(workspace, message_id)  # type: ignore[no-any-return]


@_session_command("pin", panel=_CHANGE, options=_STORE_ONLY)
def pin_command(
    workspace: "ContextWorkspace",
    entry_id: Annotated[str, typer.Argument(help="The entry to keep in every plan.")],
    *,
    label: Annotated[str | None, typer.Option("--label", help="A short label for the pin.")] = None,
) -> msgspec.Struct:
    """Pin an entry (appends a ds4-context.pin custom entry to the session)."""
    return _commands().context_pin(workspace, entry_id, label=label)  # type: ignore[no-any-return]


@_session_command("unpin", panel=_CHANGE, options=_STORE_ONLY)
def unpin_command(
    workspace: "ContextWorkspace",
    entry_id: Annotated[str, typer.Argument(help="A pinned entry id.")],
) -> msgspec.Struct:
    """Remove a pin (appends a ds4-context.unpin custom entry to the session)."""
    return _commands().context_unpin(workspace, entry_id)  # type: ignore[no-any-return]


@_session_command("memory", panel=_CHANGE, options=_STORE_ONLY)
def memory_command(
    workspace: "ContextWorkspace",
    *,
    add: Annotated[str | None, typer.Option("--add", help="Remember this text in every plan.")] = None,
    remove: Annotated[
        str | None, typer.Option("--remove", help="Forget the memory item with this id.")
    ] = None,
) -> msgspec.Struct:
    """List memory items, or add or remove one (as custom entries in the session)."""
    return _commands().context_memory(workspace, add=add, remove=remove)  # type: ignore[no-any-return]


@_session_command("rebuild-index", panel=_STORE, options=("store",))
def rebuild_index_command(workspace: "ContextWorkspace") -> msgspec.Struct:
    """Delete what the store derived from this session and replay the session file."""
    return _commands().context_rebuild_index(workspace)  # type: ignore[no-any-return]


@app.command("index", rich_help_panel=_STORE)
def index_command(
    sessions: Annotated[list[Path], typer.Argument(help="Pi session files to index.", show_default=False)],
    *,
    store: StoreOption = None,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Delete the store and replay every file.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Index session files into the derived store (incrementally: only appended bytes are read)."""
    from .commands._workspace import default_store_location  # noqa: PLC0415
    from .store import open_store  # noqa: PLC0415

    derived = _guard(lambda: open_store(store or default_store_location()))
    reports = []
    try:
        if rebuild:
            reports = list(_guard(lambda: derived.rebuild(sessions)))
        else:
            from rich.progress import (  # noqa: PLC0415 - 60 ms that only long work needs
                BarColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            with Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                console=Console(stderr=True), transient=True, disable=as_json,
            ) as progress:  # fmt: skip
                task = progress.add_task("indexing", total=len(sessions))
                for path in sessions:
                    progress.update(task, description=f"indexing {path.name}")
                    reports.append(_guard(lambda path=path: derived.index_file(path)))  # type: ignore[misc]
                    progress.advance(task)
    finally:
        derived.close()
    if as_json:
        from ._cli_json import IndexOutput  # noqa: PLC0415 - with the store, on first use

        _echo_json("index", IndexOutput(reports=tuple(reports)))
        return
    table = Table(title="index", title_justify="left")
    table.add_column("session", overflow="fold")  # a session id is never cut
    for column in ("mode", "entries indexed", "offset", "artifacts", "issues"):
        table.add_column(column, overflow="fold")
    for report in reports:
        table.add_row(
            escape(report.session_id), report.mode, f"{report.entries_indexed:,}",
            f"{report.indexed_offset:,}", f"{report.artifacts_stored:,}", f"{report.issues:,}",
        )  # fmt: skip
    _console().print(table)


@_session_command("plan", panel=_START, options=PLAN_OPTIONS, printer=print_planned)
def plan_command(workspace: "ContextWorkspace") -> Any:
    """Plan the session for a model: what is kept, trimmed, receipted and left out, and why."""
    return plan_action(workspace)


@app.command("conformance", rich_help_panel=_ADAPTERS)
def conformance_command(
    target: Annotated[
        str | None, typer.Argument(help="package.module:factory (default: the Pi session adapter).")
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="asyncio or trio.")] = "asyncio",
    as_json: JsonOption = False,
) -> None:
    """Run the runtime-adapter conformance kit (seven checks) and print the report."""
    report = _run_conformance(target, backend)
    if as_json:
        _echo_json("conformance", report)
    else:
        _print_conformance(_console(), report)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


def _run_conformance(target: str | None, backend: str) -> Any:
    from ds4_context_core.conformance import (  # noqa: PLC0415 - the kit is only needed here
        load_conformance_factory,
        run_runtime_adapter_conformance_sync,
    )

    from .pi import pi_session_conformance_factory  # noqa: PLC0415

    if backend not in ("asyncio", "trio"):
        raise _usage("backend-unknown", "--backend must be asyncio or trio")
    if backend == "trio" and not _trio_installed():
        # the kit's own code for it: `ds4-context conformance` and `ds4-context-conformance` say the same
        raise _fail("conformance-backend-unavailable", "the trio backend needs trio: pip install trio")
    if target is not None:
        _put_cwd_on_path()
    factory = (
        pi_session_conformance_factory()
        if target is None
        else _guard(lambda: _load_target(load_conformance_factory, target))
    )
    selected: Literal["asyncio", "trio"] = "trio" if backend == "trio" else "asyncio"
    return run_runtime_adapter_conformance_sync(factory, backend=selected)


def _put_cwd_on_path() -> None:
    """Find a target in the current directory too, as ``ds4-context-conformance`` and ``python -m`` do.

    Skipped under ``python -P`` / ``PYTHONSAFEPATH``, which ask for exactly that not to happen.
    """
    if sys.flags.safe_path:
        return
    cwd = os.getcwd()
    if not any(entry in ("", cwd) for entry in sys.path):
        sys.path.insert(0, cwd)


def _load_target(load: Callable[[str], Any], target: str) -> Any:
    """The factory ``target`` names; a module that raises while it is imported is the user's code, not a
    ds4-context bug, so it gets its own code (its type named, its message not: it may hold anything)."""
    try:
        return load(target)
    except Ds4ContextError:
        raise
    except Exception as error:
        raise _fail(
            "conformance-target-raised", f"importing or calling the target raised {type(error).__name__}"
        ) from None


def _trio_installed() -> bool:
    try:
        import trio  # noqa: F401, PLC0415 - only asked whether it is there
    except ImportError:
        return False
    return True


def _print_conformance(console: Console, report: Any) -> None:
    table = Table(
        title=f"conformance: {report.factory_name} ({report.contract_version})", title_justify="left"
    )
    table.add_column("case")
    table.add_column("result")
    for case in report.cases:
        table.add_row(case.id, "[green]pass[/green]" if case.passed else f"[red]{case.failure_code}[/red]")
    console.print(table)
    if report.skipped_parts:
        console.print("skipped (the adapter cannot carry them): " + ", ".join(report.skipped_parts))
    console.print("[bold green]passed[/bold green]" if report.passed else "[bold red]failed[/bold red]")


@app.command("demo", rich_help_panel=_START)
def demo_command(
    window: Annotated[
        int | None,
        typer.Option(
            "--window", min=2048, help="Context window to plan for (default: one that shows every layer)."
        ),
    ] = None,
    keep: Annotated[
        Path | None, typer.Option("--keep", help="Write the demo files here and keep them (must not exist).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Offline tour: a long coding session planned for a small window, one receipt restored, conformance."""
    _guard(lambda: _demo(window, keep, as_json))


def _demo(window: int | None, keep: Path | None, as_json: bool) -> None:
    console = _console()
    if keep is not None and keep.exists():
        raise _fail("demo-directory-exists", "--keep needs a directory that does not exist yet")
    root = (
        keep.resolve() if keep is not None else Path(tempfile.mkdtemp(prefix="ds4-context-demo-")).resolve()
    )
    if keep is not None:
        root.mkdir(mode=0o700, parents=True)
    from ._cli_json import DemoOutput  # noqa: PLC0415 - the demo only

    summary: DemoOutput | None = None
    try:
        from rich.progress import Progress, SpinnerColumn, TextColumn  # noqa: PLC0415 - the demo only

        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), console=Console(stderr=True), transient=True,
            disable=as_json,
        ) as progress:  # fmt: skip
            step = progress.add_task("writing a long coding session", total=None)
            project = root / "project"
            project.mkdir(mode=0o700)
            commands = _commands()
            session = commands.write_demo_session(root / "sessions" / "demo.jsonl", cwd=str(project))
            progress.update(step, description="indexing it into the derived store")
            workspace: ContextWorkspace = commands.ContextWorkspace.open(
                session, store_path=root / "state" / "derived.sqlite3"
            )
            try:
                first_user = next(m for m in workspace.context.messages if m.role == "user")
                commands.context_pin(workspace, first_user.source_entry_id, label="the task")
                progress.update(step, description="choosing a small window and planning")
                workspace.model = _demo_model(commands, window or _choose_demo_window(workspace, commands))
                plan = workspace.plan()
                restored = None
                target = _restore_target(plan)
                if target is not None:
                    progress.update(step, description="restoring the originals behind one decision")
                    restored = commands.context_restore(workspace, target)
                progress.update(step, description="running the conformance kit")
                report = _run_conformance(None, "asyncio")
                summary = DemoOutput(
                    directory=str(root),
                    kept=keep is not None,
                    session=str(session),
                    manifest=plan.manifest,
                    items=plan.items,
                    restored=restored,
                    conformance=report,
                    next_commands=tuple(_demo_next_commands(workspace, plan, root)) if keep else (),
                )
                if not as_json:
                    progress.stop()
                    _print_demo(
                        console,
                        workspace,
                        plan,
                        restored=restored,
                        report=report,
                        root=root,
                        kept=keep is not None,
                    )
            finally:
                workspace.close()
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if as_json:
        if summary is None:
            raise RuntimeError("the demo ended without a summary")
        _echo_json("demo", summary)


def _demo_model(commands: Any, window: int) -> ModelDescriptor:
    return ModelDescriptor(
        provider=commands.DEMO_PROVIDER,
        id=commands.DEMO_MODEL_ID,
        context_window=window,
        max_tokens=max(1024, window // 8),
    )


def _choose_demo_window(workspace: "ContextWorkspace", commands: Any) -> int:
    """The first candidate window whose plan shows the most kinds of decision (receipts count most)."""
    from ds4_context_core.planner import plan_context  # noqa: PLC0415

    best, best_score = DEMO_WINDOW_TOKENS, -1
    messages = workspace.context.messages
    pins = [message.id for message in messages if message.flags.pinned]
    for candidate in _DEMO_WINDOW_CANDIDATES:
        plan = plan_context(messages, model=_demo_model(commands, candidate), pins=pins)
        if plan.manifest.fallback is not None:
            continue
        kinds = {item.kind for item in plan.items}
        score = (
            4 * bool(plan.manifest.receipts)
            + 2 * ("trimmed-tool-result" in kinds)
            + bool(plan.manifest.exclusions)
        )
        if score > best_score:
            best, best_score = candidate, score
        if score == 7:
            break
    return best


def _restore_target(plan: Any) -> str | None:
    """A receipt if the plan has one, else a trimmed tool result: something worth restoring."""
    if plan.manifest.receipts:
        return str(plan.manifest.receipts[0].receipt_id)
    trimmed = [item.message_id for item in plan.items if item.kind == "trimmed-tool-result"]
    return str(trimmed[0]) if trimmed else None


def _print_demo(
    console: Console,
    workspace: "ContextWorkspace",
    plan: Any,
    *,
    restored: Any,
    report: Any,
    root: Path,
    kept: bool,
) -> None:
    session = workspace.session
    console.rule("[bold]ds4-context demo")
    console.print(
        f"A Pi coding session with {len(session.entries)} entries "
        f"({workspace.session_path.stat().st_size:,} bytes) was written to a temporary directory, and "
        "its first request was pinned with a [bold]ds4-context.pin[/bold] custom entry. The planner fits "
        "the session into a small window: recent turns stay verbatim, old tool output is trimmed (layer 1), "
        "whole read-only steps become deterministic receipts (layer 2) and the rest is left out, each "
        "decision with its reason; a task digest of what was left out (request, instructions, files, "
        "tools) stands in front. The session file is never rewritten.\n"
    )
    print_plan(console, workspace, plan)
    trimmed = [item for item in plan.items if item.kind == "trimmed-tool-result"]
    if trimmed:
        console.print(
            f"[bold]trimmed[/bold]: {len(trimmed)} old tool results keep their head and tail with a marker; "
            "the originals stay restorable."
        )
    if restored is not None:
        console.rule("restore")
        is_receipt = restored.kind == "receipt"
        kind = "Receipt" if is_receipt else "Trimmed tool result"
        console.print(
            f"{kind} {escape(_short(restored.restored_id))} stands for {len(restored.messages)} original "
            "message(s). The originals, read back from the session (nothing was lost):"
        )
        table = Table(show_header=True)
        table.add_column("message")
        table.add_column("role")
        table.add_column("first line")
        for message in restored.messages[:_DEMO_RESTORE_ROWS]:
            first_line = message.text.splitlines()[0] if message.text else ""
            table.add_row(_short(message.message_id), message.role, escape(first_line[:90]))
        hidden = len(restored.messages) - _DEMO_RESTORE_ROWS
        if hidden > 0:
            table.add_row("...", "", f"and {hidden} more (ds4-context restore SESSION ID shows them all)")
        console.print(table)
        shown = next((m for m in plan.messages if m.id == restored.restored_id), None)
        if shown is not None:
            text = "\n".join(
                str(getattr(block, "text", None) or getattr(block, "content", "")) for block in shown.blocks
            )
            lines = text.splitlines()
            if len(lines) > _DEMO_PANEL_LINES:
                lines = [*lines[:_DEMO_PANEL_LINES], "..."]
            console.print(
                "What the model sees instead "
                + (
                    "(a deterministic receipt, no model inference):"
                    if is_receipt
                    else "(head and tail kept):"
                )
            )
            from rich.panel import Panel  # noqa: PLC0415 - the demo only

            console.print(Panel(escape("\n".join(lines)), expand=False))
    console.rule("conformance")
    _print_conformance(console, report)
    if not kept:
        console.print(
            "\nDemo files deleted (ds4-context demo --keep DIR keeps them and prints the commands that "
            "show this plan again). Your own session: ds4-context plan SESSION --window N (and --model "
            "provider:model if the session names no model)."
        )
        return
    console.print(f"\nDemo files kept in {root}. The same plan, and the restore, from the shell:")
    for line in _demo_next_commands(workspace, plan, root):
        console.print(escape("  " + line), soft_wrap=True, highlight=False)


def _demo_next_commands(workspace: "ContextWorkspace", plan: Any, root: Path) -> list[str]:
    """Commands that plan the kept demo session exactly as the demo did (same window, reserve, store)."""
    model = workspace.model
    assert model is not None
    options = f"--window {model.context_window}"
    if model.max_tokens is not None:
        options += f" --max-tokens {model.max_tokens}"
    options += f" --store {shlex.quote(str(root / 'state' / 'derived.sqlite3'))}"
    session = shlex.quote(str(workspace.session_path))
    lines = [f"ds4-context plan {session} {options}"]
    target = _restore_target(plan)
    if target is not None:
        lines.append(f"ds4-context restore {session} {short_id(target)} {options}")
    return lines


AgentModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help=(
            "provider:model (openai, anthropic, ollama, lmstudio, or any id with --base-url). Without it, "
            "the first model of a local server found by discovery."
        ),
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="An OpenAI-compatible server (llama.cpp, vLLM, LM Studio ...), e.g. http://127.0.0.1:8080.",
    ),
]
CwdOption = Annotated[
    Path, typer.Option("--cwd", help="The workspace the tools work in (an existing directory).")
]
SystemOption = Annotated[str, typer.Option("--system", help="The system prompt.")]
AgentSessionOption = Annotated[
    Path | None,
    typer.Option(
        "--session", help="A Pi session file to continue and append the turn to (created if missing)."
    ),
]
MaxStepsOption = Annotated[
    int, typer.Option("--max-steps", min=1, max=10_000, help="Model calls per turn, at most.")
]
AgentWindowOption = Annotated[
    int | None,
    typer.Option("--window", min=1, help="The model's context window in tokens (default 128,000)."),
]
AllowOption = Annotated[
    list[str] | None, typer.Option("--allow", help="Offer only these tools (repeatable).")
]
DenyOption = Annotated[list[str] | None, typer.Option("--deny", help="Never offer these tools (repeatable).")]
SequentialOption = Annotated[
    bool,
    typer.Option(
        "--sequential", help="Run every tool call one at a time (default: read-only calls overlap)."
    ),
]
_DEFAULT_SYSTEM: Final = (
    "You are a careful coding agent. Use the tools to read and change files in the workspace."
)


def _run_settings(
    *,
    model: str | None,
    base_url: str | None,
    cwd: Path,
    system: str,
    session: Path | None,
    max_steps: int,
    window: int | None,
    allow: list[str] | None,
    deny: list[str] | None,
    sequential: bool,
) -> Any:
    from ._cli_run import RunSettings  # noqa: PLC0415 - the runtime only when an agent runs

    if not cwd.is_dir():
        raise _usage("run-cwd-invalid", "--cwd must be an existing directory")
    return RunSettings(
        model=model,
        base_url=base_url,
        cwd=cwd.resolve(),
        system=system,
        session=session,
        max_steps=max_steps,
        window=window,
        allowed=tuple(allow) if allow else None,
        denied=tuple(deny or ()),
        sequential=sequential,
    )


@app.command("run", rich_help_panel=_AGENT)
def run_command(
    prompt: Annotated[str, typer.Argument(help="What to ask the agent.", show_default=False)],
    *,
    model: AgentModelOption = None,
    base_url: BaseUrlOption = None,
    cwd: CwdOption = Path(),
    system: SystemOption = _DEFAULT_SYSTEM,
    session: AgentSessionOption = None,
    max_steps: MaxStepsOption = 50,
    window: AgentWindowOption = None,
    allow: AllowOption = None,
    deny: DenyOption = None,
    sequential: SequentialOption = False,
    as_json: JsonOption = False,
) -> None:
    """Run one agent turn: the answer streams to stdout, tool calls and the context bar to stderr."""
    settings = _run_settings(
        model=model,
        base_url=base_url,
        cwd=cwd,
        system=system,
        session=session,
        max_steps=max_steps,
        window=window,
        allow=allow,
        deny=deny,
        sequential=sequential,
    )
    from ._cli_run import run_once  # noqa: PLC0415

    result, output = _guard(lambda: run_once(settings, prompt, as_json=as_json))
    if as_json:
        _echo_json("run", output)
    if result.error is not None:
        raise _fail(result.error, result.error_detail or "the turn failed")


@app.command("chat", rich_help_panel=_AGENT)
def chat_command(
    *,
    model: AgentModelOption = None,
    base_url: BaseUrlOption = None,
    cwd: CwdOption = Path(),
    system: SystemOption = _DEFAULT_SYSTEM,
    session: AgentSessionOption = None,
    max_steps: MaxStepsOption = 50,
    window: AgentWindowOption = None,
    allow: AllowOption = None,
    deny: DenyOption = None,
    sequential: SequentialOption = False,
) -> None:
    """Chat with an agent: each line read from stdin is a turn (works with a pipe); /exit or EOF ends."""
    settings = _run_settings(
        model=model,
        base_url=base_url,
        cwd=cwd,
        system=system,
        session=session,
        max_steps=max_steps,
        window=window,
        allow=allow,
        deny=deny,
        sequential=sequential,
    )
    from ._cli_run import chat_lines  # noqa: PLC0415

    failed = _guard(lambda: chat_lines(settings))
    if failed:
        raise typer.Exit(EXIT_ERROR)


@app.command(rich_help_panel=_ADAPTERS)
def version() -> None:
    """Print the installed ds4-context version."""
    typer.echo(__version__)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(__version__)
        raise typer.Exit


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the installed version and exit."
        ),
    ] = False,
) -> None:
    """Context management for agent hosts."""


_PANEL_ORDER: Final = (_START, _AGENT, _INSPECT, _PLAN, _CHANGE, _STORE, _ADAPTERS)
# --help lists panels in registration order; put the demo first, then everything by panel
app.registered_commands.sort(
    key=lambda info: (_PANEL_ORDER.index(info.rich_help_panel or _ADAPTERS), info.name != "demo")
)
