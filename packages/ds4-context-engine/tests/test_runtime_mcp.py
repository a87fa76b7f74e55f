import pytest

from ds4_context_engine.runtime import (
    MCP_DROP_CODES,
    McpConfigError,
    McpServer,
    is_valid_mcp_server_name,
    parse_mcp_servers,
)


def test_each_entry_shape_gets_the_right_transport():
    result = parse_mcp_servers(
        {
            "events": {"type": "sse", "url": "https://mcp.example.com/sse"},
            "search": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"X-Team": "a"}},
            "bare_url": {"url": "http://127.0.0.1:9000/mcp"},
            "files": {"command": "npx", "args": ["-y", "server-files"], "env": {"DEBUG": "1"}, "cwd": "/srv"},
            "typed-stdio": {"type": "stdio", "command": "python", "args": ["-m", "srv"]},
        }
    )
    assert result.dropped == ()
    by_name = {server.name: server for server in result.servers}
    assert by_name["events"].transport == "sse"
    assert by_name["search"] == McpServer(
        name="search", transport="http", url="https://mcp.example.com/mcp", headers={"X-Team": "a"}
    )
    assert by_name["bare_url"].transport == "http"
    assert by_name["files"] == McpServer(
        name="files",
        transport="stdio",
        command="npx",
        args=("-y", "server-files"),
        env={"DEBUG": "1"},
        cwd="/srv",
    )
    assert by_name["typed-stdio"].transport == "stdio"


def test_mcp_servers_document_is_unwrapped():
    result = parse_mcp_servers({"mcpServers": {"a": {"url": "https://x.example/mcp"}}})
    assert [server.name for server in result.servers] == ["a"]


@pytest.mark.parametrize(
    ("name", "entry", "code"),
    [
        ("bad name", {"url": "https://x.example"}, "mcp-invalid-name"),
        ("a" * 65, {"url": "https://x.example"}, "mcp-invalid-name"),
        ("ok", "npx server", "mcp-invalid-entry"),
        ("ok", {"type": "websocket", "url": "wss://x"}, "mcp-unknown-type"),
        ("ok", {"type": "sse"}, "mcp-missing-url"),
        ("ok", {"type": "http", "url": 5}, "mcp-invalid-url"),
        ("ok", {"url": "ftp://x.example"}, "mcp-invalid-url"),
        ("ok", {"url": "https://"}, "mcp-invalid-url"),
        ("ok", {"url": "https://x.example", "headers": {"Authorization": 1}}, "mcp-invalid-headers"),
        ("ok", {"url": "https://x.example", "headers": ["a"]}, "mcp-invalid-headers"),
        ("ok", {"type": "stdio"}, "mcp-invalid-command"),
        ("ok", {"command": ""}, "mcp-invalid-command"),
        ("ok", {"command": "npx", "args": "-y srv"}, "mcp-invalid-args"),
        ("ok", {"command": "npx", "args": ["-y", 3]}, "mcp-invalid-args"),
        ("ok", {"command": "npx", "env": {"PORT": 8080}}, "mcp-invalid-env"),
        ("ok", {"command": "npx", "cwd": 1}, "mcp-invalid-cwd"),
        ("ok", {"description": "nothing to run"}, "mcp-missing-transport"),
    ],
)
def test_invalid_entries_are_dropped_with_a_code_and_others_kept(name, entry, code):
    result = parse_mcp_servers({name: entry, "good": {"url": "https://good.example/mcp"}})
    assert [server.name for server in result.servers] == ["good"]
    assert len(result.dropped) == 1
    assert result.dropped[0].code == code
    assert code in MCP_DROP_CODES


def test_dropped_reasons_never_echo_values():
    result = parse_mcp_servers({"x": {"url": "https://h.example", "headers": {"Authorization": 12345678}}})
    dropped = result.dropped[0]
    assert "12345678" not in dropped.reason
    invalid = parse_mcp_servers({"sk-secret name": {"url": "https://h.example"}}).dropped[0]
    assert invalid.name == "<invalid name>"


def test_non_object_configuration_raises():
    with pytest.raises(McpConfigError) as caught:
        parse_mcp_servers(["a"])  # type: ignore[arg-type]
    assert caught.value.code == "mcp-config-not-an-object"
    with pytest.raises(McpConfigError) as caught:
        parse_mcp_servers({"mcpServers": []})
    assert caught.value.code == "mcp-config-not-an-object"


def test_server_name_rule():
    assert is_valid_mcp_server_name("git_hub-2")
    assert not is_valid_mcp_server_name("git.hub")
    assert not is_valid_mcp_server_name("")
    assert not is_valid_mcp_server_name(None)
