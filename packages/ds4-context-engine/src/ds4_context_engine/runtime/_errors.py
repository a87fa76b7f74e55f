"""Errors raised on purpose by the runtime facade (sandbox policy, MCP config, fallback, tool sink)."""

from __future__ import annotations

from ds4_context_core import Ds4ContextError

__all__ = [
    "McpConfigError",
    "RuntimeOptionsError",
    "SandboxPolicyError",
    "SandboxUnavailableError",
    "ToolLifecycleError",
]


class SandboxPolicyError(Ds4ContextError, ValueError):
    """A sandbox policy, or a path or URL checked against one, was refused."""


class SandboxUnavailableError(Ds4ContextError, RuntimeError):
    """The policy needs a sandbox engine that is missing, and the policy fails closed."""


class McpConfigError(Ds4ContextError, ValueError):
    """An MCP configuration as a whole was unusable (single bad entries are dropped, not raised)."""


class RuntimeOptionsError(Ds4ContextError, ValueError):
    """Fallback chains, retry policies or per-attempt overrides that break a rule."""


class ToolLifecycleError(Ds4ContextError, RuntimeError):
    """A tool lifecycle event was malformed, out of order, or conflicts with what is already persisted."""
