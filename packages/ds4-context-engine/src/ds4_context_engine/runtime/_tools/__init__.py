"""Managed tools: Read, Write, Edit, Glob, Grep and Bash over a workspace and its extra roots.

Private package; the public names are re-exported by ``ds4_context_engine.runtime``.
"""

from ds4_context_engine.runtime._tools._bash import PersistArtifact
from ds4_context_engine.runtime._tools._records import (
    MANAGED_TOOL_CONCURRENCY,
    MANAGED_TOOL_ERROR_CODES,
    MANAGED_TOOL_NAMES,
    MANAGED_TOOL_STATES,
    ToolArtifact,
    ToolConcurrency,
    ToolLimits,
    ToolOutcome,
    ToolSpec,
    ToolState,
)
from ds4_context_engine.runtime._tools._schedule import group_tool_calls
from ds4_context_engine.runtime._tools._toolbox import ManagedToolbox

__all__ = [
    "MANAGED_TOOL_CONCURRENCY",
    "MANAGED_TOOL_ERROR_CODES",
    "MANAGED_TOOL_NAMES",
    "MANAGED_TOOL_STATES",
    "ManagedToolbox",
    "PersistArtifact",
    "ToolArtifact",
    "ToolConcurrency",
    "ToolLimits",
    "ToolOutcome",
    "ToolSpec",
    "ToolState",
    "group_tool_calls",
]
