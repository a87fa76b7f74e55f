"""Which pending tool calls may overlap: the ``safe-parallel`` rule of the run loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, TypeVar

from ds4_context_engine.runtime._errors import RuntimeOptionsError
from ds4_context_engine.runtime._tools._records import ToolSpec

__all__ = ["TOOL_EXECUTION_MODES", "group_tool_calls"]

TOOL_EXECUTION_MODES = ("safe-parallel", "sequential")

_Call = TypeVar("_Call")


def _default_name(call: object) -> str:
    if isinstance(call, str):
        return call
    name = getattr(call, "name", None)
    if not isinstance(name, str):
        raise RuntimeOptionsError("tool-invalid-call", "a pending call needs a tool name (pass name=...)")
    return name


def group_tool_calls(
    calls: Sequence[_Call],
    specs: Iterable[ToolSpec],
    *,
    mode: Literal["safe-parallel", "sequential"] = "safe-parallel",
    name: Callable[[_Call], str] = _default_name,
    max_batch: int | None = None,
) -> tuple[tuple[_Call, ...], ...]:
    """Split ``calls`` into batches run one after another; the calls inside a batch may run together.

    In ``safe-parallel`` mode consecutive calls of read-only, ``parallel-safe`` tools listed in ``specs``
    share a batch (at most ``max_batch`` each); every other call (a mutating or stateful built-in, an MCP
    tool, a name nobody declared) is a batch of its own, so it never overlaps anything and the order of
    effects is the order the model asked for. ``sequential`` mode puts every call in its own batch.
    """
    if mode not in TOOL_EXECUTION_MODES:
        raise RuntimeOptionsError(
            "tool-invalid-execution-mode", f"mode must be one of {TOOL_EXECUTION_MODES}"
        )
    if max_batch is not None and (isinstance(max_batch, bool) or max_batch < 1):
        raise RuntimeOptionsError("tool-invalid-execution-mode", "max_batch must be >= 1")
    overlapping = {spec.name for spec in specs if spec.read_only and spec.concurrency == "parallel-safe"}
    batches: list[tuple[_Call, ...]] = []
    current: list[_Call] = []
    for call in calls:
        if mode == "safe-parallel" and name(call) in overlapping:
            if max_batch is not None and len(current) >= max_batch:
                batches.append(tuple(current))
                current = []
            current.append(call)
            continue
        if current:
            batches.append(tuple(current))
            current = []
        batches.append((call,))
    if current:
        batches.append(tuple(current))
    return tuple(batches)
