"""Token estimators: ``chars-v1``, an optional tiktoken ``o200k_base`` one, and a bounded cache.

``chars-v1``: estimate = ceil(chars / 4) + 8 per message + 4 per block + 1024 per image, where chars
counts the text a provider would see: text, thinking, tool names and stable-JSON arguments, tool result
content, reference paths and ids, and the stable JSON of opaque provider values.

The tokenizer estimator keeps the same per-message, per-block and per-image overheads and replaces
ceil(chars / 4) with the tokenizer's count of the same text, so the two are comparable.

Every estimator is a callable ``CanonicalMessage -> int``, the shape the planner takes.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol, runtime_checkable

import msgspec

from ds4_context_core._exceptions import MissingExtraError, TokenEstimateError
from ds4_context_core._history._model import (
    ArtifactReferenceBlock,
    CanonicalBlock,
    CanonicalMessage,
    FileReferenceBlock,
    ImageBlock,
    OpaqueProviderBlock,
    SummaryReferenceBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._history._stable_json import stable_json

__all__ = [
    "CHARS_V1",
    "TIKTOKEN_ENCODING_NAME",
    "TIKTOKEN_O200K_BASE_V1",
    "TOKEN_CACHE_MAX_ENTRIES",
    "CachedEstimator",
    "CharsEstimator",
    "TextEncoding",
    "TiktokenEstimator",
    "TokenEstimator",
    "estimate_message_tokens",
    "estimate_messages_tokens",
    "estimate_text_tokens",
]

CHARS_V1: Final = "chars-v1"
TIKTOKEN_O200K_BASE_V1: Final = "tiktoken-o200k_base-v1"
TIKTOKEN_ENCODING_NAME: Final = "o200k_base"
TOKEN_CACHE_MAX_ENTRIES: Final = 65_536

_CHARS_PER_TOKEN: Final = 4
_PER_MESSAGE: Final = 8
_PER_BLOCK: Final = 4
_PER_IMAGE: Final = 1024


@runtime_checkable
class TokenEstimator(Protocol):
    """Estimates tokens of canonical messages; ``version`` names the method (``chars-v1``, ...)."""

    @property
    def version(self) -> str: ...

    def estimate_text(self, text: str) -> int: ...

    def __call__(self, message: CanonicalMessage) -> int: ...


@runtime_checkable
class TextEncoding(Protocol):
    """What we need of a tokenizer: tiktoken's ``Encoding`` has it (special tokens are plain text)."""

    def encode_ordinary(self, text: str) -> Sequence[int]: ...


