"""Starting a stdio MCP server goes through the sandbox like any other host command."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ._errors import SandboxPolicyError
from ._mcp import McpServer
from ._sandbox import SandboxPolicy
from ._sandbox_engine import (
    DEFAULT_SANDBOX_ENV_ALLOW,
    PreparedCommand,
    SandboxEngine,
    prepare_sandboxed_command,
)

__all__ = ["prepare_mcp_server_command"]


def prepare_mcp_server_command(
    server: McpServer,
    policy: SandboxPolicy,
    *,
    engine: SandboxEngine | None,
    env: Mapping[str, str] | None = None,
    env_allow: Iterable[str] = DEFAULT_SANDBOX_ENV_ALLOW,
) -> PreparedCommand:
    """The command that starts stdio MCP ``server`` under ``policy``, as :func:`prepare_sandboxed_command`.

    The variables the server's own configuration sets are passed (the host wrote them for this server);
    from ``env`` (default: this process's environment) only the names in ``env_allow``. A relative
    ``cwd`` is taken from the policy's root. Remote (http, sse) servers start no process and are refused.
    """
    if server.transport != "stdio" or server.command is None:
        raise SandboxPolicyError("sandbox-invalid-argv", f"MCP server {server.name!r} is not a stdio server")
    base = dict(os.environ if env is None else env)
    base.update(server.env)
    allow = {*env_allow, *server.env}
    cwd = None if server.cwd is None else os.path.join(policy.root, server.cwd)
    return prepare_sandboxed_command(
        policy, [server.command, *server.args], engine=engine, cwd=cwd, env=base, env_allow=allow
    )
