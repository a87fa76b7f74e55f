"""The managed toolbox: the six built-in tools behind one ``execute`` that never raises for a tool failure."""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread
import msgspec

from ds4_context_core import Ds4ContextError
from ds4_context_engine.runtime._errors import RuntimeOptionsError
from ds4_context_engine.runtime._sandbox import (
    SandboxPolicy,
    create_sandbox_policy,
    revalidate_sandbox_policy,
)
from ds4_context_engine.runtime._sandbox_engine import SandboxEngine
from ds4_context_engine.runtime._tools._args import (
    BashArgs,
    EditArgs,
    GlobArgs,
    GrepArgs,
    ReadArgs,
    WriteArgs,
    decode_arguments,
    parameters_schema,
)
from ds4_context_engine.runtime._tools._bash import PersistArtifact, run_bash
from ds4_context_engine.runtime._tools._files import edit_file, read_file, write_file
from ds4_context_engine.runtime._tools._paths import ToolRoots
from ds4_context_engine.runtime._tools._records import ToolLimits, ToolOutcome, ToolSpec
from ds4_context_engine.runtime._tools._search import glob_files, grep_files

__all__ = ["ManagedToolbox"]

_Args = TypeVar("_Args", bound=msgspec.Struct)
_Handler = Callable[[Any, str, str, "anyio.Event | None"], Awaitable[ToolOutcome]]

_DESCRIPTIONS: Final = {
    "Read": "Read a UTF-8 text file. Lines come numbered (`number<TAB>text`); use offset and limit "
    "(in lines) for long files. Binary files are refused.",
    "Write": "Create or replace a file with the given content, creating missing parent directories. "
    "The write is atomic.",
    "Edit": "Replace the exact text old_string with new_string in a file. old_string must occur exactly "
    "once unless replace_all is true; Read the file first so the text matches.",
    "Glob": "List files whose path below `path` matches a glob such as `**/*.py`, sorted. "
    "Symlinked directories and .git are not searched.",
    "Grep": "Search file contents with a regular expression; prints `path:line:text` for matching lines. "
    "Narrow it with `path` and `glob`.",
    "Bash": "Run a shell command (bash -c) in the working directory, inside the sandbox. stdout and "
    "stderr are merged; long output shows its head and tail.",
}


def _failure(error: Ds4ContextError) -> ToolOutcome:
    message = error.args[0] if error.args else "the call failed"
    state = "denied" if error.code.startswith("sandbox-") else "error"
    return ToolOutcome(
        text=f"Error: {message} ({error.code})",
        is_error=True,
        state=state,  # type: ignore[arg-type]
        code=error.code,
    )


def _cancelled() -> ToolOutcome:
    return ToolOutcome(
        text="Error: the call was cancelled before it finished (tool-cancelled)",
        is_error=True,
        state="cancelled",
        code="tool-cancelled",
    )