def estimate_text_tokens(text: str) -> int:
    """``chars-v1`` for bare text: ceil(len(text) / 4)."""
    return -(-len(text) // _CHARS_PER_TOKEN)


def _block_text(block: CanonicalBlock) -> str:
    """The text of a block a provider would see (images have none: they cost a flat amount)."""
    match block:
        case TextBlock(text=text):
            return text
        case ThinkingBlock(thinking=thinking):
            return thinking
        case ToolCallBlock(name=name, arguments=arguments):
            return name + stable_json(arguments)
        case ToolResultBlock(content=content, tool_name=tool_name):
            return content + tool_name
        case FileReferenceBlock(path=path):
            return path
        case ArtifactReferenceBlock(artifact_id=artifact_id):
            return artifact_id
        case SummaryReferenceBlock(summary_id=summary_id):
            return summary_id
        case OpaqueProviderBlock(value=value):
            return stable_json(value)
        case _:
            return ""


def _block_chars(block: CanonicalBlock) -> int:
    kind = type(block)
    # The three common kinds skip the string concatenation of _block_text.
    if kind is TextBlock:
        return len(block.text)  # type: ignore[union-attr]
    if kind is ToolResultBlock:
        return len(block.content) + len(block.tool_name)  # type: ignore[union-attr]
    if kind is ThinkingBlock:
        return len(block.thinking)  # type: ignore[union-attr]
    return len(_block_text(block))


def _overhead(message: CanonicalMessage) -> int:
    images = sum(1 for block in message.blocks if type(block) is ImageBlock)
    return _PER_MESSAGE + _PER_BLOCK * len(message.blocks) + _PER_IMAGE * images


def estimate_message_tokens(message: CanonicalMessage) -> int:
    """The ``chars-v1`` estimate for one message."""
    chars = sum(_block_chars(block) for block in message.blocks)
    return -(-chars // _CHARS_PER_TOKEN) + _overhead(message)


_sorted_encoder = msgspec.json.Encoder(order="sorted")
_FLAT_VALUE_TYPES: Final = frozenset({str, int, bool})
_STRING_TYPE: Final = frozenset({str})


def flat_arguments(arguments: object) -> bool:
    """String keys and str/int/bool values: the usual shape of tool arguments.

    For such a dict msgspec's sorted encoding is exactly the stable JSON, and stable JSON cannot fail
    on it except for a key with a lone surrogate, which msgspec rejects as well.
    """
    if type(arguments) is not dict:
        return False
    # One loop over the (usually few) items: cheaper than building two sets of types.
    for key, value in arguments.items():
        if type(key) is not str or type(value) not in _FLAT_VALUE_TYPES:
            return False
    return True


def _argument_chars(arguments: object) -> int:
    if flat_arguments(arguments):
        try:
            encoded = _sorted_encoder.encode(arguments)
        except (TypeError, ValueError, OverflowError):  # an int beyond 64 bits, a lone surrogate
            return len(stable_json(arguments))
        return len(encoded) if encoded.isascii() else len(encoded.decode("utf-8"))
    return len(stable_json(arguments))


def fast_chars_v1(message: CanonicalMessage) -> int:
    """``estimate_message_tokens`` with the same result, for hot loops such as the planner's.

    One pass over the blocks with exact-type dispatch, and plain tool arguments measured through
    msgspec instead of the generic stable-JSON walk.
    """
    chars = 0
    images = 0
    for block in message.blocks:
        kind = type(block)
        if kind is TextBlock:
            chars += len(block.text)  # type: ignore[union-attr]
        elif kind is ToolResultBlock:
            chars += len(block.content) + len(block.tool_name)  # type: ignore[union-attr]
        elif kind is ToolCallBlock:
            chars += len(block.name) + _argument_chars(block.arguments)  # type: ignore[union-attr]
        elif kind is ThinkingBlock:
            chars += len(block.thinking)  # type: ignore[union-attr]
        elif kind is ImageBlock:
            images += 1
        else:
            chars += len(_block_text(block))
    return (
        -(-chars // _CHARS_PER_TOKEN) + _PER_MESSAGE + _PER_BLOCK * len(message.blocks) + _PER_IMAGE * images
    )


def estimate_messages_tokens(
    messages: Iterable[CanonicalMessage], estimator: TokenEstimator | None = None
) -> int:
    """Sum of per-message estimates (``chars-v1`` unless another estimator is given)."""
    estimate: Callable[[CanonicalMessage], int] = estimate_message_tokens if estimator is None else estimator
    return sum(map(estimate, messages))


class CharsEstimator:
    """The ``chars-v1`` estimator as an object, for places that take any ``TokenEstimator``."""

    __slots__ = ()

    @property
    def version(self) -> str:
        return CHARS_V1

    def estimate_text(self, text: str) -> int:
        return estimate_text_tokens(text)

    def __call__(self, message: CanonicalMessage) -> int:
        return estimate_message_tokens(message)


def _load_tiktoken_encoding(name: str) -> TextEncoding:
    try:
        tiktoken = importlib.import_module("tiktoken")
    except ImportError:
        raise MissingExtraError("tiktoken", "ds4-context-core", "tiktoken") from None
    try:
        encoding: TextEncoding = tiktoken.get_encoding(name)
    except Exception as error:  # tiktoken downloads encoding files on first use; offline that fails
        raise TokenEstimateError(
            "token-encoding-unavailable",
            f"tiktoken could not load the {name[:40]!r} encoding ({type(error).__name__}); "
            "load it yourself and pass it as TiktokenEstimator(encoding)",
        ) from None
    return encoding


class TiktokenEstimator:
    """Counts text with a tokenizer (tiktoken ``o200k_base`` by default, imported on first use).

    Pass ``encoding`` to inject an already loaded tokenizer (any object with ``encode_ordinary``), for
    instance one built from a local BPE file where the encoding files cannot be downloaded. Without it,
    a missing tiktoken raises ``MissingExtraError`` naming the ``tiktoken`` extra.
    """

    __slots__ = ("_encoding", "_encoding_name", "_lock")

    def __init__(
        self, encoding: TextEncoding | None = None, *, encoding_name: str = TIKTOKEN_ENCODING_NAME
    ) -> None:
        if encoding is not None and not callable(getattr(encoding, "encode_ordinary", None)):
            raise TokenEstimateError(
                "token-encoding-invalid", "the injected encoding has no encode_ordinary method"
            )
        self._encoding = encoding
        self._encoding_name = encoding_name
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        if self._encoding_name == TIKTOKEN_ENCODING_NAME:
            return TIKTOKEN_O200K_BASE_V1
        return f"tiktoken-{self._encoding_name}-v1"

    def _tokenizer(self) -> TextEncoding:
        encoding = self._encoding
        if encoding is None:
            with self._lock:
                if self._encoding is None:
                    self._encoding = _load_tiktoken_encoding(self._encoding_name)
                encoding = self._encoding
        return encoding

    def estimate_text(self, text: str) -> int:
        if not text:
            return 0
        tokens = self._tokenizer().encode_ordinary(text)
        try:
            return len(tokens)
        except TypeError:
            raise TokenEstimateError(
                "token-encoding-invalid", "the encoding did not return a token sequence"
            ) from None

    def __call__(self, message: CanonicalMessage) -> int:
        text = "".join(_block_text(block) for block in message.blocks)
        return self.estimate_text(text) + _overhead(message)


class CachedEstimator:
    """Caches another estimator's results per (message id, content hash), keeping at most ``max_entries``.

    The content hash covers role and blocks, so an edited message with an unchanged id is estimated
    again; the least recently used entry is dropped when the cache is full. Thread-safe.
    """

    __slots__ = ("_entries", "_estimator", "_lock", "_max_entries", "hits", "misses")

    def __init__(self, estimator: TokenEstimator, *, max_entries: int = TOKEN_CACHE_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._estimator = estimator
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, bytes], int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def version(self) -> str:
        return self._estimator.version

    def __len__(self) -> int:
        return len(self._entries)

    def estimate_text(self, text: str) -> int:
        return self._estimator.estimate_text(text)

    def __call__(self, message: CanonicalMessage) -> int:
        content = _content_hash(message)
        if content is None:  # content msgspec cannot encode: estimate, but do not cache
            return self._estimator(message)
        key = (message.id, content)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return cached
        estimate = self._estimator(message)
        with self._lock:
            self.misses += 1
            self._entries[key] = estimate
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return estimate


_content_encoder = msgspec.json.Encoder()


def _content_hash(message: CanonicalMessage) -> bytes | None:
    try:
        content = _content_encoder.encode(message.blocks)
    except (TypeError, ValueError, OverflowError):
        return None
    digest = hashlib.blake2b(content, digest_size=16)
    digest.update(b"\0" + message.role.encode("utf-8", "replace"))
    return digest.digest()
