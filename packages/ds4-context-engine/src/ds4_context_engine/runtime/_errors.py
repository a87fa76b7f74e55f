"""Errors raised on purpose by the runtime facade (sandbox policy, MCP config, fallback, tool sink).

The classes are defined in ``ds4_context_engine._exceptions`` (the engine's one exception module, whose
docstring draws the tree); the runtime modules import them from here.
"""

from __future__ import annotations

from ds4_context_engine._exceptions import (
    McpConfigError,
    RuntimeOptionsError,
    SandboxPolicyError,
    SandboxUnavailableError,
    ToolLifecycleError,
)

__all__ = [
    "McpConfigError",
    "RuntimeOptionsError",
    "SandboxPolicyError",
    "SandboxUnavailableError",
    "ToolLifecycleError",
]
