"""HTTP failures as metadata-only ``CompletionFailure`` records: status classes, error types, Retry-After."""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import httpx
import msgspec

from ds4_context_core.adapter import CompletionFailure, FailureKind

from ._bounded import UndecodableBodyError, read_bounded
from ._safe_codes import ERROR_TYPE_PATTERN

__all__ = ["ERROR_TYPE_PATTERN", "parse_retry_after_ms", "status_failure"]

_ERROR_BODY_MAX_BYTES: Final = 65536


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


def _error_type(body: bytes | bytearray) -> str | None:
    """The provider's short error type/code (e.g. ``rate_limit_error``); never its message."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    candidates: list[Any] = []
    if isinstance(error, dict):
        candidates += [error.get("code"), error.get("type")]
    elif isinstance(error, str):
        candidates.append(error)
    for candidate in candidates:
        if isinstance(candidate, str) and ERROR_TYPE_PATTERN.fullmatch(candidate):
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


async def status_failure(response: httpx.Response) -> CompletionFailure:
    """An HTTP error status as a failure, with the provider's short error type from the first 64 KiB."""
    status = response.status_code
    try:
        content = await read_bounded(response, _ERROR_BODY_MAX_BYTES, truncate=True)
    except UndecodableBodyError:
        content = bytearray()
    kind = _classify_status(status)
    error_type = _error_type(content)
    detail = f" ({error_type})" if error_type else ""
    return CompletionFailure(
        kind=kind,
        reason=f"HTTP {status}{detail}",
        http_status=status,
        retry_after_ms=parse_retry_after_ms(response.headers)
        if kind == "rate-limited" or status == 503
        else None,
    )
