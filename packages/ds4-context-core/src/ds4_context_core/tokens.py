"""Token estimation: ``chars-v1``, exact counters (OpenAI encodings, a local ``tokenizer.json``), caching,
calibration from provider usage, and the provider families' priors.

Every estimator is a callable ``CanonicalMessage -> int`` with ``version`` and ``estimate_text``::

    estimator = CachedEstimator(CharsEstimator())
    tokens = estimator(message)

Calibration learns how far an estimator is off from the usage a provider reports and can only make
limits smaller (``calibrated_limit``), never larger.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._tokens._calibration import (
    CALIBRATION_HYSTERESIS,
    CALIBRATION_MAX_RATIO,
    CALIBRATION_MAX_SAMPLES,
    CALIBRATION_MIN_SAMPLES,
    CALIBRATION_RATIO_SOURCES,
    CALIBRATION_RATIO_STEP,
    CALIBRATION_STATUSES,
    TOKEN_CALIBRATION_VERSION,
    TOKEN_ESTIMATE_CODES,
    CalibratedEstimator,
    CalibrationRatio,
    CalibrationSample,
    TokenCalibration,
    TokenCalibrator,
    calibrate_token_ratio,
    calibrated_limit,
    stable_ratio,
)
from ._tokens._estimators import (
    CHARS_V1,
    TIKTOKEN_ENCODING_NAME,
    TIKTOKEN_O200K_BASE_V1,
    TOKEN_CACHE_MAX_ENTRIES,
    CachedEstimator,
    CharsEstimator,
    TextEncoding,
    TiktokenEstimator,
    TokenEstimator,
    estimate_message_tokens,
    estimate_messages_tokens,
    estimate_text_tokens,
)
from ._tokens._exact import OPENAI_ENCODINGS, OpenAIEncodingEstimator, TokenizerJsonEstimator
from ._tokens._priors import PROVIDER_FAMILIES, CalibrationPrior, calibration_prior, provider_family
from ._tokens._usage import USAGE_READING_CODES, UsageReading, read_reported_input

__all__ = [
    "CALIBRATION_HYSTERESIS",
    "CALIBRATION_MAX_RATIO",
    "CALIBRATION_MAX_SAMPLES",
    "CALIBRATION_MIN_SAMPLES",
    "CALIBRATION_RATIO_SOURCES",
    "CALIBRATION_RATIO_STEP",
    "CALIBRATION_STATUSES",
    "CHARS_V1",
    "OPENAI_ENCODINGS",
    "PROVIDER_FAMILIES",
    "TIKTOKEN_ENCODING_NAME",
    "TIKTOKEN_O200K_BASE_V1",
    "TOKEN_CACHE_MAX_ENTRIES",
    "TOKEN_CALIBRATION_VERSION",
    "TOKEN_ESTIMATE_CODES",
    "USAGE_READING_CODES",
    "CachedEstimator",
    "CalibratedEstimator",
    "CalibrationPrior",
    "CalibrationRatio",
    "CalibrationSample",
    "CharsEstimator",
    "OpenAIEncodingEstimator",
    "TextEncoding",
    "TiktokenEstimator",
    "TokenCalibration",
    "TokenCalibrator",
    "TokenEstimator",
    "TokenizerJsonEstimator",
    "UsageReading",
    "calibrate_token_ratio",
    "calibrated_limit",
    "calibration_prior",
    "estimate_message_tokens",
    "estimate_messages_tokens",
    "estimate_text_tokens",
    "provider_family",
    "read_reported_input",
    "stable_ratio",
]

adopt_public_names(__name__, globals())
