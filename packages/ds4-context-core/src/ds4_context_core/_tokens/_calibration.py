"""Calibration of a token estimator against the usage providers report (``token-calibration-v1``).

ratio = median of actual / estimated over the samples that survive outlier rejection (modified z-score
on the median absolute deviation, threshold 3.5). The ratio is clamped to [1, CALIBRATION_MAX_RATIO]:
limits are divided by it, so calibration can only lower them, never raise them; a provider that
reports nonsense can shrink the budget at most fourfold.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from collections.abc import Iterable
from typing import Final, Literal

import msgspec

from ds4_context_core._exceptions import TokenEstimateError
from ds4_context_core._history._model import CanonicalMessage

from ._estimators import TokenEstimator

__all__ = [
    "CALIBRATION_MAX_RATIO",
    "CALIBRATION_MAX_SAMPLES",
    "CALIBRATION_MIN_SAMPLES",
    "CALIBRATION_STATUSES",
    "TOKEN_CALIBRATION_VERSION",
    "TOKEN_ESTIMATE_CODES",
    "CalibratedEstimator",
    "CalibrationSample",
    "TokenCalibration",
    "TokenCalibrator",
    "calibrate_token_ratio",
    "calibrated_limit",
]

TOKEN_CALIBRATION_VERSION: Final = "token-calibration-v1"  # noqa: S105 - a contract id, not a secret
CALIBRATION_MIN_SAMPLES: Final = 5
CALIBRATION_MAX_SAMPLES: Final = 200
CALIBRATION_MAX_RATIO: Final = 4
# Iglewicz and Hoaglin's cut-off for the modified z-score 0.6745 * |x - median| / MAD.
_OUTLIER_Z: Final = 3.5
CALIBRATION_STATUSES: Final = ("calibrated", "insufficient-samples")
TOKEN_ESTIMATE_CODES: Final = (
    "token-calibration-sample-invalid",
    "token-encoding-invalid",
    "token-encoding-unavailable",
)

CalibrationStatus = Literal["calibrated", "insufficient-samples"]


class CalibrationSample(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One provider call: our estimate of the input and the input tokens the provider reported."""

    estimated: int
    actual: int


class TokenCalibration(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The outcome of calibration; ``ratio`` is what limits are divided by (always >= 1)."""

    version: str = TOKEN_CALIBRATION_VERSION
    status: CalibrationStatus
    ratio: float
    median_ratio: float | None
    samples: int
    used: int
    rejected_outliers: int
    rejected_invalid: int


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenEstimateError(
            "token-calibration-sample-invalid", f"calibration sample {name} must be an int number of tokens"
        )
    return value


def _ratios(samples: Iterable[CalibrationSample | tuple[int, int]]) -> tuple[list[float], int, int]:
    ratios: list[float] = []
    seen = 0
    invalid = 0
    for sample in samples:
        seen += 1
        if isinstance(sample, CalibrationSample):
            estimated, actual = sample.estimated, sample.actual
        elif isinstance(sample, tuple) and len(sample) == 2:
            estimated, actual = sample
        else:
            raise TokenEstimateError(
                "token-calibration-sample-invalid", "a calibration sample is an (estimated, actual) pair"
            )
        estimated = _count(estimated, "estimated")
        actual = _count(actual, "actual")
        # Providers sometimes report zero usage (cached or failed calls); such samples carry no signal.
        if estimated <= 0 or actual <= 0:
            invalid += 1
            continue
        ratios.append(actual / estimated)
    return ratios, seen, invalid


def calibrate_token_ratio(
    samples: Iterable[CalibrationSample | tuple[int, int]], *, min_samples: int = CALIBRATION_MIN_SAMPLES
) -> TokenCalibration:
    """Learn the ratio actual/estimated from samples, rejecting outliers; see the module rules."""
    ratios, seen, invalid = _ratios(samples)
    if len(ratios) < max(1, min_samples):
        return TokenCalibration(
            status="insufficient-samples",
            ratio=1.0,
            median_ratio=None,
            samples=seen,
            used=0,
            rejected_outliers=0,
            rejected_invalid=invalid,
        )
    center = statistics.median(ratios)
    spread = statistics.median([abs(ratio - center) for ratio in ratios])
    if spread == 0:
        # More than half the samples agree exactly: anything else is an outlier by this rule.
        kept = [ratio for ratio in ratios if ratio == center]
    else:
        kept = [ratio for ratio in ratios if 0.6745 * abs(ratio - center) / spread <= _OUTLIER_Z]
    median_ratio = statistics.median(kept)
    return TokenCalibration(
        status="calibrated",
        ratio=min(float(CALIBRATION_MAX_RATIO), max(1.0, median_ratio)),
        median_ratio=median_ratio,
        samples=seen,
        used=len(kept),
        rejected_outliers=len(ratios) - len(kept),
        rejected_invalid=invalid,
    )


def calibrated_limit(limit: int, calibration: TokenCalibration | float) -> int:
    """``floor(limit / ratio)`` with the ratio clamped as calibration clamps it: never above ``limit``."""
    ratio = calibration.ratio if isinstance(calibration, TokenCalibration) else float(calibration)
    if not math.isfinite(ratio):
        ratio = float(CALIBRATION_MAX_RATIO)
    ratio = min(float(CALIBRATION_MAX_RATIO), max(1.0, ratio))
    return math.floor(limit / ratio)


class TokenCalibrator:
    """Collects samples as calls happen (the newest ``max_samples``) and calibrates on demand. Thread-safe."""

    __slots__ = ("_lock", "_min_samples", "_samples")

    def __init__(
        self, *, max_samples: int = CALIBRATION_MAX_SAMPLES, min_samples: int = CALIBRATION_MIN_SAMPLES
    ) -> None:
        if max_samples < 1:
            raise ValueError("max_samples must be at least 1")
        self._samples: deque[CalibrationSample] = deque(maxlen=max_samples)
        self._min_samples = min_samples
        self._lock = threading.Lock()

    def record(self, *, estimated: int, actual: int) -> None:
        """Add one observation; a value that is not a number raises ``token-calibration-sample-invalid``."""
        sample = CalibrationSample(estimated=_count(estimated, "estimated"), actual=_count(actual, "actual"))
        with self._lock:
            self._samples.append(sample)

    def samples(self) -> tuple[CalibrationSample, ...]:
        with self._lock:
            return tuple(self._samples)

    def calibration(self) -> TokenCalibration:
        return calibrate_token_ratio(self.samples(), min_samples=self._min_samples)


class CalibratedEstimator:
    """Wraps an estimator and scales its estimates up by a calibration ratio (never down)."""

    __slots__ = ("_base", "_ratio")

    def __init__(self, base: TokenEstimator, calibration: TokenCalibration | float) -> None:
        ratio = calibration.ratio if isinstance(calibration, TokenCalibration) else float(calibration)
        if not math.isfinite(ratio):
            ratio = float(CALIBRATION_MAX_RATIO)
        self._base = base
        self._ratio = min(float(CALIBRATION_MAX_RATIO), max(1.0, ratio))

    @property
    def version(self) -> str:
        return self._base.version

    @property
    def ratio(self) -> float:
        return self._ratio

    def estimate_text(self, text: str) -> int:
        return math.ceil(self._base.estimate_text(text) * self._ratio)

    def __call__(self, message: CanonicalMessage) -> int:
        return math.ceil(self._base(message) * self._ratio)
