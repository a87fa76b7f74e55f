"""Calibration priors: how far an estimator runs below a provider family's real count before any usage.

The planner divides its limits by the ratio actual / estimated. Before a session has reported usage
there is nothing to learn it from, and ratio 1 under-counts Claude by about 30 % (measured: see
``docs/core/tokens.md``), so a plan filled to the hard limit passes the window. A prior is the
measured ratio for the provider family and the estimator, rounded up to the calibration step:

| estimator | anthropic | openai | google, other |
|---|---|---|---|
| ``chars-v1`` | 1.45 (measured 1.26-1.42) | 1.15 (o200k runs 7-9 % above it, tool calls 9-14 %) | 1.45 |
| ``o200k_base`` | 1.30 (measured 1.24-1.29) | 1.00 (exact) | 1.30 |

Google and local models were not measured; they get the largest measured ratio, because a ratio too
low costs a failed call and a ratio too high only some unused context until usage corrects it. Any
other estimator (a host's own, a local model's ``tokenizer.json``) is taken as exact: prior 1.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from ds4_context_core._history._model import ModelDescriptor

from ._estimators import CHARS_V1, TIKTOKEN_O200K_BASE_V1

__all__ = [
    "PROVIDER_FAMILIES",
    "CalibrationPrior",
    "calibration_prior",
    "provider_family",
]

ProviderFamily = Literal["anthropic", "google", "openai", "other"]
PROVIDER_FAMILIES: Final = ("anthropic", "google", "openai", "other")

BPE_OPENAI_O200K_BASE_V1: Final = "openai-o200k_base-v1"

_O200K_VERSIONS: Final = frozenset({TIKTOKEN_O200K_BASE_V1, BPE_OPENAI_O200K_BASE_V1})
_PRIORS: Final[dict[str, dict[str, float]]] = {
    CHARS_V1: {"anthropic": 1.45, "openai": 1.15, "google": 1.45, "other": 1.45},
    "o200k": {"anthropic": 1.30, "openai": 1.0, "google": 1.30, "other": 1.30},
}
_MEASURED: Final = frozenset({(CHARS_V1, "anthropic"), (CHARS_V1, "openai"), ("o200k", "anthropic")})

# Provider names (as Pi and the engine write them) and model-id prefixes that identify a family. A
# router (openrouter, bedrock, vertex) is recognised by the model id it routes to.
_PROVIDERS: Final[dict[str, ProviderFamily]] = {
    "anthropic": "anthropic",
    "claude": "anthropic",
    "openai": "openai",
    "azure": "openai",
    "azure-openai": "openai",
    "openai-responses": "openai",
    "openai-codex": "openai",
    "google": "google",
    "gemini": "google",
    "google-gemini-cli": "google",
    "google-vertex": "google",
}
_MODEL_PREFIXES: Final[tuple[tuple[str, ProviderFamily], ...]] = (
    ("claude", "anthropic"),
    ("anthropic", "anthropic"),
    ("gpt", "openai"),
    ("chatgpt", "openai"),
    ("openai", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("gemini", "google"),
    ("google", "google"),
)


def provider_family(provider: str, model_id: str = "") -> ProviderFamily:
    """``anthropic``, ``openai``, ``google`` or ``other`` for a provider name and model id."""
    named = _PROVIDERS.get(provider.strip().lower()) if isinstance(provider, str) else None
    if named is not None:
        return named
    model = model_id.strip().lower() if isinstance(model_id, str) else ""
    for part in (model, model.rsplit("/", 1)[-1], model.rsplit(".", 1)[-1]):
        for prefix, family in _MODEL_PREFIXES:
            if part.startswith(prefix):
                return family
    return "other"


class CalibrationPrior(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The ratio assumed before usage is seen; ``measured`` says whether it comes from a measurement."""

    family: str
    estimator: str
    ratio: float
    measured: bool


def calibration_prior(model: ModelDescriptor, estimator_version: str = CHARS_V1) -> CalibrationPrior:
    """The prior ratio for ``model``'s provider family and an estimator (see the module's table)."""
    family = provider_family(model.provider, model.id)
    table = "o200k" if estimator_version in _O200K_VERSIONS else estimator_version
    ratios = _PRIORS.get(table)
    if ratios is None:
        return CalibrationPrior(family=family, estimator=estimator_version, ratio=1.0, measured=False)
    return CalibrationPrior(
        family=family,
        estimator=estimator_version,
        ratio=ratios[family],
        measured=(table, family) in _MEASURED or ratios[family] == 1.0,
    )
