"""Local providers (Ollama, LM Studio, any OpenAI-compatible server): definitions, base URLs, discovery.

Discovery is best effort by design: a server that is down, slow, or answers with something that is not
the expected JSON yields an empty list, never an exception, so a host can probe at startup freely.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import time
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import msgspec

from ._bounded import ACCEPT_ENCODING, read_bounded
from ._errors import LocalProviderError, escape_echo

__all__ = [
    "DISCOVERY_CACHE_TTL_S",
    "DISCOVERY_RESPONSE_MAX_BYTES",
    "DISCOVERY_TIMEOUT_MS",
    "LMSTUDIO_DEFAULT_BASE_URL",
    "LOCAL_PROVIDER_ERROR_CODES",
    "LOCAL_PROVIDER_TYPES",
    "MAX_ADVERTISED_MODELS_DEFAULT",
    "MAX_ADVERTISED_MODELS_LIMIT",
    "OLLAMA_DEFAULT_BASE_URL",
    "LocalProviderDefinition",
    "LocalProviderDiscovery",
    "LocalProviderModels",
    "LocalProviderType",
    "is_private_host",
    "openai_api_root",
    "parse_local_provider",
    "validate_provider_base_url",
]

LOCAL_PROVIDER_TYPES: Final = ("lmstudio", "ollama", "openai_compat")
OLLAMA_DEFAULT_BASE_URL: Final = "http://localhost:11434"
LMSTUDIO_DEFAULT_BASE_URL: Final = "http://localhost:1234"
DISCOVERY_TIMEOUT_MS: Final = 1500
DISCOVERY_CACHE_TTL_S: Final = 60
# A listing of a few hundred models is tens of KiB; anything past this is not a model server's answer.
DISCOVERY_RESPONSE_MAX_BYTES: Final = 4 * 1024 * 1024
MAX_ADVERTISED_MODELS_DEFAULT: Final = 100
MAX_ADVERTISED_MODELS_LIMIT: Final = 200
LOCAL_PROVIDER_ERROR_CODES: Final = (
    "local-provider-invalid-api-key",
    "local-provider-invalid-base-url",
    "local-provider-invalid-field",
    "local-provider-invalid-id",
    "local-provider-invalid-max-models",
    "local-provider-invalid-type",
    "local-provider-missing-base-url",
    "local-provider-public-host-needs-https",
    "local-provider-public-host-untrusted",
    "local-provider-unknown-field",
)

LocalProviderType: TypeAlias = Literal["lmstudio", "ollama", "openai_compat"]

_DEFAULT_BASE_URLS: Final = {"ollama": OLLAMA_DEFAULT_BASE_URL, "lmstudio": LMSTUDIO_DEFAULT_BASE_URL}
_PRIVATE_NETWORKS: Final = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    )
)
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_MAX_MODEL_ID_BYTES: Final = 256


def is_private_host(host: str) -> bool:
    """``localhost`` or an address in a loopback, private, CGNAT, unique-local or link-local range."""
    lowered = host.strip("[]").lower().rstrip(".")
    if lowered == "localhost" or lowered.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(lowered.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in _PRIVATE_NETWORKS)


def _safe_origin(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url`` for an error message, or ``None`` when that is not certain.

    Userinfo, path, query and fragment are never part of it: they may hold passwords, tokens or API keys.
    When the URL does not parse cleanly as http(s) with a host, or holds an ``@`` outside its authority
    (``http://TOKEN#x@host`` would otherwise report ``TOKEN`` as the host), nothing is echoed.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not host:
        return None
    if "@" in url and "@" not in parts.netloc:
        return None
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _url_error(code: str, reason: str, url: str) -> LocalProviderError:
    # Never the whole URL: its userinfo, path, query or fragment may carry a secret.
    origin = _safe_origin(url)
    # The origin holds no userinfo, path or query: it may be shown at the length a host needs.
    where = f"base URL {escape_echo(origin, 96)}" if origin is not None else "base URL"
    return LocalProviderError(code, f"{where}: {reason}")


def validate_provider_base_url(url: object, *, trusted: bool = False) -> str:
    """Return ``url`` without a trailing slash if a provider may be reached there, else raise.

    Private hosts are always allowed (plain http included); a public host needs ``trusted=True`` and https,
    so prompts never leave the machine or the LAN by accident, and never in clear text.
    """
    if not isinstance(url, str) or not url:
        raise LocalProviderError("local-provider-invalid-base-url", "the base URL must be a non-empty string")
    if any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") or char.isspace() for char in url):
        raise _url_error("local-provider-invalid-base-url", "contains whitespace or control characters", url)
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018  # raises ValueError on a malformed port
    except ValueError:
        parsed = False  # raised below, outside the handler: the ValueError quotes the URL (its context)
    else:
        parsed = True
    if not parsed:
        raise _url_error("local-provider-invalid-base-url", "not a valid URL", url)
    if parts.scheme not in ("http", "https") or not host:
        raise _url_error("local-provider-invalid-base-url", "must be an http or https URL with a host", url)
    if parts.username or parts.password:
        raise _url_error("local-provider-invalid-base-url", "credentials in the URL are not allowed", url)
    if parts.query or parts.fragment:
        raise _url_error("local-provider-invalid-base-url", "a base URL has no query or fragment", url)
    if not is_private_host(host):
        if not trusted:
            raise _url_error(
                "local-provider-public-host-untrusted",
                "a public host needs explicit trust (trusted=True)",
                url,
            )
        if parts.scheme != "https":
            raise _url_error("local-provider-public-host-needs-https", "a public host must use https", url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def openai_api_root(base_url: str, provider_type: LocalProviderType) -> str:
    """The ``.../v1`` root of a server's OpenAI-compatible API.

    A trailing ``/v1`` (and for Ollama also ``/api``) is stripped before ``/v1`` is added, so both
    ``http://host:11434`` and ``http://host:11434/api`` give ``http://host:11434/v1``.
    """
    root = base_url.rstrip("/")
    suffixes = ("/v1", "/api") if provider_type == "ollama" else ("/v1",)
    for suffix in suffixes:
        if root.endswith(suffix):
            root = root[: -len(suffix)]
            break
    return root + "/v1"


def _server_root(base_url: str, provider_type: LocalProviderType) -> str:
    return openai_api_root(base_url, provider_type)[: -len("/v1")]


class LocalProviderDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A validated local provider. ``api_key`` is kept out of ``repr`` so it never lands in a log."""

    id: str
    type: LocalProviderType
    base_url: str
    trusted: bool = False
    api_key_env: str | None = None
    max_advertised_models: int = MAX_ADVERTISED_MODELS_DEFAULT
    api_key: str | None = msgspec.field(default=None)

    def __repr__(self) -> str:
        key = "set" if self.api_key else "unset"
        return (
            f"LocalProviderDefinition(id={self.id!r}, type={self.type!r}, base_url={self.base_url!r}, "
            f"trusted={self.trusted!r}, api_key_env={self.api_key_env!r}, api_key=<{key}>)"
        )

    def resolve_api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The key from ``api_key_env`` when that variable is set and non-empty, else the inline key."""
        env = os.environ if environ is None else environ
        if self.api_key_env:
            from_env = env.get(self.api_key_env)
            if from_env:
                return from_env
        return self.api_key

    @property
    def api_root(self) -> str:
        return openai_api_root(self.base_url, self.type)


_DEFINITION_FIELDS: Final = {
    "id": "id",
    "type": "type",
    "baseUrl": "base_url",
    "base_url": "base_url",
    "trusted": "trusted",
    "apiKey": "api_key",
    "api_key": "api_key",
    "apiKeyEnv": "api_key_env",
    "api_key_env": "api_key_env",
    "maxAdvertisedModels": "max_advertised_models",
    "max_advertised_models": "max_advertised_models",
}


def _validate_id(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > 64:
        raise LocalProviderError("local-provider-invalid-id", "a provider id must be 1-64 characters of text")
    if any(char.isspace() or char in "/:" or unicodedata.category(char)[0] == "C" for char in value):
        raise LocalProviderError(
            "local-provider-invalid-id",
            f"provider id {escape_echo(value)} may not contain whitespace, '/', ':' or control characters",
        )
    return value


def parse_local_provider(data: Mapping[str, Any]) -> LocalProviderDefinition:
    """Validate a local provider definition (``{id, type, baseUrl?, trusted?, apiKey?, apiKeyEnv?, ...}``).

    Ollama and LM Studio default to their usual localhost ports; ``openai_compat`` needs ``baseUrl``.
    """
    if not isinstance(data, Mapping):
        raise LocalProviderError("local-provider-invalid-field", "a provider definition must be an object")
    unknown = sorted(str(key) for key in data if key not in _DEFINITION_FIELDS)
    if unknown:
        raise LocalProviderError("local-provider-unknown-field", f"unknown provider fields: {unknown[:5]}")
    fields = {_DEFINITION_FIELDS[key]: value for key, value in data.items()}
    provider_id = _validate_id(fields.get("id"))
    provider_type = fields.get("type")
    if provider_type not in LOCAL_PROVIDER_TYPES:
        raise LocalProviderError("local-provider-invalid-type", f"type must be one of {LOCAL_PROVIDER_TYPES}")
    trusted = fields.get("trusted", False)
    if not isinstance(trusted, bool):
        raise LocalProviderError("local-provider-invalid-field", "trusted must be a boolean")
    base_url = fields.get("base_url", _DEFAULT_BASE_URLS.get(provider_type))
    if base_url is None:
        raise LocalProviderError("local-provider-missing-base-url", "an openai_compat provider needs baseUrl")
    api_key = fields.get("api_key")
    if api_key is not None and (not isinstance(api_key, str) or not api_key or api_key.strip() != api_key):
        raise LocalProviderError(
            "local-provider-invalid-api-key", "apiKey must be a non-empty trimmed string"
        )
    api_key_env = fields.get("api_key_env")
    if api_key_env is not None and not (isinstance(api_key_env, str) and _ENV_NAME.fullmatch(api_key_env)):
        raise LocalProviderError(
            "local-provider-invalid-api-key", "apiKeyEnv must be an environment variable name"
        )
    max_models = fields.get("max_advertised_models", MAX_ADVERTISED_MODELS_DEFAULT)
    if type(max_models) is not int or not 1 <= max_models <= MAX_ADVERTISED_MODELS_LIMIT:
        raise LocalProviderError(
            "local-provider-invalid-max-models",
            f"maxAdvertisedModels must be an integer from 1 to {MAX_ADVERTISED_MODELS_LIMIT}",
        )
    return LocalProviderDefinition(
        id=provider_id,
        type=provider_type,
        base_url=validate_provider_base_url(base_url, trusted=trusted),
        trusted=trusted,
        api_key=api_key,
        api_key_env=api_key_env,
        max_advertised_models=max_models,
    )


class LocalProviderModels(msgspec.Struct, frozen=True, kw_only=True):
    """What a probe found: model ids usable for chat, and embedding-only models (never offered for chat)."""

    provider: str
    chat_models: tuple[str, ...] = ()
    embedding_models: tuple[str, ...] = ()

    @property
    def references(self) -> tuple[str, ...]:
        """``<provider>:<model>`` references for the chat models."""
        return tuple(f"{self.provider}:{model}" for model in self.chat_models)


class _CacheEntry(msgspec.Struct, frozen=True):
    sequence: int
    stored_at: float
    models: LocalProviderModels


def _valid_model_id(value: object) -> bool:
    return (
        isinstance(value, str)
        and bool(value)
        and len(value.encode("utf-8", "surrogatepass")) <= _MAX_MODEL_ID_BYTES
        and not any(unicodedata.category(char)[0] == "C" for char in value)
    )


def _ids_from_listing(payload: Any) -> list[str]:
    if not isinstance(payload, Mapping):
        return []
    entries = payload.get("data")
    if not isinstance(entries, list):
        return []
    ids: list[str] = []
    for entry in entries:
        model_id = entry.get("id") if isinstance(entry, Mapping) else None
        if isinstance(model_id, str) and _valid_model_id(model_id) and model_id not in ids:
            ids.append(model_id)
    return ids


def _lmstudio_embedding_ids(payload: Any) -> set[str]:
    if not isinstance(payload, Mapping):
        return set()
    entries = payload.get("models", payload.get("data"))
    if not isinstance(entries, list):
        return set()
    found: set[str] = set()
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("type") not in ("embedding", "embeddings"):
            continue
        for key in ("key", "id"):
            if _valid_model_id(entry.get(key)):
                found.add(entry[key])
    return found


class LocalProviderDiscovery:
    """Probes local providers for their models, with a per-provider cache.

    Results are cached ``ttl_s`` seconds per provider and endpoint. When probes overlap, the result of the
    probe that started last is the one kept: an older, slower probe can never overwrite it.
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_ms: int = DISCOVERY_TIMEOUT_MS,
        ttl_s: float = DISCOVERY_CACHE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if not (timeout_ms > 0 and math.isfinite(timeout_ms)) or ttl_s < 0:
            raise LocalProviderError("local-provider-invalid-field", "timeout must be > 0 and ttl >= 0")
        self._client = client
        self._timeout_s = timeout_ms / 1000
        self._ttl_s = ttl_s
        self._clock = clock
        self._environ = environ
        self._cache: dict[tuple[str, str], _CacheEntry] = {}
        self._started = 0

    def invalidate(self) -> None:
        self._cache.clear()

    async def discover(self, definition: LocalProviderDefinition) -> LocalProviderModels:
        """The provider's models, from cache when fresh. Never raises on network or payload problems."""
        key = (definition.id, definition.api_root)
        cached = self._cache.get(key)
        if cached is not None and self._clock() - cached.stored_at < self._ttl_s:
            return cached.models
        self._started += 1
        sequence = self._started
        models = await self._probe(definition)
        current = self._cache.get(key)
        if current is not None and current.sequence > sequence:
            return current.models
        self._cache[key] = _CacheEntry(sequence, self._clock(), models)
        return models

    async def _probe(self, definition: LocalProviderDefinition) -> LocalProviderModels:
        empty = LocalProviderModels(provider=definition.id)
        headers = {"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING}
        api_key = definition.resolve_api_key(self._environ)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        client = self._client or httpx.AsyncClient()
        try:
            with anyio.move_on_after(self._timeout_s):
                return await self._probe_with(client, definition, headers)
            return empty
        except (httpx.HTTPError, msgspec.MsgspecError, ValueError, OSError):
            return empty
        finally:
            if self._client is None:
                await client.aclose()

    async def _fetch_json(
        self, client: httpx.AsyncClient, method: str, url: str, headers: dict[str, str], **extra: Any
    ) -> Any:
        """The decoded JSON of a 200 answer (None otherwise), read streamed and capped like a completion."""
        async with client.stream(
            method, url, headers=headers, timeout=self._timeout_s, follow_redirects=False, **extra
        ) as response:
            if response.status_code != 200:
                return None
            return msgspec.json.decode(await read_bounded(response, DISCOVERY_RESPONSE_MAX_BYTES))

    async def _get_json(self, client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Any:
        return await self._fetch_json(client, "GET", url, headers)

    async def _probe_with(
        self, client: httpx.AsyncClient, definition: LocalProviderDefinition, headers: dict[str, str]
    ) -> LocalProviderModels:
        try:
            listing = await self._get_json(client, definition.api_root + "/models", headers)
        except ValueError:  # not JSON, too large or undecodable: no listing
            listing = None
        ids = _ids_from_listing(listing)
        embedding: set[str] = set()
        root = _server_root(definition.base_url, definition.type)
        if definition.type == "lmstudio":
            try:
                embedding = _lmstudio_embedding_ids(
                    await self._get_json(client, root + "/api/v1/models", headers)
                )
            except (ValueError, httpx.HTTPError):  # bad JSON, too large, undecodable: no embedding list
                embedding = set()
        elif definition.type == "ollama" and ids:
            embedding = await self._ollama_embedding_ids(client, root, ids, headers)
        chat = [model for model in ids if model not in embedding][: definition.max_advertised_models]
        return LocalProviderModels(
            provider=definition.id,
            chat_models=tuple(chat),
            embedding_models=tuple(sorted(embedding)),
        )

    async def _ollama_embedding_ids(
        self, client: httpx.AsyncClient, root: str, ids: list[str], headers: dict[str, str]
    ) -> set[str]:
        found: set[str] = set()
        # A local server loads model metadata from disk; a few requests at a time are plenty.
        limiter = anyio.CapacityLimiter(8)

        async def show(model: str) -> None:
            async with limiter:
                await show_one(model)

        async def show_one(model: str) -> None:
            try:
                details = await self._fetch_json(
                    client, "POST", root + "/api/show", headers, json={"model": model}
                )
            except (httpx.HTTPError, ValueError):
                return
            capabilities = details.get("capabilities") if isinstance(details, Mapping) else None
            if (
                isinstance(capabilities, list)
                and "embedding" in capabilities
                and "completion" not in capabilities
            ):
                found.add(model)

        async with anyio.create_task_group() as group:
            for model in ids[:MAX_ADVERTISED_MODELS_LIMIT]:
                group.start_soon(show, model)
        return found
