"""``ds4-context run`` and ``ds4-context chat``: agent turns from the command line, streamed with rich.

The answer streams to stdout; tool calls, retries and the context bar go to stderr, so ``run`` can be
piped. The model is ``--model provider:model``; a local OpenAI-compatible server (``--base-url``, or
Ollama and LM Studio at their usual ports) is found by local discovery, which also picks a model when
``--model`` is not given. Imported by the typer commands only when they run.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
import msgspec
from rich.console import Console
from rich.markup import escape

from ._cli_json import RunOutput
from ._exceptions import CliRunError
from .providers import (
    LocalProviderDefinition,
    LocalProviderDiscovery,
    ModelReference,
    ModelReferenceError,
    TextDelta,
    local_provider_transport,
    parse_local_provider,
    parse_model_reference,
)
from .runtime import (
    BubblewrapEngine,
    ModelStreamed,
    RunEvent,
    RunOptions,
    RunResult,
    StepPlanned,
    ToolFinished,
    ToolStarted,
    create_runtime,
)
from .runtime import ProviderTransport as _Transport

__all__ = ["RunSettings", "chat_lines", "choose_model", "run_once"]

_BAR_WIDTH: Final = 60
_ARGUMENT_PREVIEW: Final = 80
_EXIT_WORDS: Final = ("/exit", "/quit")


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    model: str | None
    base_url: str | None
    cwd: Path
    system: str
    session: Path | None
    max_steps: int
    window: int | None
    allowed: tuple[str, ...] | None
    denied: tuple[str, ...]
    sequential: bool
    managed_tools: bool = True


def _local_definitions(base_url: str | None) -> list[LocalProviderDefinition]:
    if base_url is not None:
        return [parse_local_provider({"id": "local", "type": "openai_compat", "baseUrl": base_url})]
    return [parse_local_provider({"id": kind, "type": kind}) for kind in ("ollama", "lmstudio")]


async def choose_model(settings: RunSettings) -> tuple[ModelReference, dict[str, _Transport]]:
    """The model reference and the transports to run it with (local discovery when it is needed)."""
    definitions = _local_definitions(settings.base_url)
    if settings.model is not None:
        try:
            reference = parse_model_reference(settings.model)
        except ModelReferenceError as error:
            raise CliRunError(error.code, "the model must be written provider:model") from None
        for definition in definitions:
            if reference.provider == definition.id or settings.base_url is not None:
                local = msgspec.structs.replace(definition, id=reference.provider)
                return reference, {reference.provider: local_provider_transport(local)}
        return reference, {}
    discovery = LocalProviderDiscovery()
    for definition in definitions:
        found = await discovery.discover(definition)
        if found.chat_models:
            reference = parse_model_reference(f"{definition.id}:{found.chat_models[0]}")
            return reference, {definition.id: local_provider_transport(definition)}
    where = settings.base_url or "Ollama (localhost:11434) or LM Studio (localhost:1234)"
    raise CliRunError("run-no-model", f"no --model given and no local model server answered at {where}")


class _Display:
    """Streams a turn to the terminal: answer text on stdout, tools and the context bar on stderr."""

    def __init__(self, out: Console, err: Console, *, stream_text: bool) -> None:
        self.out, self.err = out, err
        self.stream_text = stream_text
        self.attempt: tuple[int, int] | None = None
        self.plan: Any = None
        self.window = 0
        self.wrote_text = False

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, StepPlanned):
            self.plan, self.window = event.plan, event.context_window
            self.attempt = None
        elif isinstance(event, ModelStreamed):
            key = (event.entry_index, event.attempt)
            if self.attempt is not None and key != self.attempt:
                self.err.print("[yellow]… the answer is being retried[/]")
            self.attempt = key
            if self.stream_text and isinstance(event.event, TextDelta):
                self.out.print(event.event.text, end="", markup=False, highlight=False, soft_wrap=True)
                self.wrote_text = True
        elif isinstance(event, ToolStarted):
            if self.wrote_text:
                self.out.print()
                self.wrote_text = False
            arguments = msgspec.json.encode(dict(event.arguments)).decode()
            if len(arguments) > _ARGUMENT_PREVIEW:
                arguments = arguments[: _ARGUMENT_PREVIEW - 1] + "…"
            self.err.print(f"[cyan]▸ {escape(event.name)}[/] [dim]{escape(arguments)}[/]")
        elif isinstance(event, ToolFinished):
            record = event.record
            mark = "[red]✗[/]" if record.is_error else "[green]✓[/]"
            code = f" {record.code}" if record.code else ""
            self.err.print(
                f"  {mark} {escape(record.name)} {record.state}{escape(code)} ({record.execution_ms:.0f} ms)"
            )

    def finish(self) -> None:
        if self.wrote_text:
            self.out.print()
            self.wrote_text = False
        if self.plan is None:
            return
        from ._cli_bars import composition, render_bar  # noqa: PLC0415

        budget = self.plan.budget
        parts = composition(
            self.plan.items,
            window=self.window,
            output_reserve=budget.output_reserve,
            fixed_tokens=budget.fixed_tokens,
        )
        self.err.print(f"[bold]context[/] ({budget.total_tokens:,} of {self.window:,} tokens)")
        self.err.print(render_bar(parts, _BAR_WIDTH, window=self.window))


def _options(
    settings: RunSettings, reference: ModelReference, prompt: str, session: Path | None, display: _Display
) -> RunOptions:
    return RunOptions(
        model=reference,
        messages=[{"role": "user", "content": prompt}],
        cwd=settings.cwd,
        session_path=session,
        max_steps=settings.max_steps,
        context_window=settings.window,
        allowed_tools=settings.allowed,
        disallowed_tools=settings.denied or None,
        tool_execution_mode="sequential" if settings.sequential else "safe-parallel",
        on_event=display,
    )


def _runtime(settings: RunSettings, transports: dict[str, _Transport]) -> Any:
    # Bash runs only inside bubblewrap: without a usable bwrap the policy fails closed and Bash is refused
    return create_runtime(
        workspace=settings.cwd,
        transports=transports or None,
        managed_tools=settings.managed_tools,
        sandbox_engine=BubblewrapEngine(),
    )


def run_once(settings: RunSettings, prompt: str, *, as_json: bool) -> tuple[RunResult, RunOutput]:
    """Run one turn for ``prompt``; the answer streams unless ``as_json``."""
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False)
    display = _Display(out, err, stream_text=not as_json)

    async def main() -> tuple[RunResult, ModelReference]:
        reference, transports = await choose_model(settings)
        async with _runtime(settings, transports) as runtime:
            return await runtime.run(
                settings.system, _options(settings, reference, prompt, settings.session, display)
            ), reference

    result, reference = anyio.run(main)
    if not as_json:
        display.finish()
    output = RunOutput(
        model=reference.reference,
        text=result.text,
        error=result.error,
        error_detail=result.error_detail,
        steps=result.steps,
        tool_records=result.tool_records,
        failovers=result.failovers,
        messages=len(result.messages),
        session_entry_ids=result.session_entry_ids,
    )
    return result, output


@contextlib.contextmanager
def _session_file(session: Path | None) -> Iterator[Path]:
    if session is not None:
        yield session
        return
    with tempfile.TemporaryDirectory(prefix="ds4-chat-") as directory:
        yield Path(directory) / "chat.jsonl"


def _lines(source: TextIO) -> Iterable[str]:
    for raw in source:
        line = raw.strip()
        if line:
            yield line


def chat_lines(settings: RunSettings, source: TextIO | None = None) -> int:
    """An interactive chat: each line read is a turn in one session. Returns how many turns failed."""
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False)
    failed = 0
    reader = source or sys.stdin

    async def main() -> int:
        nonlocal failed
        reference, transports = await choose_model(settings)
        err.print(
            f"[bold]ds4-context chat[/] with {escape(reference.reference)} "
            f"in {escape(str(settings.cwd))}; /exit ends"
        )
        with _session_file(settings.session) as session:
            async with _runtime(settings, transports) as runtime:
                for line in _lines(reader):
                    if line in _EXIT_WORDS:
                        break
                    display = _Display(out, err, stream_text=True)
                    result = await runtime.run(
                        settings.system, _options(settings, reference, line, session, display)
                    )
                    display.finish()
                    if result.error is not None:
                        failed += 1
                        err.print(
                            f"[red]error [{escape(result.error)}][/]: {escape(result.error_detail or '')}"
                        )
        return failed

    return anyio.run(main)
