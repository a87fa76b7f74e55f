"""What every HTTP transport shares: privacy right before sending, failure classification, usage reports.

A transport sends the core contract's ``CompletionRequest`` and returns its ``CompletionResult``: the one
completion path from plan to provider. It never raises from :meth:`HttpTransport.complete`. Whatever goes
wrong (a payload that cannot be converted, privacy enforcement, the network, the provider, a malformed
answer) comes back as a ``CompletionFallback`` with a code from ``COMPLETION_FALLBACK_CODES``, so the
caller keeps the user's turn and canonical history is untouched.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final, Self, TypeVar

import anyio
import httpx
import msgspec
from anyio.lowlevel import RunVar

from ds4_context_core import PrivacyEnforcementError, estimate_message_tokens
from ds4_context_core.adapter import (
    CompletionCompleted,
    CompletionFailure,
    CompletionFallback,
    CompletionFallbackCode,
    CompletionRequest,
    CompletionResult,
    CompletionUsage,
    completion_fallback,
    validate_completion_request,
)
from ds4_context_core.privacy import (
    PrivacyCache,
    PrivacyPolicy,
    PrivacyResult,
    enforce_payload_privacy,
    mark_local_only_messages,
)
from ds4_context_engine._exceptions import (
    ProviderResponseError,
    ProviderTransportError,
    StreamCallbackError,
    StreamFailureError,
)

from ._bounded import ACCEPT_ENCODING, BodyTooLargeError, UndecodableBodyError, iter_bounded, read_bounded
from ._errors import ProviderConfigurationError
from ._failures import parse_retry_after_ms, status_failure
from ._sse import SseParser
from ._streaming import (
    StreamAssembler,
    StreamCallback,
    UsageReport,
    callback_failure,
    deliver,
)
from ._types import CompletionOutput, UsageObservation

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_S",
    "PROVIDER_RESPONSE_MAX_BYTES",
    "HttpTransport",
    "ProviderResponseError",
    "ProviderTransportError",
    "UsageCallback",
    "parse_retry_after_ms",
]

_Shape = TypeVar("_Shape")

DEFAULT_REQUEST_TIMEOUT_S: Final = 120.0
PROVIDER_RESPONSE_MAX_BYTES: Final = 32 * 1024 * 1024
_HEADER_FORBIDDEN: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

UsageCallback = Callable[[UsageObservation], None]


def answer_as(body: Any, shape: type[_Shape]) -> _Shape:
    """``body`` (decoded JSON) read as ``shape``; any other shape is :class:`ProviderResponseError`."""
    try:
        return msgspec.convert(body, shape)
    except (msgspec.ValidationError, RecursionError):
        raise ProviderResponseError(
            "provider-response-invalid", "the answer does not have the documented shape"
        ) from None


def _elapsed_ms(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _fallback(code: CompletionFallbackCode, failure: CompletionFailure, started: float) -> CompletionFallback:
    return completion_fallback(code, failure=failure, elapsed_ms=_elapsed_ms(started))


class HttpTransport:
    """Base of the provider transports. Subclasses build the payload and parse the answer.

    ``client`` may be shared (the caller closes it); otherwise the transport opens one client on first
    use and reuses it (and its connections) for every later call in that event loop, until
    :meth:`aclose` or the end of an ``async with transport:`` block. ``timeout_s`` is a wall-clock
    deadline for each call: connecting, sending and reading the whole answer. The answer is read
    streamed and refused once its decoded size passes ``PROVIDER_RESPONSE_MAX_BYTES``. The API key
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
        # One client per transport and event loop, reused by every call (a client cannot cross loops).
        self._owned_client: RunVar[httpx.AsyncClient | None] = RunVar(f"ds4-http-client-{id(self)}")
        self._timeout_s = float(timeout_s)
        self._privacy_policy = privacy_policy
        # Each call sends the whole history again: messages this transport sanitized before are reused.
        self._privacy_cache = PrivacyCache()
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

    def build_payload(self, request: CompletionRequest) -> dict[str, Any]:
        """The wire payload for a request that carries canonical ``messages`` (already marked)."""
        raise NotImplementedError

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def parse_response(self, body: Any) -> tuple[CompletionOutput, CompletionUsage | None]:
        raise NotImplementedError

    def stream_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` asking for a streamed (SSE) answer."""
        return {**payload, "stream": True}

    def stream_assembler(self) -> StreamAssembler:
        """A fresh assembler for this provider's stream events."""
        raise NotImplementedError

    # --- the shared flow ------------------------------------------------------------------------------

    def _wire_payload(self, request: CompletionRequest) -> dict[str, Any]:
        """Canonical messages converted into this transport's format, or the sender's own payload."""
        if not request.messages:
            return {**request.payload, "model": request.model}
        # Flags do not survive into provider formats: local-only content becomes a marked span first.
        marked = msgspec.structs.replace(request, messages=mark_local_only_messages(request.messages))
        return self.build_payload(marked)

    def _enforce_privacy(self, payload: dict[str, Any]) -> PrivacyResult:
        """``payload`` sanitized for this provider (raises :class:`PrivacyEnforcementError`: send nothing).

        Messages sanitized by an earlier call of this transport under the same policy come from its
        privacy cache; the result is the same as without it.
        """
        return enforce_payload_privacy(
            payload, provider=self.provider, policy=self._privacy_policy, cache=self._privacy_cache
        )

    def _report_usage(self, request: CompletionRequest, usage: CompletionUsage | None) -> None:
        if usage is None or self._on_usage is None:
            return
        estimate = request.estimated_input_tokens
        if estimate is None:
            if not request.messages:
                return  # a sender-built payload: nothing of ours to calibrate against
            estimate = sum(estimate_message_tokens(message) for message in request.messages)
        observation = UsageObservation(
            provider=self.provider, model=request.model, estimated_input_tokens=estimate, usage=usage
        )
        # A broken calibration hook must not cost the user the answer.
        with contextlib.suppress(Exception):
            self._on_usage(observation)

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        """Send ``request`` once. Never raises; failures come back as ``CompletionFallback`` results.

        The payload is built (canonical messages converted, or the sender's payload taken as it is), then
        privacy is enforced on it exactly once, immediately before it is encoded and sent.
        """
        return await self._complete(request, None)

    async def stream(self, request: CompletionRequest, on_event: StreamCallback) -> CompletionResult:
        """Send ``request`` asking for a streamed answer; ``on_event`` gets each delta as it arrives.

        Returns what :meth:`complete` returns, the whole answer included. A stream that ends before the
        provider's final event is a retryable ``connection-error``; the deltas already delivered are
        only a preview, the result is what counts. A raising ``on_event`` ends the call with a
        ``client-error``. The size cap and the deadline cover the whole stream.
        """
        return await self._complete(request, on_event)

    async def _complete(
        self, request: CompletionRequest, on_event: StreamCallback | None
    ) -> CompletionResult:
        started = time.monotonic()
        try:
            payload = self._wire_payload(validate_completion_request(request))
            if on_event is not None:
                payload = self.stream_payload(payload)
        except Exception as error:  # whatever the conversion raises, the user's turn must survive
            failure = CompletionFailure(
                kind="invalid-request", reason=f"the request could not be converted ({type(error).__name__})"
            )
            return _fallback("invalid-request", failure, started)
        try:
            sanitized = self._enforce_privacy(payload)
        except Exception as error:
            name = error.code if isinstance(error, PrivacyEnforcementError) else type(error).__name__
            failure = CompletionFailure(
                kind="privacy-enforcement-failed", reason=f"privacy failed closed ({name})"
            )
            return _fallback("privacy-enforcement-failed", failure, started)
        outcome = await self._exchange(sanitized.payload, on_event)
        if isinstance(outcome, CompletionFailure):
            code: CompletionFallbackCode = (
                "invalid-request" if outcome.kind == "invalid-request" else "transport-failed"
            )
            return _fallback(code, outcome, started)
        output, usage = outcome
        if on_event is not None and usage is not None:
            try:
                on_event(UsageReport(usage=usage))
            except Exception as error:
                return _fallback("transport-failed", callback_failure(error), started)
        self._report_usage(request, usage)
        return CompletionCompleted(
            output=output, privacy=sanitized.summary(), usage=usage, elapsed_ms=_elapsed_ms(started)
        )

    def payload_transport(self) -> Callable[[CompletionRequest], Awaitable[CompletionOutput]]:
        """This transport as the ``CompletionTransport`` of the core adapter contract.

        A ``RuntimeAdapter`` that builds provider payloads itself sends them over this HTTP client:
        ``complete_with_guards`` enforces privacy (with the adapter's policy) immediately before calling
        it, so this callable sends the sanitized payload as it is, with ``model`` filled in, and does not
        enforce privacy a second time. The payload must be in this transport's wire format. A failure
        raises :class:`ProviderTransportError`, which the adapter reports as ``transport-failed``.
        """

        async def send(request: CompletionRequest) -> CompletionOutput:
            if request.messages:  # not an adapter's payload: converting here would skip the adapter's privacy
                raise ProviderTransportError(
                    CompletionFailure(
                        kind="invalid-request", reason="the adapter boundary sends payloads only"
                    )
                )
            outcome = await self._exchange({**request.payload, "model": request.model})
            if isinstance(outcome, CompletionFailure):
                raise ProviderTransportError(outcome)  # raised outside any except: nothing chained
            return outcome[0]

        return send

    async def _exchange(
        self, payload: dict[str, Any], on_event: StreamCallback | None = None
    ) -> tuple[CompletionOutput, CompletionUsage | None] | CompletionFailure:
        """Encode, post and parse a sanitized payload; a failure comes back, never raises."""
        prepared = self._prepare(payload, streaming=on_event is not None)
        if isinstance(prepared, CompletionFailure):
            return prepared
        outcome = await self._post(*prepared, on_event)
        if isinstance(outcome, CompletionFailure):
            return outcome
        try:
            return self.parse_response(outcome)
        except Exception as error:  # a provider answer of any shape must not raise out of complete()
            return CompletionFailure(
                kind="invalid-response",
                reason=f"the provider's answer did not have the expected shape ({type(error).__name__})",
                http_status=200,
            )

    def _prepare(
        self, payload: dict[str, Any], *, streaming: bool = False
    ) -> tuple[httpx.Headers, bytes] | CompletionFailure:
        """The encoded headers and body, or an ``invalid-request`` failure naming only the exception type.

        Headers are encoded here (not later inside httpx) so that a key httpx cannot send, such as one
        with a non-ASCII character or a line break, fails before any connection is made. The exception
        is not kept: it may hold the key or the payload (``UnicodeEncodeError.object``).
        """
        try:
            headers = httpx.Headers(
                {
                    "Content-Type": "application/json",
                    "Accept": "text/event-stream" if streaming else "application/json",
                    **self._extra_headers,
                    **self.auth_headers(self._resolve_api_key()),
                    # Only codings read_bounded decodes itself, with the size cap on the decoded bytes.
                    "Accept-Encoding": ACCEPT_ENCODING,
                }
            )
            if any(_HEADER_FORBIDDEN.search(part) for pair in headers.raw for part in pair):
                raise ValueError("control character in a header")
            body = msgspec.json.encode(payload)
        except Exception as error:
            error_name = type(error).__name__
        else:
            return headers, body
        return CompletionFailure(
            kind="invalid-request", reason=f"the request could not be encoded ({error_name})"
        )

    async def _post(
        self,
        headers: httpx.Headers,
        body: bytes,
        on_event: StreamCallback | None = None,
        *,
        path: str | None = None,
    ) -> Any:
        """The decoded JSON answer or a failure; the whole exchange runs under the ``timeout_s`` deadline.

        httpx's own timeout is per network operation: a server that drips a byte now and then never trips
        it. The deadline here is wall-clock time for connecting, sending and reading the whole answer.
        """
        with anyio.move_on_after(self._timeout_s) as scope:
            outcome = await self._request(headers, body, on_event, path)
        if scope.cancelled_caught:
            return CompletionFailure(kind="timeout", reason=f"no answer within {self._timeout_s:g} s")
        return outcome

    async def _request(
        self, headers: httpx.Headers, body: bytes, on_event: StreamCallback | None, path: str | None = None
    ) -> Any:
        """``path`` (default ``endpoint_path``) names another endpoint of the same API (count tokens)."""
        try:
            async with self._http_client().stream(
                "POST",
                self.base_url + (self.endpoint_path if path is None else path),
                content=body,
                headers=headers,
                timeout=self._timeout_s,
                follow_redirects=False,
            ) as response:
                if response.status_code >= 300:
                    return await status_failure(response)
                if on_event is not None:
                    return await self._read_stream(response, on_event)
                content = await read_bounded(response, PROVIDER_RESPONSE_MAX_BYTES)
        except BodyTooLargeError:
            return CompletionFailure(
                kind="invalid-response",
                reason=f"the answer is too large (over {PROVIDER_RESPONSE_MAX_BYTES} bytes decoded)",
                http_status=200,
            )
        except UndecodableBodyError:
            return CompletionFailure(
                kind="invalid-response",
                reason="the answer's Content-Encoding was not offered or does not decode",
                http_status=200,
            )
        except httpx.TimeoutException:
            return CompletionFailure(kind="timeout", reason=f"no answer within {self._timeout_s:g} s")
        except httpx.TransportError as error:
            return CompletionFailure(
                kind="connection-error", reason=f"connection failed ({type(error).__name__})"
            )
        except StreamFailureError as error:
            return error.failure
        except StreamCallbackError as error:
            return callback_failure(error.__cause__ or error)
        except httpx.HTTPError as error:  # the rest of the family: DecodingError, TooManyRedirects, ...
            return CompletionFailure(
                kind="invalid-response", reason=f"the answer could not be read ({type(error).__name__})"
            )
        except Exception as error:  # httpx.InvalidURL, a stream error: complete() still must not raise
            return CompletionFailure(
                kind="client-error", reason=f"the request could not be made ({type(error).__name__})"
            )
        try:
            return msgspec.json.decode(content)
        except (msgspec.DecodeError, RecursionError):  # RecursionError: JSON nested past the stack
            return CompletionFailure(
                kind="invalid-response", reason="the answer is not valid JSON", http_status=200
            )

    async def _read_stream(self, response: httpx.Response, on_event: StreamCallback) -> Any:
        """The assembled answer of an SSE stream, each delta handed to ``on_event`` on the way."""
        parser = SseParser()
        assembler = self.stream_assembler()
        async for piece in iter_bounded(response, PROVIDER_RESPONSE_MAX_BYTES):
            if deliver(parser.feed(piece), assembler, on_event):
                return assembler.final_body()
        if deliver(parser.finish(), assembler, on_event):
            return assembler.final_body()
        return CompletionFailure(
            kind="connection-error", reason="the stream ended before the answer was complete", http_status=200
        )

    # --- the HTTP client ------------------------------------------------------------------------------

    def _http_client(self) -> httpx.AsyncClient:
        """The caller's client, or the one this transport opened in the running event loop."""
        if self._client is not None:
            return self._client
        client = self._owned_client.get(None)
        if client is None or client.is_closed:
            client = httpx.AsyncClient()
            self._owned_client.set(client)
        return client

    async def aclose(self) -> None:
        """Close the HTTP client this transport opened (a client passed in stays the caller's to close).

        The transport stays usable: the next call opens a new client. A client belongs to the event loop
        it was opened in, so close the transport before that loop ends (or use ``async with``).
        """
        client = self._owned_client.get(None)
        if client is not None:
            self._owned_client.set(None)
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
