"""Reading an HTTP answer with a cap on its decoded size, decoding gzip and deflate ourselves.

httpx decodes a whole network chunk at once, so one 64 KiB chunk of a gzip bomb may grow to ~64 MiB
before any cap is looked at. Here the raw bytes are read one chunk at a time and decompressed at most
``_STEP`` bytes at a time (``max_length``), so no more than the cap plus one step is ever held, however
well the body compresses, and a flood is cut as soon as the cap is passed.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Final

import httpx

from ds4_context_engine._exceptions import BodyTooLargeError, UndecodableBodyError

__all__ = ["ACCEPT_ENCODING", "BodyTooLargeError", "UndecodableBodyError", "iter_bounded", "read_bounded"]

# Only what we decode ourselves may be offered: a server that answers in brotli or zstd anyway is refused.
ACCEPT_ENCODING: Final = "gzip, deflate"
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
_STEP: Final = 1024 * 1024


class _Decoder:
    """One content coding, decoded in pieces of at most ``_STEP`` bytes."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._zlib: zlib._Decompress | None = None
        if coding == "gzip":
            self._zlib = zlib.decompressobj(_GZIP_WBITS)

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``data``; the caller stops pulling once its cap is passed."""
        if self._coding == "identity":
            yield data
            return
        if self._zlib is None:  # deflate: zlib-wrapped as the RFC says, or raw as some servers send it
            wrapped = not data or (data[0] & 0x0F) == 8
            self._zlib = zlib.decompressobj() if wrapped else zlib.decompressobj(-zlib.MAX_WBITS)
        pending = data
        while pending:
            try:
                piece = self._zlib.decompress(pending, _STEP)
            except zlib.error:
                raise UndecodableBodyError from None
            pending = self._zlib.unconsumed_tail
            if piece:
                yield piece


def _coding(response: httpx.Response) -> str:
    codings = [
        part.strip().lower()
        for part in response.headers.get("content-encoding", "").split(",")
        if part.strip() and part.strip().lower() != "identity"
    ]
    if not codings:
        return "identity"
    if len(codings) == 1 and codings[0] in ("gzip", "x-gzip"):
        return "gzip"
    if codings == ["deflate"]:
        return "deflate"
    raise UndecodableBodyError


def _declared_length(response: httpx.Response) -> int | None:
    raw = response.headers.get("content-length")
    if raw is None or not raw.strip().isdigit():
        return None
    return int(raw.strip())


async def iter_bounded(
    response: httpx.Response, limit: int, *, truncate: bool = False
) -> AsyncIterator[bytes]:
    """The decoded body of a streamed ``response`` piece by piece, never more than ``limit`` bytes.

    Past the limit: :class:`BodyTooLargeError` before the piece that passes it is handed out (a declared
    Content-Length over the limit raises before anything is read), or with ``truncate`` the rest of the
    limit and the end. The raw bytes count against the limit too, so a body that decodes to nothing
    cannot stream forever. An encoding we did not offer, or bytes that do not decode under it, raise
    :class:`UndecodableBodyError`.
    """
    decoder = _Decoder(_coding(response))
    declared = _declared_length(response)
    if declared is not None and declared > limit and not truncate:
        raise BodyTooLargeError
    decoded = raw_total = 0
    async for chunk in response.aiter_raw():
        raw_total += len(chunk)
        for piece in decoder.decode(chunk):
            decoded += len(piece)
            if decoded > limit or raw_total > limit:
                if not truncate:
                    raise BodyTooLargeError
                yield piece[: max(0, len(piece) - (decoded - limit))]
                return
            yield piece


async def read_bounded(response: httpx.Response, limit: int, *, truncate: bool = False) -> bytearray:
    """The whole decoded body of a streamed ``response`` under the rules of :func:`iter_bounded`."""
    body = bytearray()
    async for piece in iter_bounded(response, limit, truncate=truncate):
        body += piece
    return body  # not copied into bytes: the parsers read a bytearray as it is
