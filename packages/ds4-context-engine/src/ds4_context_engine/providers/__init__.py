"""Provider-side names: model references, local provider discovery and HTTP transports."""

from ._errors import ECHO_MAX_BYTES, LocalProviderError, ModelReferenceError, ProviderConfigurationError
from ._model_reference import (
    MODEL_REFERENCE_ERROR_CODES,
    MODEL_REFERENCE_MAX_BYTES,
    RETIRED_MODEL_ALIASES,
    ModelReference,
    parse_model_reference,
)

__all__ = [
    "ECHO_MAX_BYTES",
    "MODEL_REFERENCE_ERROR_CODES",
    "MODEL_REFERENCE_MAX_BYTES",
    "RETIRED_MODEL_ALIASES",
    "LocalProviderError",
    "ModelReference",
    "ModelReferenceError",
    "ProviderConfigurationError",
    "parse_model_reference",
]
