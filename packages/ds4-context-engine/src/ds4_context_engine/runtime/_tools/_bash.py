"""Bash: one shell command through :func:`prepare_sandboxed_command`, with a timeout and bounded output.

The command never runs outside the sandbox engine unless the policy says so itself (mode ``off``, or the
``unsafe-host-process`` fallback the host opted into); a fail-closed policy without a usable engine is a
``denied`` outcome and nothing starts. The process gets its own process group, so a timeout or a
cancellation kills everything it started (bubblewrap's ``--die-with-parent`` takes the sandbox down with
it). stdout and stderr are merged; the model sees the head and the tail, and the whole output (up to
``artifact_max_bytes``) goes to the host's ``persist_artifact`` when it did not fit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.abc
import anyio.to_thread

from ds4_context_core import Ds4ContextError
from ds4_context_engine.runtime._sandbox import SandboxPolicy
from ds4_context_engine.runtime._sandbox_engine import (
    PreparedCommand,
    SandboxEngine,
    prepare_sandboxed_command,
)
from ds4_context_engine.runtime._tools._args import BashArgs
from ds4_context_engine.runtime._tools._records import ToolArtifact, ToolLimits, ToolOutcome

__all__ = ["PersistArtifact", "run_bash"]

PersistArtifact = Callable[[ToolArtifact], str]

_SHELLS: Final = ("/bin/bash", "/usr/bin/bash", "/bin/sh")
_SPOOL_IN_MEMORY: Final = 1024 * 1024


def _shell() -> str:
    for candidate in _SHELLS:
        if os.access(candidate, os.X_OK):
            return candidate
    raise Ds4ContextError("tool-spawn-failed", "no shell (bash or sh) was found on this host")


class _Capture:
    """Keeps the head and the tail of a stream for the model and, when asked, a spool of all of it."""

    def __init__(self, limits: ToolLimits, *, spool: bool) -> None:
        self.half = limits.bash_output_bytes // 2
        self.keep_all = limits.bash_output_bytes
        self.artifact_max = limits.artifact_max_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.spooled = 0
        self.spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) if spool else None  # noqa: SIM115

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.spool is not None and self.spooled < self.artifact_max:
            part = chunk[: self.artifact_max - self.spooled]
            self.spool.write(part)
            self.spooled += len(part)
        room = self.keep_all - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep_all:
                del self.tail[: len(self.tail) - self.keep_all]

    @property
    def overflowed(self) -> bool:
        return self.total > self.keep_all

    def spooled_bytes(self) -> bytes:
        assert self.spool is not None
        self.spool.seek(0)
        return self.spool.read()

    def render(self, artifact_id: str | None) -> str:
        if not self.overflowed:
            return bytes(self.head + self.tail).decode("utf-8", "replace")
        head = bytes(self.head[: self.half]).decode("utf-8", "replace")
        tail_bytes = (self.head[self.half :] + self.tail)[-self.half :]
        tail = bytes(tail_bytes).decode("utf-8", "replace")
        omitted = self.total - self.half - len(tail_bytes)
        where = f"; the full output is stored as artifact {artifact_id}" if artifact_id else ""
        return f"{head}\n[ds4: {omitted} bytes of output omitted{where}]\n{tail}"

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()


@dataclass
class _Ending:
    reason: str | None = None  # "timeout" or "cancelled" when we stopped the command


def _kill_group(process: anyio.abc.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _remove_placeholders(prepared: PreparedCommand) -> None:
    """Remove the empty deny-write placeholders the engine made for this one command, if still empty."""
    for path in reversed(prepared.placeholders):
        try:
            status = os.lstat(path)
            if stat.S_ISDIR(status.st_mode):
                os.rmdir(path)
            elif stat.S_ISREG(status.st_mode) and status.st_size == 0:
                os.unlink(path)
        except OSError:
            continue  # something is in it now, or it is gone: leave it


async def _drain(process: anyio.abc.Process, capture: _Capture, done: anyio.Event) -> None:
    assert process.stdout is not None
    try:
        async for chunk in process.stdout:
            capture.feed(chunk)
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        done.set()


async def run_bash(
    policy: SandboxPolicy,
    engine: SandboxEngine | None,
    args: BashArgs,
    cwd: str,
    *,
    call_id: str,
    limits: ToolLimits,
    persist_artifact: PersistArtifact | None,
    cancel: anyio.Event | None,
) -> ToolOutcome:
    timeout = min(args.timeout or limits.bash_timeout_s, limits.bash_max_timeout_s)
    argv = [_shell(), "-c", args.command]
    # Preparing walks the writable roots for deny-write paths: keep it off the event loop.
    prepared = await anyio.to_thread.run_sync(
        lambda: prepare_sandboxed_command(policy, argv, engine=engine, cwd=cwd)
    )
    capture = _Capture(limits, spool=persist_artifact is not None)
    ending = _Ending()
    started = time.monotonic()
    try:
        try:
            process = await anyio.open_process(
                list(prepared.argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=prepared.cwd,
                env=dict(prepared.env),
                start_new_session=True,
            )
        except OSError:
            raise Ds4ContextError("tool-spawn-failed", "the command could not be started") from None
        try:
            async with anyio.create_task_group() as group:

                async def stop(reason: str) -> None:
                    # The shell may have exited already (only its output is still draining): not ours.
                    if process.returncode is None:
                        ending.reason = reason
                    group.cancel_scope.cancel()

                async def on_cancel(event: anyio.Event) -> None:
                    await event.wait()
                    await stop("cancelled")

                async def on_timeout() -> None:
                    await anyio.sleep(timeout)
                    await stop("timeout")

                if cancel is not None:
                    group.start_soon(on_cancel, cancel)
                group.start_soon(on_timeout)
                drained = anyio.Event()
                group.start_soon(_drain, process, capture, drained)
                await process.wait()
                # A background child may hold the pipe open after the shell exits; do not wait for it.
                with anyio.move_on_after(limits.bash_exit_grace_s):
                    await drained.wait()
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                _kill_group(process)
                await process.wait()
                await process.aclose()
        details: dict[str, str | int | float | bool | None] = {
            "exit_status": process.returncode if ending.reason is None else None,
            "bytes": capture.total,
            "truncated": capture.overflowed,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
            "timeout_s": timeout,
            "sandbox": prepared.effective_mode,
            "engine": prepared.engine,
        }
        return await _outcome(capture, ending, details, call_id=call_id, persist_artifact=persist_artifact)
    finally:
        capture.close()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove_placeholders, prepared)


async def _outcome(
    capture: _Capture,
    ending: _Ending,
    details: dict[str, str | int | float | bool | None],
    *,
    call_id: str,
    persist_artifact: PersistArtifact | None,
) -> ToolOutcome:
    returncode = details["exit_status"]
    timeout = details["timeout_s"]
    artifact_id: str | None = None
    artifact_failed = False
    if capture.overflowed and persist_artifact is not None:
        artifact = ToolArtifact(
            call_id=call_id,
            tool_name="Bash",
            media_type="text/plain",
            content=capture.spooled_bytes(),
            original_bytes=capture.total,
        )
        try:
            stored = await anyio.to_thread.run_sync(persist_artifact, artifact)
        except Exception:  # the host's sink failed: the model still gets the bounded output
            stored = None
        if isinstance(stored, str) and stored:
            artifact_id = stored
        else:
            artifact_failed = True
    body = capture.render(artifact_id).rstrip("\n")
    if artifact_failed:
        details["artifact_error"] = "tool-artifact-failed"
    if ending.reason == "timeout":
        text = f"{body}\n[ds4: the command ran past its {timeout} s timeout and was killed]"
        return _result(text, "timeout", "tool-timeout", artifact_id, details)
    if ending.reason == "cancelled":
        text = f"{body}\n[ds4: the call was cancelled and the command was killed]"
        return _result(text, "cancelled", "tool-cancelled", artifact_id, details)
    if isinstance(returncode, int) and returncode < 0:
        details["signal"] = -returncode
        text = f"{body}\n[ds4: the command was killed by signal {-returncode}]"
        return _result(text, "error", "tool-exit-signal", artifact_id, details)
    if returncode:
        return _result(
            f"{body}\n[ds4: exit status {returncode}]", "error", "tool-exit-nonzero", artifact_id, details
        )
    return ToolOutcome(
        text=body or "[ds4: no output]", is_error=False, state="ok", artifact_id=artifact_id, details=details
    )


def _result(
    text: str,
    state: str,
    code: str,
    artifact_id: str | None,
    details: dict[str, str | int | float | bool | None],
) -> ToolOutcome:
    return ToolOutcome(
        text=text.lstrip("\n"),
        is_error=True,
        state=state,  # type: ignore[arg-type]
        code=code,
        artifact_id=artifact_id,
        details=details,
    )
