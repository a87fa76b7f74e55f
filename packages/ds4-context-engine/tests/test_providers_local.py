import threading

import anyio
import pytest
from _http_servers import Reply, ScriptedServer, closed_port_url

from ds4_context_engine.providers import (
    LOCAL_PROVIDER_ERROR_CODES,
    LocalProviderDiscovery,
    LocalProviderError,
    is_private_host,
    openai_api_root,
    parse_local_provider,
    validate_provider_base_url,
)

OLLAMA_TAGS = {
    "object": "list",
    "data": [
        {"id": "llama3.2:latest", "object": "model", "created": 1730000000, "owned_by": "library"},
        {"id": "nomic-embed-text:latest", "object": "model", "created": 1730000000, "owned_by": "library"},
        {"id": "hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M", "object": "model", "owned_by": "library"},
    ],
}


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "127.0.0.1",
        "127.9.9.9",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.10",
        "100.64.0.1",
        "::1",
        "[::1]",
        "fd12::1",
        "fe80::1",
        "::ffff:192.168.0.1",
    ],
)
def test_private_hosts(host):
    assert is_private_host(host)


@pytest.mark.parametrize(
    "host", ["8.8.8.8", "172.32.0.1", "100.128.0.1", "api.openai.com", "2001:db8::1", "localhost.evil.com"]
)
def test_public_hosts(host):
    assert not is_private_host(host)


def test_private_base_urls_are_allowed_over_http():
    assert validate_provider_base_url("http://192.168.1.5:11434/") == "http://192.168.1.5:11434"
    assert validate_provider_base_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


def test_public_base_url_needs_trust_and_https():
    with pytest.raises(LocalProviderError) as caught:
        validate_provider_base_url("https://gpu.example.com")
    assert caught.value.code == "local-provider-public-host-untrusted"
    with pytest.raises(LocalProviderError) as caught:
        validate_provider_base_url("http://gpu.example.com", trusted=True)
    assert caught.value.code == "local-provider-public-host-needs-https"
    assert (
        validate_provider_base_url("https://gpu.example.com/v1", trusted=True) == "https://gpu.example.com/v1"
    )


@pytest.mark.parametrize(
    "url",
    [
        "",
        "localhost:11434",
        "ftp://127.0.0.1",
        "http://",
        "http://127.0.0.1:99999",
        "http://user:pw@127.0.0.1",
        "http://127.0.0.1/?x=1",
        "http://127.0.0.1/ v1",
        "http://127.0.0.1/\x00",
        5,
    ],
)
def test_malformed_base_urls(url):
    with pytest.raises(LocalProviderError) as caught:
        validate_provider_base_url(url)
    assert caught.value.code == "local-provider-invalid-base-url"


def test_base_url_errors_do_not_echo_credentials():
    with pytest.raises(LocalProviderError) as caught:
        validate_provider_base_url("http://user:" + "p" * 200 + "@127.0.0.1")
    assert "p" * 100 not in str(caught.value)


