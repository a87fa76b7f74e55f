"""Token estimation: ``chars-v1``, an optional tokenizer (tiktoken ``o200k_base``), caching, calibration.

Every estimator is a callable ``CanonicalMessage -> int`` with ``version`` and ``estimate_text``::

    estimator = CachedEstimator(CharsEstimator())
    tokens = estimator(message)

Calibration learns how far an estimator is off from the usage a provider reports and can only make
limits smaller (``calibrated_limit``), never larger.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._tokens._calibration import (
    CALIBRATION_MAX_RATIO,
    CALIBRATION_MAX_SAMPLES,
    CALIBRATION_MIN_SAMPLES,
    CALIBRATION_STATUSES,
    TOKEN_CALIBRATION_VERSION,
    TOKEN_ESTIMATE_CODES,
    CalibratedEstimator,
    CalibrationSample,
    TokenCalibration,
    TokenCalibrator,
    calibrate_token_ratio,
    calibrated_limit,
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

__all__ = [
    "CALIBRATION_MAX_RATIO",
    "CALIBRATION_MAX_SAMPLES",
    "CALIBRATION_MIN_SAMPLES",
    "CALIBRATION_STATUSES",
    "CHARS_V1",
    "TIKTOKEN_ENCODING_NAME",
    "TIKTOKEN_O200K_BASE_V1",
    "TOKEN_CACHE_MAX_ENTRIES",
    "TOKEN_CALIBRATION_VERSION",
    "TOKEN_ESTIMATE_CODES",
    "CachedEstimator",
    "CalibratedEstimator",
    "CalibrationSample",
    "CharsEstimator",
    "TextEncoding",
    "TiktokenEstimator",
    "TokenCalibration",
    "TokenCalibrator",
    "TokenEstimator",
    "calibrate_token_ratio",
    "calibrated_limit",
    "estimate_message_tokens",
    "estimate_messages_tokens",
    "estimate_text_tokens",
]

adopt_public_names(__name__, globals())
