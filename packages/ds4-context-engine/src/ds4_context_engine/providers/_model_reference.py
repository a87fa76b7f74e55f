"""``<provider>:<model>`` model references.

Only the first colon separates provider from model, because model ids carry colons of their own
(``ollama:hf.co/ns/repo:Q4_K_M``). A reference is refused, never repaired: no trimming, no case folding,
no guessing of a provider for a bare model name.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

import msgspec

from ._errors import ModelReferenceError, escape_echo

__all__ = [
    "MODEL_REFERENCE_ERROR_CODES",
    "MODEL_REFERENCE_MAX_BYTES",
    "RETIRED_MODEL_ALIASES",
    "ModelReference",
    "parse_model_reference",
]

# The longest realistic reference, ollama:hf.co/<ns 32>/<repo 96>:<quant 16>, is 159 bytes.
MODEL_REFERENCE_MAX_BYTES: Final = 160

# Tier aliases resolve to a different model over time; a reference must name one exact model.
RETIRED_MODEL_ALIASES: Final = ("haiku", "opus", "sonnet")

MODEL_REFERENCE_ERROR_CODES: Final = (
    "model-reference-control-character",
    "model-reference-empty",
    "model-reference-invalid-provider",
    "model-reference-missing-model",
    "model-reference-missing-separator",
    "model-reference-not-a-string",
    "model-reference-not-canonical",
    "model-reference-not-trimmed",
    "model-reference-retired-alias",
    "model-reference-too-long",
)

_PROVIDER_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _fail(code: str, reason: str, text: str) -> ModelReferenceError:
    return ModelReferenceError(code, f"invalid model reference {escape_echo(text)}: {reason}")


def _first_refused_character(text: str) -> str | None:
    for char in text:
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            return char
    return None


def _split(text: object) -> tuple[str, str]:
    if not isinstance(text, str):
        raise ModelReferenceError(
            "model-reference-not-a-string",
            f"a model reference must be a string, not {type(text).__name__}",
        )
    if not text:
        raise ModelReferenceError("model-reference-empty", "a model reference must not be empty")
    if len(text.encode("utf-8", "surrogatepass")) > MODEL_REFERENCE_MAX_BYTES:
        raise _fail("model-reference-too-long", f"longer than {MODEL_REFERENCE_MAX_BYTES} UTF-8 bytes", text)
    refused = _first_refused_character(text)
    if refused is not None:
        raise _fail(
            "model-reference-control-character",
            f"contains the control or format character U+{ord(refused):04X}",
            text,
        )
    if text.strip() != text:
        raise _fail("model-reference-not-trimmed", "leading or trailing whitespace is not allowed", text)
    provider, separator, model = text.partition(":")
    if not separator:
        if text.lower() in RETIRED_MODEL_ALIASES:
            raise _fail(
                "model-reference-retired-alias",
                "tier aliases are retired; use <provider>:<exact model id>, e.g. anthropic:claude-sonnet-4-5",
                text,
            )
        raise _fail("model-reference-missing-separator", "expected <provider>:<model>", text)
    if not _PROVIDER_PATTERN.fullmatch(provider):
        raise _fail(
            "model-reference-invalid-provider",
            "the provider must start with a letter or digit and contain only letters, digits, '.', '_', '-'",
            text,
        )
    if not model:
        raise _fail("model-reference-missing-model", "the model id after the first ':' is empty", text)
    if model.strip() != model:
        raise _fail("model-reference-not-trimmed", "the model id has surrounding whitespace", text)
    if model.lower() in RETIRED_MODEL_ALIASES:
        raise _fail(
            "model-reference-retired-alias",
            f"tier aliases are retired; use {provider}:<exact model id>",
            text,
        )
    return provider, model


class ModelReference(msgspec.Struct, frozen=True, kw_only=True):
    """A validated ``<provider>:<model>`` reference.

    Built by :func:`parse_model_reference`, or directly from parts; either way the parts must spell the
    canonical reference back exactly (``parse(provider + ":" + model)`` gives the same parts).
    """

    provider: str
    model: str

    def __post_init__(self) -> None:
        if not isinstance(self.provider, str) or not isinstance(self.model, str):
            raise ModelReferenceError(
                "model-reference-not-a-string", "provider and model must both be strings"
            )
        spelled = f"{self.provider}:{self.model}"
        if _split(spelled) != (self.provider, self.model):
            raise _fail(
                "model-reference-not-canonical",
                "provider and model do not spell a canonical reference (the provider may not contain ':')",
                spelled,
            )

    @property
    def reference(self) -> str:
        """The canonical spelling, ``provider:model``."""
        return f"{self.provider}:{self.model}"

    def __str__(self) -> str:
        return self.reference


def parse_model_reference(text: str) -> ModelReference:
    """Parse ``<provider>:<model>``; a malformed reference raises :class:`ModelReferenceError`."""
    provider, model = _split(text)
    return ModelReference(provider=provider, model=model)