@pytest.mark.parametrize(
    ("base", "kind", "root"),
    [
        ("http://localhost:11434", "ollama", "http://localhost:11434/v1"),
        ("http://localhost:11434/api", "ollama", "http://localhost:11434/v1"),
        ("http://localhost:11434/v1/", "ollama", "http://localhost:11434/v1"),
        ("http://localhost:1234", "lmstudio", "http://localhost:1234/v1"),
        ("http://127.0.0.1:8000/v1", "openai_compat", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8080/api", "openai_compat", "http://127.0.0.1:8080/api/v1"),
    ],
)
def test_api_root(base, kind, root):
    assert openai_api_root(base, kind) == root


def test_definition_defaults_by_type():
    ollama = parse_local_provider({"id": "ollama", "type": "ollama"})
    assert ollama.base_url == "http://localhost:11434"
    assert ollama.max_advertised_models == 100
    assert parse_local_provider({"id": "lms", "type": "lmstudio"}).base_url == "http://localhost:1234"


def test_api_key_from_environment_wins_over_inline():
    definition = parse_local_provider(
        {
            "id": "vllm",
            "type": "openai_compat",
            "baseUrl": "http://10.0.0.2:8000/v1",
            "apiKey": "inline-key",
            "apiKeyEnv": "VLLM_KEY",
        }
    )
    assert definition.resolve_api_key({"VLLM_KEY": "env-key"}) == "env-key"
    assert definition.resolve_api_key({}) == "inline-key"
    assert "inline-key" not in repr(definition)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({"id": "my provider", "type": "ollama"}, "local-provider-invalid-id"),
        ({"id": "a/b", "type": "ollama"}, "local-provider-invalid-id"),
        ({"id": "a:b", "type": "ollama"}, "local-provider-invalid-id"),
        ({"id": "", "type": "ollama"}, "local-provider-invalid-id"),
        ({"id": "x", "type": "llamafile"}, "local-provider-invalid-type"),
        ({"id": "x", "type": "openai_compat"}, "local-provider-missing-base-url"),
        (
            {"id": "x", "type": "ollama", "baseUrl": "https://ollama.example.com"},
            "local-provider-public-host-untrusted",
        ),
        (
            {"id": "x", "type": "ollama", "baseUrl": "http://ollama.example.com", "trusted": True},
            "local-provider-public-host-needs-https",
        ),
        ({"id": "x", "type": "ollama", "trusted": "yes"}, "local-provider-invalid-field"),
        ({"id": "x", "type": "ollama", "maxAdvertisedModels": 0}, "local-provider-invalid-max-models"),
        ({"id": "x", "type": "ollama", "maxAdvertisedModels": 201}, "local-provider-invalid-max-models"),
        ({"id": "x", "type": "ollama", "apiKey": ""}, "local-provider-invalid-api-key"),
        ({"id": "x", "type": "ollama", "apiKeyEnv": "NOT-A-NAME"}, "local-provider-invalid-api-key"),
        ({"id": "x", "type": "ollama", "models": []}, "local-provider-unknown-field"),
    ],
)
def test_bad_definitions(data, code):
    with pytest.raises(LocalProviderError) as caught:
        parse_local_provider(data)
    assert caught.value.code == code
    assert code in LOCAL_PROVIDER_ERROR_CODES


def _discover(discovery, definition):
    return anyio.run(discovery.discover, definition)


def test_ollama_discovery_separates_embedding_models():
    def show(request):
        model = request.json()["model"]
        if model.startswith("nomic-embed"):
            return Reply(body={"capabilities": ["embedding"], "details": {"family": "nomic-bert"}})
        return Reply(body={"capabilities": ["completion", "tools"], "details": {"family": "llama"}})

    with ScriptedServer() as server:
        server.on("GET", "/v1/models", Reply(body=OLLAMA_TAGS))
        server.on("POST", "/api/show", show)
        definition = parse_local_provider({"id": "ollama", "type": "ollama", "baseUrl": server.url + "/api"})
        found = _discover(LocalProviderDiscovery(), definition)
    assert found.chat_models == ("llama3.2:latest", "hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M")
    assert found.embedding_models == ("nomic-embed-text:latest",)
    assert found.references[0] == "ollama:llama3.2:latest"


def test_lmstudio_discovery_uses_the_rest_listing_for_embeddings():
    with ScriptedServer() as server:
        server.on(
            "GET",
            "/v1/models",
            Reply(body={"data": [{"id": "qwen2.5-7b-instruct"}, {"id": "text-embedding-nomic"}]}),
        )
        server.on(
            "GET",
            "/api/v1/models",
            Reply(
                body={
                    "models": [
                        {"type": "llm", "key": "qwen2.5-7b-instruct"},
                        {"type": "embedding", "key": "text-embedding-nomic"},
                    ]
                }
            ),
        )
        definition = parse_local_provider({"id": "lms", "type": "lmstudio", "baseUrl": server.url})
        found = _discover(LocalProviderDiscovery(), definition)
    assert found.chat_models == ("qwen2.5-7b-instruct",)
    assert found.embedding_models == ("text-embedding-nomic",)


