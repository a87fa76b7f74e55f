"""Normalization of MCP server definitions from host configuration.

One bad entry never disables the others: it is dropped with a coded reason, and the rest are returned.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit

import msgspec

from ds4_context_engine._exceptions import DroppedMcpEntryError

from ._errors import McpConfigError

__all__ = [
    "MCP_CONFIG_ERROR_CODES",
    "MCP_DROP_CODES",
    "MCP_SERVER_NAME_MAX_LENGTH",
    "MCP_TRANSPORTS",
    "DroppedMcpServer",
    "McpServer",
    "McpServers",
    "is_valid_mcp_server_name",
    "parse_mcp_servers",
]

MCP_TRANSPORTS: Final = ("http", "sse", "stdio")
MCP_SERVER_NAME_MAX_LENGTH: Final = 64
MCP_CONFIG_ERROR_CODES: Final = ("mcp-config-not-an-object",)
MCP_DROP_CODES: Final = (
    "mcp-invalid-args",
    "mcp-invalid-command",
    "mcp-invalid-cwd",
    "mcp-invalid-entry",
    "mcp-invalid-env",
    "mcp-invalid-headers",
    "mcp-invalid-name",
    "mcp-invalid-url",
    "mcp-missing-transport",
    "mcp-missing-url",
    "mcp-unknown-type",
)

McpTransport: TypeAlias = Literal["http", "sse", "stdio"]
_NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]+")


class McpServer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One usable MCP server: remote ones have ``url``/``headers``, stdio ones the process fields."""

    name: str
    transport: McpTransport
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None


class DroppedMcpServer(msgspec.Struct, frozen=True, kw_only=True):
    """An entry that was left out, with a stable ``code`` and a reason that never echoes values."""

    name: str
    code: str
    reason: str


class McpServers(msgspec.Struct, frozen=True, kw_only=True):
    servers: tuple[McpServer, ...]
    dropped: tuple[DroppedMcpServer, ...]


def is_valid_mcp_server_name(name: object) -> bool:
    """Names are 1-64 letters, digits, ``_`` or ``-``; they become tool-name prefixes."""
    return (
        isinstance(name, str)
        and len(name) <= MCP_SERVER_NAME_MAX_LENGTH
        and _NAME_PATTERN.fullmatch(name) is not None
    )


def _string_map(value: object, code: str, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DroppedMcpEntryError(code, f"{field} must be an object of strings")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or not isinstance(item, str):
            raise DroppedMcpEntryError(code, f"{field} keys and values must be strings")
        result[key] = item
    return result


def _url(entry: Mapping[str, Any]) -> str:
    url = entry.get("url")
    if url is None:
        raise DroppedMcpEntryError("mcp-missing-url", "a remote MCP server needs a url")
    if not isinstance(url, str):
        raise DroppedMcpEntryError("mcp-invalid-url", "url must be a string")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise DroppedMcpEntryError("mcp-invalid-url", "url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise DroppedMcpEntryError("mcp-invalid-url", "url must be an http or https URL with a host")
    return url


def _remote(name: str, transport: McpTransport, entry: Mapping[str, Any]) -> McpServer:
    return McpServer(
        name=name,
        transport=transport,
        url=_url(entry),
        headers=_string_map(entry.get("headers"), "mcp-invalid-headers", "headers"),
    )


def _stdio(name: str, entry: Mapping[str, Any]) -> McpServer:
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise DroppedMcpEntryError(
            "mcp-invalid-command", "a stdio MCP server needs a non-empty command string"
        )
    args = entry.get("args", ())
    if isinstance(args, str) or not isinstance(args, list | tuple):
        raise DroppedMcpEntryError("mcp-invalid-args", "args must be a list of strings")
    if not all(isinstance(arg, str) for arg in args):
        raise DroppedMcpEntryError("mcp-invalid-args", "args must contain only strings")
    cwd = entry.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise DroppedMcpEntryError("mcp-invalid-cwd", "cwd must be a non-empty string")
    return McpServer(
        name=name,
        transport="stdio",
        command=command,
        args=tuple(args),
        env=_string_map(entry.get("env"), "mcp-invalid-env", "env"),
        cwd=cwd,
    )


def _normalize(name: str, entry: object) -> McpServer:
    if not is_valid_mcp_server_name(name):
        raise DroppedMcpEntryError(
            "mcp-invalid-name", "server names may contain only letters, digits, '_' and '-'"
        )
    if not isinstance(entry, Mapping):
        raise DroppedMcpEntryError("mcp-invalid-entry", "a server definition must be an object")
    declared = entry.get("type")
    if declared is not None and declared not in MCP_TRANSPORTS:
        raise DroppedMcpEntryError("mcp-unknown-type", f"type must be one of {MCP_TRANSPORTS}")
    if declared == "sse":
        return _remote(name, "sse", entry)
    if declared == "http":
        return _remote(name, "http", entry)
    if declared == "stdio" or "command" in entry:
        return _stdio(name, entry)
    if "url" in entry:
        return _remote(name, "http", entry)
    raise DroppedMcpEntryError(
        "mcp-missing-transport", "an entry needs a url (http/sse) or a command (stdio)"
    )


def parse_mcp_servers(config: Mapping[str, Any]) -> McpServers:
    """Normalize ``{name: definition}`` (or a ``{"mcpServers": {...}}`` document).

    ``type: sse`` needs a ``url``; ``type: http`` or an entry with only a ``url`` is HTTP; ``type: stdio``
    or any entry with a ``command`` is stdio. Invalid entries are reported in ``dropped``.
    """
    if not isinstance(config, Mapping):
        raise McpConfigError("mcp-config-not-an-object", "MCP configuration must be an object of servers")
    if set(config) == {"mcpServers"}:
        config = config["mcpServers"]
        if not isinstance(config, Mapping):
            raise McpConfigError("mcp-config-not-an-object", "mcpServers must be an object of servers")
    servers: list[McpServer] = []
    dropped: list[DroppedMcpServer] = []
    for raw_name, entry in config.items():
        name = raw_name if isinstance(raw_name, str) else ""
        shown = name if is_valid_mcp_server_name(name) else "<invalid name>"
        try:
            servers.append(_normalize(name, entry))
        except DroppedMcpEntryError as drop:
            dropped.append(DroppedMcpServer(name=shown, code=drop.code, reason=drop.reason))
    return McpServers(servers=tuple(servers), dropped=tuple(dropped))