class ManagedToolbox:
    """``Read``, ``Write``, ``Edit``, ``Glob``, ``Grep`` and ``Bash`` over a workspace.

    The file tools read inside the workspace, ``additional_read_roots`` and ``additional_write_roots``,
    and write inside the workspace and ``additional_write_roots``; a native ``sandbox_policy`` narrows
    both to its own roots and adds its deny-write patterns. ``Bash`` runs through
    :func:`prepare_sandboxed_command` under ``sandbox_policy`` (by default the fail-closed policy rooted at
    the workspace), so without a usable ``sandbox_engine`` it is refused. ``persist_artifact`` receives a
    :class:`ToolArtifact` for output too large for the model and returns the host's artifact id.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        additional_read_roots: Iterable[str | os.PathLike[str]] = (),
        additional_write_roots: Iterable[str | os.PathLike[str]] = (),
        sandbox_policy: SandboxPolicy | None = None,
        sandbox_engine: SandboxEngine | None = None,
        persist_artifact: PersistArtifact | None = None,
        limits: ToolLimits | None = None,
    ) -> None:
        self._roots = ToolRoots(
            workspace,
            additional_read_roots=additional_read_roots,
            additional_write_roots=additional_write_roots,
            sandbox_policy=sandbox_policy,
        )
        self._bash_policy = (
            create_sandbox_policy(root=self._roots.workspace)
            if sandbox_policy is None
            else revalidate_sandbox_policy(sandbox_policy)
        )
        self._engine = sandbox_engine
        self._persist_artifact = persist_artifact
        self._limits = ToolLimits() if limits is None else limits
        if not isinstance(self._limits, ToolLimits):
            raise RuntimeOptionsError("tool-invalid-limits", "limits must be a ToolLimits")
        self._handlers: dict[str, tuple[type[msgspec.Struct], _Handler]] = {
            "Read": (ReadArgs, self._read),
            "Write": (WriteArgs, self._write),
            "Edit": (EditArgs, self._edit),
            "Glob": (GlobArgs, self._glob),
            "Grep": (GrepArgs, self._grep),
            "Bash": (BashArgs, self._bash),
        }
        self._specs = tuple(
            ToolSpec(
                name=name,
                description=_DESCRIPTIONS[name],
                parameters=parameters_schema(args_type),
                read_only=name in {"Read", "Glob", "Grep"},
                concurrency="parallel-safe" if name in {"Read", "Glob", "Grep"} else "sequential",
            )
            for name, (args_type, _) in self._handlers.items()
        )

    @property
    def workspace(self) -> str:
        return self._roots.workspace

    @property
    def read_roots(self) -> tuple[str, ...]:
        """Where the file tools may read (writable roots included)."""
        return self._roots.read_roots

    @property
    def write_roots(self) -> tuple[str, ...]:
        return self._roots.write_roots

    @property
    def limits(self) -> ToolLimits:
        return self._limits

    def specs(self) -> tuple[ToolSpec, ...]:
        """The six tools, each with the JSON Schema of its arguments (a fresh copy the caller may change)."""
        return tuple(
            dataclasses.replace(spec, parameters=copy.deepcopy(spec.parameters)) for spec in self._specs
        )

    async def execute(
        self,
        name: str,
        arguments: Mapping[str, object] | str,
        *,
        call_id: str,
        cwd: str | os.PathLike[str] | None = None,
        cancel: anyio.Event | None = None,
    ) -> ToolOutcome:
        """Run one call. Tool failures (unknown tool, bad arguments, refused paths, missing files, no
        sandbox, non-zero exit) come back as an error outcome with a code; only cancellation of the
        calling task itself propagates."""
        entry = self._handlers.get(name) if isinstance(name, str) else None
        if entry is None:
            known = ", ".join(self._handlers)
            return ToolOutcome(
                text=f"Error: there is no tool with this name; the managed tools are {known} (tool-unknown)",
                is_error=True,
                state="error",
                code="tool-unknown",
            )
        if cancel is not None and cancel.is_set():
            return _cancelled()
        args_type, handler = entry
        try:
            args = decode_arguments(arguments, args_type)
            directory = self._roots.directory(cwd)
            outcome = await handler(args, directory, call_id, cancel)
        except Ds4ContextError as error:
            outcome = _failure(error)
        except OSError as error:
            outcome = _failure(
                Ds4ContextError("tool-io-failed", f"the file system refused ({type(error).__name__})")
            )
        return outcome

    async def _in_thread(
        self, work: Callable[[threading.Event], ToolOutcome], cancel: anyio.Event | None
    ) -> ToolOutcome:
        """Run a read-only walk in a worker thread; a set ``cancel`` stops it and abandons the thread."""
        stop = threading.Event()
        box: list[ToolOutcome | Ds4ContextError | OSError] = []

        def guarded() -> None:
            try:
                box.append(work(stop))
            except (Ds4ContextError, OSError) as error:
                box.append(error)

        async with anyio.create_task_group() as group:

            async def watch(event: anyio.Event) -> None:
                await event.wait()
                stop.set()
                group.cancel_scope.cancel()

            if cancel is not None:
                group.start_soon(watch, cancel)
            await anyio.to_thread.run_sync(guarded, abandon_on_cancel=True)
            group.cancel_scope.cancel()
        if not box:
            return _cancelled()
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        if stop.is_set():
            return _cancelled()
        return result

    async def _read(self, args: ReadArgs, cwd: str, call_id: str, cancel: anyio.Event | None) -> ToolOutcome:
        return await self._in_thread(lambda stop: read_file(self._roots, args, cwd, self._limits), cancel)

    async def _glob(self, args: GlobArgs, cwd: str, call_id: str, cancel: anyio.Event | None) -> ToolOutcome:
        return await self._in_thread(
            lambda stop: glob_files(self._roots, args, cwd, self._limits, stop), cancel
        )

    async def _grep(self, args: GrepArgs, cwd: str, call_id: str, cancel: anyio.Event | None) -> ToolOutcome:
        return await self._in_thread(
            lambda stop: grep_files(self._roots, args, cwd, self._limits, stop), cancel
        )

    # Writes are not abandoned half way: once started, a write finishes (atomically) or fails.
    async def _write(
        self, args: WriteArgs, cwd: str, call_id: str, cancel: anyio.Event | None
    ) -> ToolOutcome:
        return await anyio.to_thread.run_sync(write_file, self._roots, args, cwd, self._limits)

    async def _edit(self, args: EditArgs, cwd: str, call_id: str, cancel: anyio.Event | None) -> ToolOutcome:
        return await anyio.to_thread.run_sync(edit_file, self._roots, args, cwd, self._limits)

    async def _bash(self, args: BashArgs, cwd: str, call_id: str, cancel: anyio.Event | None) -> ToolOutcome:
        return await run_bash(
            self._bash_policy,
            self._engine,
            args,
            os.path.realpath(cwd),
            call_id=call_id,
            limits=self._limits,
            persist_artifact=self._persist_artifact,
            cancel=cancel,
        )

    def __repr__(self) -> str:
        return f"ManagedToolbox(read_roots={len(self.read_roots)}, write_roots={len(self.write_roots)})"