def test_openai_compat_discovery_sends_the_resolved_key_and_caps_the_list():
    with ScriptedServer() as server:
        server.on("GET", "/v1/models", Reply(body={"data": [{"id": f"m{i}"} for i in range(5)]}))
        definition = parse_local_provider(
            {
                "id": "vllm",
                "type": "openai_compat",
                "baseUrl": server.url + "/v1",
                "apiKeyEnv": "K",
                "maxAdvertisedModels": 3,
            }
        )
        found = _discover(LocalProviderDiscovery(environ={"K": "env-token"}), definition)
        assert server.requests[0].headers["authorization"] == "Bearer env-token"
    assert found.chat_models == ("m0", "m1", "m2")


@pytest.mark.parametrize(
    "reply",
    [
        Reply(raw=b"<html>not json</html>", headers={"Content-Type": "text/html"}),
        Reply(raw=b'{"data": [truncated'),
        Reply(body={"data": "nope"}),
        Reply(body=["a", "b"]),
        Reply(status=500, body={"error": "boom"}),
        Reply(body={"data": [{"id": 5}, {"id": "ok"}, {"id": "bad\u0000id"}, "x"]}),
    ],
)
def test_malformed_listings_never_raise(reply):
    with ScriptedServer() as server:
        server.on("GET", "/v1/models", reply)
        definition = parse_local_provider({"id": "c", "type": "openai_compat", "baseUrl": server.url})
        found = _discover(LocalProviderDiscovery(), definition)
    assert found.chat_models in ((), ("ok",))


def test_down_server_gives_an_empty_list():
    definition = parse_local_provider({"id": "c", "type": "openai_compat", "baseUrl": closed_port_url()})
    assert _discover(LocalProviderDiscovery(), definition).chat_models == ()


def test_slow_server_times_out_to_an_empty_list():
    with ScriptedServer() as server:
        server.on("GET", "/v1/models", Reply(body=OLLAMA_TAGS, delay_s=0.5))
        definition = parse_local_provider({"id": "c", "type": "openai_compat", "baseUrl": server.url})
        found = _discover(LocalProviderDiscovery(timeout_ms=50), definition)
    assert found.chat_models == ()


def test_results_are_cached_per_provider_until_the_ttl_expires():
    now = [0.0]
    with ScriptedServer() as server:
        server.on(
            "GET", "/v1/models", Reply(body={"data": [{"id": "a"}]}), Reply(body={"data": [{"id": "b"}]})
        )
        definition = parse_local_provider({"id": "c", "type": "openai_compat", "baseUrl": server.url})
        discovery = LocalProviderDiscovery(clock=lambda: now[0])
        assert _discover(discovery, definition).chat_models == ("a",)
        now[0] = 59.0
        assert _discover(discovery, definition).chat_models == ("a",)
        assert len(server.requests) == 1
        now[0] = 60.5
        assert _discover(discovery, definition).chat_models == ("b",)
        assert len(server.requests) == 2


def test_an_older_slower_probe_never_overwrites_a_newer_result():
    second_done = threading.Event()

    def answer(request):
        if len(server.requests) == 1:
            return Reply(body={"data": [{"id": "old"}]}, wait_for=second_done)
        return Reply(body={"data": [{"id": "new"}]})

    with ScriptedServer() as server:
        server.on("GET", "/v1/models", answer)
        definition = parse_local_provider({"id": "c", "type": "openai_compat", "baseUrl": server.url})
        discovery = LocalProviderDiscovery(ttl_s=0, timeout_ms=5000)
        results = {}

        async def main():
            async def probe(name):
                results[name] = await discovery.discover(definition)
                if name == "second":
                    second_done.set()  # only now may the older probe's answer arrive

            async with anyio.create_task_group() as group:
                group.start_soon(probe, "first")
                while not server.requests:  # the first probe is in flight before the second starts
                    await anyio.sleep(0.005)
                group.start_soon(probe, "second")
            return discovery._cache[(definition.id, definition.api_root)].models

        kept = anyio.run(main)
    assert results["second"].chat_models == ("new",)
    assert results["first"].chat_models == ("new",)
    assert kept.chat_models == ("new",)


def test_discovery_settings_are_validated():
    with pytest.raises(LocalProviderError) as caught:
        LocalProviderDiscovery(timeout_ms=0)
    assert caught.value.code == "local-provider-invalid-field"
