"""The records the managed tools speak in: what a tool is (``ToolSpec``), what a call produced
(``ToolOutcome``), the bounds every call runs under (``ToolLimits``) and an oversized output handed to the
host (``ToolArtifact``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, TypeAlias

from ds4_context_engine.runtime._errors import RuntimeOptionsError
from ds4_context_engine.runtime._tool_lifecycle import ToolLifecycleState

__all__ = [
    "MANAGED_TOOL_CONCURRENCY",
    "MANAGED_TOOL_ERROR_CODES",
    "MANAGED_TOOL_NAMES",
    "MANAGED_TOOL_STATES",
    "ToolArtifact",
    "ToolConcurrency",
    "ToolLimits",
    "ToolOutcome",
    "ToolSpec",
    "ToolState",
]

MANAGED_TOOL_NAMES: Final = ("Read", "Write", "Edit", "Glob", "Grep", "Bash")
MANAGED_TOOL_STATES: Final = ("cancelled", "denied", "error", "ok", "timeout")
MANAGED_TOOL_CONCURRENCY: Final = ("parallel-safe", "sequential")
# Every code the managed tools use. A call's outcome carries one of them, or passes a sandbox code through
# unchanged (``sandbox-path-outside-roots``, ``sandbox-path-denied``, ``sandbox-path-hard-linked``,
# ``sandbox-engine-unavailable`` and the engine's other ``sandbox-*`` refusals, all in state ``denied``).
# ``tool-invalid-limits``, ``tool-invalid-call`` and ``tool-invalid-execution-mode`` are raised as
# RuntimeOptionsError by ToolLimits and group_tool_calls; ``tool-artifact-failed`` is a details value.
MANAGED_TOOL_ERROR_CODES: Final = (
    "tool-artifact-failed",
    "tool-binary-file",
    "tool-cancelled",
    "tool-edit-ambiguous",
    "tool-edit-no-match",
    "tool-edit-noop",
    "tool-exit-nonzero",
    "tool-exit-signal",
    "tool-file-too-large",
    "tool-invalid-arguments",
    "tool-invalid-call",
    "tool-invalid-execution-mode",
    "tool-invalid-glob",
    "tool-invalid-limits",
    "tool-invalid-path",
    "tool-invalid-regex",
    "tool-io-failed",
    "tool-not-a-directory",
    "tool-not-a-file",
    "tool-path-not-found",
    "tool-search-timeout",
    "tool-spawn-failed",
    "tool-timeout",
    "tool-unknown",
)

_LIFECYCLE_BY_CODE: Final[dict[str, ToolLifecycleState]] = {
    "tool-exit-nonzero": "exit_nonzero",
    "tool-exit-signal": "signal",
}

ToolConcurrency: TypeAlias = Literal["parallel-safe", "sequential"]
ToolState: TypeAlias = Literal["ok", "error", "cancelled", "timeout", "denied"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as the model is told about it; ``parameters`` is the JSON Schema of its arguments.

    ``read_only`` tools change nothing; ``concurrency`` says whether a call may overlap other
    ``parallel-safe`` calls (see :func:`group_tool_calls`).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    read_only: bool
    concurrency: ToolConcurrency


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one call produced. ``text`` is what the model sees; the rest is for the host.

    ``code`` is a stable kebab-case code whenever ``is_error``; ``details`` holds small JSON scalars (path,
    offset, limit, bytes, exit status, hit count, lines changed) for receipts, never file contents.
    """

    text: str
    is_error: bool
    state: ToolState
    code: str | None = None
    artifact_id: str | None = None
    details: Mapping[str, str | int | float | bool | None] = field(default_factory=dict)

    @property
    def lifecycle_state(self) -> ToolLifecycleState:
        """The tool lifecycle sink's state for this outcome (``ToolResultEvent.state``)."""
        if self.state == "ok":
            return "success"
        if self.state == "denied":
            return "rejected"
        if self.state in {"timeout", "cancelled"}:
            return self.state
        return _LIFECYCLE_BY_CODE.get(self.code or "", "error")


@dataclass(frozen=True, slots=True)
class ToolArtifact:
    """An output too large for the model, handed to the host's ``persist_artifact`` in full.

    ``content`` holds at most ``ToolLimits.artifact_max_bytes``; ``original_bytes`` counts everything the
    tool produced, so ``truncated`` says whether the artifact itself was cut.
    """

    call_id: str
    tool_name: str
    media_type: str
    content: bytes
    original_bytes: int

    @property
    def truncated(self) -> bool:
        return self.original_bytes > len(self.content)


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """Bounds for every managed tool call; all must be positive.

    Read returns ``read_default_lines`` lines unless asked for others (at most ``read_max_lines``), cuts
    lines past ``max_line_chars`` and stops at ``read_max_bytes`` of output. Write and Edit handle files
    up to ``max_file_bytes``. Glob and Grep look at ``walk_max_entries`` directory entries at most; Glob
    lists ``glob_max_results`` paths, Grep shows ``grep_max_hits`` matching lines within
    ``grep_max_output_bytes``, skips files over ``grep_max_file_bytes`` and stops after ``grep_timeout_s``.
    Bash runs ``bash_timeout_s`` by default (``bash_max_timeout_s`` when asked), shows the model
    ``bash_output_bytes`` (half head, half tail) and hands up to ``artifact_max_bytes`` to
    ``persist_artifact``; after the shell exits, output still held open by a background child is read for
    ``bash_exit_grace_s`` more.
    """

    read_default_lines: int = 2000
    read_max_lines: int = 20_000
    max_line_chars: int = 2000
    read_max_bytes: int = 256 * 1024
    max_file_bytes: int = 16 * 1024 * 1024
    walk_max_entries: int = 200_000
    glob_max_results: int = 1000
    grep_max_hits: int = 500
    grep_max_output_bytes: int = 128 * 1024
    grep_max_file_bytes: int = 8 * 1024 * 1024
    grep_max_pattern_chars: int = 1000
    grep_timeout_s: float = 10.0
    bash_timeout_s: float = 120.0
    bash_max_timeout_s: float = 600.0
    bash_output_bytes: int = 32 * 1024
    artifact_max_bytes: int = 64 * 1024 * 1024
    bash_exit_grace_s: float = 1.0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise RuntimeOptionsError("tool-invalid-limits", f"ToolLimits.{item.name} must be > 0")
        if self.read_default_lines > self.read_max_lines:
            raise RuntimeOptionsError(
                "tool-invalid-limits", "ToolLimits.read_default_lines must not exceed read_max_lines"
            )
        if self.bash_timeout_s > self.bash_max_timeout_s:
            raise RuntimeOptionsError(
                "tool-invalid-limits", "ToolLimits.bash_timeout_s must not exceed bash_max_timeout_s"
            )
        if self.bash_output_bytes < 256:
            raise RuntimeOptionsError("tool-invalid-limits", "ToolLimits.bash_output_bytes must be >= 256")
