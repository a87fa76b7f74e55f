"""What the run loop needs from tools: a ``Toolbox`` (specs and ``execute``), and a registry of host tools.

The managed tools (``Read``, ``Write``, ...) are one toolbox; a host passes its own Python functions as
:class:`HostTool` values and the runtime serves both through one :class:`CombinedToolbox`. ``execute``
never raises for a tool's own failure: it returns an outcome with ``is_error`` and a short ``code``.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

import anyio

from ._errors import RuntimeOptionsError

__all__ = [
    "HOST_TOOL_CONCURRENCY",
    "CombinedToolbox",
    "HostTool",
    "HostToolOutcome",
    "HostToolbox",
    "ToolContext",
    "ToolOutcomeLike",
    "ToolSpecLike",
    "Toolbox",
    "parallel_batches",
]

_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
HOST_TOOL_CONCURRENCY: Final = ("parallel-safe", "sequential")
"""``HostTool.concurrency``: ``parallel-safe`` lets a read-only tool overlap its neighbours."""


@runtime_checkable
class ToolSpecLike(Protocol):
    """How a tool is offered to the model, and whether it may overlap with others."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> Mapping[str, Any]: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def concurrency(self) -> str: ...


@runtime_checkable
class ToolOutcomeLike(Protocol):
    """One tool call's result: the text the model reads, and metadata for the lifecycle sink."""

    @property
    def text(self) -> str: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def code(self) -> str | None: ...
    @property
    def state(self) -> str: ...
    @property
    def artifact_id(self) -> str | None: ...
    @property
    def details(self) -> Mapping[str, Any] | None: ...


@runtime_checkable
class Toolbox(Protocol):
    """A set of tools the loop can offer and run. ``execute`` never raises for a tool's failure."""

    def specs(self) -> Sequence[ToolSpecLike]: ...

    async def execute(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        call_id: str,
        cwd: str,
        cancel: anyio.Event | None,
    ) -> ToolOutcomeLike: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """What a host tool function is told about its call."""

    call_id: str
    cwd: str
    cancel: anyio.Event | None


@dataclass(frozen=True, kw_only=True, slots=True)
class HostToolOutcome:
    """A host tool's result (also what :class:`HostToolbox` returns for a raising function)."""

    text: str
    is_error: bool = False
    code: str | None = None
    state: str = "success"
    artifact_id: str | None = None
    details: Mapping[str, Any] | None = None


HostToolFunction = Callable[[dict[str, Any], ToolContext], "Awaitable[object] | object"]


@dataclass(frozen=True, kw_only=True, slots=True)
class HostTool:
    """A tool the host defines: a function of ``(arguments, context)`` returning text or an outcome.

    The function may be sync or async. Returning a ``str`` is a success; returning a
    :class:`HostToolOutcome` says more; raising is an error result coded ``tool-raised`` (the
    exception's message is not shown to the model, only its type). ``read_only`` with
    ``concurrency="parallel-safe"`` lets calls overlap in safe-parallel mode.
    """

    name: str
    function: HostToolFunction
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    read_only: bool = False
    concurrency: str = "sequential"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TOOL_NAME.fullmatch(self.name):
            raise RuntimeOptionsError("run-tool-invalid", "a tool name must be 1-64 of [A-Za-z0-9_.-]")
        if not callable(self.function):
            raise RuntimeOptionsError("run-tool-invalid", f"tool {self.name}: function is not callable")
        if self.concurrency not in HOST_TOOL_CONCURRENCY:
            raise RuntimeOptionsError(
                "run-tool-invalid", f"tool {self.name}: concurrency must be one of {HOST_TOOL_CONCURRENCY}"
            )
        if not isinstance(self.parameters, Mapping):
            raise RuntimeOptionsError("run-tool-invalid", f"tool {self.name}: parameters must be a schema")


class HostToolbox:
    """The host's own tools, served as a :class:`Toolbox`."""

    def __init__(self, tools: Iterable[HostTool]) -> None:
        self._tools: dict[str, HostTool] = {}
        for tool in tools:
            if not isinstance(tool, HostTool):
                raise RuntimeOptionsError("run-tool-invalid", "tools must be HostTool values")
            if tool.name in self._tools:
                raise RuntimeOptionsError("run-tool-name-conflict", f"two tools are named {tool.name}")
            self._tools[tool.name] = tool

    def specs(self) -> Sequence[ToolSpecLike]:
        return tuple(self._tools.values())

    async def execute(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        call_id: str,
        cwd: str,
        cancel: anyio.Event | None,
    ) -> ToolOutcomeLike:
        tool = self._tools.get(name)
        if tool is None:
            return HostToolOutcome(
                text=f"unknown tool {name}", is_error=True, code="tool-unknown", state="rejected"
            )
        started = time.monotonic()
        try:
            value = tool.function(dict(arguments), ToolContext(call_id=call_id, cwd=cwd, cancel=cancel))
            if inspect.isawaitable(value):
                value = await value
        except Exception as error:  # a host tool's bug is the model's error result, not the turn's end
            return HostToolOutcome(
                text=f"the tool failed ({type(error).__name__})",
                is_error=True,
                code="tool-raised",
                state="error",
            )
        elapsed = (time.monotonic() - started) * 1000
        if isinstance(value, HostToolOutcome):
            return value
        if isinstance(value, str):
            return HostToolOutcome(text=value, details={"execution_ms": round(elapsed, 3)})
        return HostToolOutcome(
            text="the tool returned something other than text",
            is_error=True,
            code="tool-bad-return",
            state="error",
        )


class CombinedToolbox:
    """Several toolboxes behind one: each name belongs to exactly one of them."""

    def __init__(self, toolboxes: Iterable[Toolbox]) -> None:
        self._owner: dict[str, Toolbox] = {}
        self._specs: list[ToolSpecLike] = []
        for toolbox in toolboxes:
            for spec in toolbox.specs():
                if spec.name in self._owner:
                    raise RuntimeOptionsError("run-tool-name-conflict", f"two tools are named {spec.name}")
                self._owner[spec.name] = toolbox
                self._specs.append(spec)

    def specs(self) -> Sequence[ToolSpecLike]:
        return tuple(self._specs)

    async def execute(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        call_id: str,
        cwd: str,
        cancel: anyio.Event | None,
    ) -> ToolOutcomeLike:
        owner = self._owner.get(name)
        if owner is None:
            return HostToolOutcome(
                text=f"unknown tool {name}", is_error=True, code="tool-unknown", state="rejected"
            )
        return await owner.execute(name, arguments, call_id=call_id, cwd=cwd, cancel=cancel)


def _parallel(spec: ToolSpecLike | None) -> bool:
    return spec is not None and spec.read_only is True and spec.concurrency == "parallel-safe"


def parallel_batches(
    names: Sequence[str], specs: Mapping[str, ToolSpecLike], *, mode: str
) -> list[list[int]]:
    """Indices of ``names`` in batches run one after another; the calls of one batch overlap.

    In ``safe-parallel`` mode a run of consecutive read-only, parallel-safe calls is one batch; any other
    call (mutating, stateful, MCP, unknown) is a batch of its own, so order is kept around it. In
    ``sequential`` mode every call is its own batch.
    """
    batches: list[list[int]] = []
    for index, name in enumerate(names):
        spec = specs.get(name)
        if (
            mode == "safe-parallel"
            and _parallel(spec)
            and batches
            and _parallel(specs.get(names[batches[-1][-1]]))
        ):
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches
