"""What every HTTP transport shares: privacy right before sending, failure classification, usage reports.

A transport never raises from :meth:`HttpTransport.complete`. Whatever goes wrong (a payload that cannot be
converted, privacy enforcement, the network, the provider, a malformed answer) comes back as a
``fallback`` result with a code, so the caller keeps the user's turn and canonical history is untouched.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

import httpx
import msgspec

from ds4_context_core import Ds4ContextError, PrivacyEnforcementError, estimate_message_tokens
from ds4_context_core.adapter import CompletionRequest as AdapterCompletionRequest
from ds4_context_core.privacy import PrivacyPolicy, enforce_payload_privacy, mark_local_only_messages

from ._errors import ProviderConfigurationError
from ._types import (
    CompletionOutput,
    CompletionUsage,
    FailureKind,
    TransportFailure,
    TransportRequest,
    TransportResult,
    UsageObservation,
)

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_S",
    "PROVIDER_RESPONSE_MAX_BYTES",
    "HttpTransport",
    "ProviderResponseError",
    "ProviderTransportError",
    "UsageCallback",
    "parse_retry_after_ms",
]

DEFAULT_REQUEST_TIMEOUT_S: Final = 120.0
PROVIDER_RESPONSE_MAX_BYTES: Final = 32 * 1024 * 1024
# A provider error code is passed on only when it reads like one (rate_limit_error, invalid_api_key):
# words of lower-case letters joined by "_", "." or "-". A server that echoes a key (mixed case, digits,
# long random runs) in its code field gets nothing passed on.
_ERROR_TYPE_PATTERN: Final = re.compile(r"[a-z]{1,24}(?:[_.-][a-z]{1,24}){0,7}")
_HEADER_FORBIDDEN: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

UsageCallback = Callable[[UsageObservation], None]


class ProviderResponseError(Ds4ContextError, ValueError):
    """A provider answered 2xx with something that is not the documented response shape."""


class ProviderTransportError(Ds4ContextError, RuntimeError):
    """Raised only by the adapter-boundary callable of :meth:`HttpTransport.payload_transport`.

    ``failure`` is the metadata-only :class:`TransportFailure`; the adapter turns the exception into its
    retryable ``transport-failed`` fallback.
    """

    def __init__(self, failure: TransportFailure) -> None:
        super().__init__("provider-transport-failed", f"{failure.kind}: {failure.reason}")
        self.failure = failure


def parse_retry_after_ms(headers: Mapping[str, str], *, now: float | None = None) -> int | None:
    """Milliseconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return math.ceil(value)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return int(raw) * 1000
    try:
        moment = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0, math.ceil((moment.timestamp() - current) * 1000))


def _error_type(body: bytes) -> str | None:
    """The provider's short error type/code (e.g. ``rate_limit_error``); never its message."""
    try:
        decoded = msgspec.json.decode(body[:65536])
    except msgspec.DecodeError:
        return None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    candidates: list[Any] = []
    if isinstance(error, dict):
        candidates += [error.get("code"), error.get("type")]
    elif isinstance(error, str):
        candidates.append(error)
    for candidate in candidates:
        if isinstance(candidate, str) and _ERROR_TYPE_PATTERN.fullmatch(candidate):
            return candidate
    return None


def _classify_status(status: int) -> FailureKind:
    if status == 429:
        return "rate-limited"
    if status in (401, 403):
        return "authentication"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "server-error"
    return "client-error"


class HttpTransport:
    """Base of the provider transports. Subclasses build the payload and parse the answer.

    ``client`` may be shared (the caller closes it); otherwise a client is created per call. The API key
    comes from ``api_key_env`` when that variable is set, else from ``api_key``; it is sent only in
    headers and never appears in results, errors or diagnostics.
    """

    endpoint_path: ClassVar[str] = ""

    def __init__(
        self,
        *,
        base_url: str,
        provider: str,
        api_key: str | None = None,
        api_key_env: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        privacy_policy: PrivacyPolicy | None = None,
        on_usage: UsageCallback | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ProviderConfigurationError("provider-invalid-base-url", "base_url must be an http(s) URL")
        if not isinstance(provider, str) or not provider.strip():
            raise ProviderConfigurationError("provider-invalid-id", "provider must be a non-empty id")
        if not (isinstance(timeout_s, int | float) and timeout_s > 0 and math.isfinite(timeout_s)):
            raise ProviderConfigurationError(
                "provider-invalid-timeout", "timeout_s must be a positive number"
            )
        self.base_url = base_url.rstrip("/")
        self.provider = provider
        self._api_key = api_key
        self._api_key_env = api_key_env
        self._client = client
        self._timeout_s = float(timeout_s)
        self._privacy_policy = privacy_policy
        self._on_usage = on_usage
        self._extra_headers = dict(extra_headers or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, base_url={self.base_url!r})"

    def _resolve_api_key(self) -> str | None:
        if self._api_key_env:
            from_env = os.environ.get(self._api_key_env)
            if from_env:
                return from_env
        return self._api_key

    # --- subclass hooks -------------------------------------------------------------------------------

    def build_payload(self, request: TransportRequest) -> dict[str, Any]:
        raise NotImplementedError

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def parse_response(self, body: Any) -> tuple[CompletionOutput, CompletionUsage | None]:
        raise NotImplementedError

    # --- the shared flow ------------------------------------------------------------------------------

    def _fallback(
        self,
        request: TransportRequest,
        code: str,
        failure: TransportFailure,
        started: float,
    ) -> TransportResult:
        return TransportResult(
            status="fallback",
            provider=self.provider,
            model=request.model.id,
            code=code,
            retryable=code == "transport-failed" and failure.transient,
            failure=failure,
            elapsed_ms=(time.monotonic() - started) * 1000,
        )

    def _report_usage(self, request: TransportRequest, usage: CompletionUsage | None) -> None:
        if usage is None or self._on_usage is None:
            return
        estimate = request.estimated_input_tokens
        if estimate is None:
            estimate = sum(estimate_message_tokens(message) for message in request.messages)
        observation = UsageObservation(
            provider=self.provider, model=request.model.id, estimated_input_tokens=estimate, usage=usage
        )
        # A broken calibration hook must not cost the user the answer.
        with contextlib.suppress(Exception):
            self._on_usage(observation)

    async def complete(self, request: TransportRequest) -> TransportResult:
        """Send ``request`` once. Never raises; failures come back as ``fallback`` results."""
        started = time.monotonic()
        try:
            # Flags do not survive into provider formats: local-only content becomes a marked span first.
            marked = msgspec.structs.replace(request, messages=mark_local_only_messages(request.messages))
            payload = self.build_payload(marked)
        except Exception as error:  # whatever the conversion raises, the user's turn must survive
            return self._fallback(
                request,
                "invalid-request",
                TransportFailure(
                    kind="invalid-request",
                    reason=f"the request could not be converted ({type(error).__name__})",
                ),
                started,
            )
        return await self._send(request, payload, started)

    async def _send(
        self, request: TransportRequest, payload: dict[str, Any], started: float
    ) -> TransportResult:
        try:
            sanitized = enforce_payload_privacy(payload, provider=self.provider, policy=self._privacy_policy)
        except PrivacyEnforcementError as error:
            return self._fallback(
                request,
                "privacy-enforcement-failed",
                TransportFailure(
                    kind="privacy-enforcement-failed", reason=f"privacy failed closed ({error.code})"
                ),
                started,
            )
        except Exception as error:
            return self._fallback(
                request,
                "privacy-enforcement-failed",
                TransportFailure(
                    kind="privacy-enforcement-failed",
                    reason=f"privacy failed closed ({type(error).__name__})",
                ),
                started,
            )
        prepared = self._prepare(sanitized.payload)
        if isinstance(prepared, TransportFailure):
            return self._fallback(request, "invalid-request", prepared, started)
        outcome = await self._post(*prepared)
        if isinstance(outcome, TransportFailure):
            return self._fallback(request, "transport-failed", outcome, started)
        try:
            output, usage = self.parse_response(outcome)
        except Exception as error:  # a provider answer of any shape must not raise out of complete()
            failure = TransportFailure(
                kind="invalid-response",
                reason=f"the provider's answer did not have the expected shape ({type(error).__name__})",
                http_status=200,
            )
            return self._fallback(request, "transport-failed", failure, started)
        self._report_usage(request, usage)
        return TransportResult(
            status="completed",
            provider=self.provider,
            model=request.model.id,
            output=output,
            usage=usage,
            elapsed_ms=(time.monotonic() - started) * 1000,
        )

    def payload_transport(self) -> Callable[[AdapterCompletionRequest], Awaitable[CompletionOutput]]:
        """This transport as the ``CompletionTransport`` of the core adapter contract.

        A ``RuntimeAdapter`` that builds provider payloads itself (``ds4_context_core.adapter``: privacy is
        enforced by ``complete_with_guards`` before the call) can send them over this HTTP client. The
        payload must be in this transport's wire format; ``model`` is filled in from the request. Privacy
        runs once more here, on the exact bytes that leave (sanitizing twice changes nothing). A failure
        raises :class:`ProviderTransportError`, which the adapter reports as ``transport-failed``.
        """

        async def send(request: AdapterCompletionRequest) -> CompletionOutput:
            payload = {**request.payload, "model": request.model}
            sanitized = enforce_payload_privacy(payload, provider=self.provider, policy=self._privacy_policy)
            prepared = self._prepare(sanitized.payload)
            if isinstance(prepared, TransportFailure):
                raise ProviderTransportError(prepared)  # raised outside any except: nothing chained
            outcome = await self._post(*prepared)
            if isinstance(outcome, TransportFailure):
                raise ProviderTransportError(outcome)
            try:
                output, _ = self.parse_response(outcome)
            except Exception as error:
                raise ProviderTransportError(
                    TransportFailure(
                        kind="invalid-response",
                        reason=f"unexpected answer shape ({type(error).__name__})",
                        http_status=200,
                    )
                ) from None
            return output

        return send

    def _prepare(self, payload: dict[str, Any]) -> tuple[httpx.Headers, bytes] | TransportFailure:
        """The encoded headers and body, or an ``invalid-request`` failure naming only the exception type.

        Headers are encoded here (not later inside httpx) so that a key httpx cannot send, such as one
        with a non-ASCII character or a line break, fails before any connection is made. The exception
        is not kept: it may hold the key or the payload (``UnicodeEncodeError.object``).
        """
        try:
            headers = httpx.Headers(
                {
                    "Content-Type": "application/json",
                    "Accept": "application/json",
                    **self._extra_headers,
                    **self.auth_headers(self._resolve_api_key()),
                }
            )
            if any(_HEADER_FORBIDDEN.search(part) for pair in headers.raw for part in pair):
                raise ValueError("control character in a header")
            body = msgspec.json.encode(payload)
        except Exception as error:
            error_name = type(error).__name__
        else:
            return headers, body
        return TransportFailure(
            kind="invalid-request", reason=f"the request could not be encoded ({error_name})"
        )

    async def _post(self, headers: httpx.Headers, body: bytes) -> Any:
        client = self._client or httpx.AsyncClient()
        try:
            response = await client.post(
                self.base_url + self.endpoint_path,
                content=body,
                headers=headers,
                timeout=self._timeout_s,
                follow_redirects=False,
            )
            content = response.content
        except httpx.TimeoutException:
            return TransportFailure(kind="timeout", reason=f"no answer within {self._timeout_s:g} s")
        except httpx.TransportError as error:
            return TransportFailure(
                kind="connection-error", reason=f"connection failed ({type(error).__name__})"
            )
        finally:
            if self._client is None:
                await client.aclose()
        status = response.status_code
        if status >= 300:
            kind = _classify_status(status)
            error_type = _error_type(content)
            detail = f" ({error_type})" if error_type else ""
            return TransportFailure(
                kind=kind,
                reason=f"HTTP {status}{detail}",
                http_status=status,
                retry_after_ms=parse_retry_after_ms(response.headers)
                if kind == "rate-limited" or status == 503
                else None,
            )
        if len(content) > PROVIDER_RESPONSE_MAX_BYTES:
            return TransportFailure(
                kind="invalid-response", reason="the answer is too large", http_status=status
            )
        try:
            return msgspec.json.decode(content)
        except msgspec.DecodeError:
            return TransportFailure(
                kind="invalid-response", reason="the answer is not valid JSON", http_status=status
            )
