"""Calibration of a token estimator against the usage providers report (``token-calibration-v1``).

ratio = median of actual / estimated over the samples that survive outlier rejection (modified z-score
on the median absolute deviation, threshold 3.5). The ratio is clamped to [1, CALIBRATION_MAX_RATIO]:
limits are divided by it, so calibration can only lower them, never raise them; a provider that
reports nonsense can shrink the budget at most fourfold.

The published ratio moves in steps of ``CALIBRATION_RATIO_STEP`` (0.05), rounded up, so that the limits
derived from it, and with them the plans' shared prefix, do not move with every call's jitter. It goes
up as soon as the median passes the current step (an estimate running low is a risk) and down only when
the median falls ``CALIBRATION_HYSTERESIS`` (0.02) below the next lower step.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from typing import Final, Literal

import msgspec

from ds4_context_core._exceptions import TokenEstimateError
from ds4_context_core._history._model import CanonicalMessage

from ._estimators import TokenEstimator

__all__ = [
    "CALIBRATION_HYSTERESIS",
    "CALIBRATION_MAX_RATIO",
    "CALIBRATION_MAX_SAMPLES",
    "CALIBRATION_MIN_SAMPLES",
    "CALIBRATION_RATIO_SOURCES",
    "CALIBRATION_RATIO_STEP",
    "CALIBRATION_STATUSES",
    "TOKEN_CALIBRATION_VERSION",
    "TOKEN_ESTIMATE_CODES",
    "CalibratedEstimator",
    "CalibrationRatio",
    "CalibrationSample",
    "TokenCalibration",
    "TokenCalibrator",
    "calibrate_token_ratio",
    "calibrated_limit",
    "stable_ratio",
]

TOKEN_CALIBRATION_VERSION: Final = "token-calibration-v1"  # noqa: S105 - a contract id, not a secret
CALIBRATION_MIN_SAMPLES: Final = 5
CALIBRATION_MAX_SAMPLES: Final = 200
CALIBRATION_MAX_RATIO: Final = 4
CALIBRATION_RATIO_STEP: Final = 0.05
CALIBRATION_HYSTERESIS: Final = 0.02
# Where the ratio a budget used came from: provider usage, the provider family's prior, the caller,
# the configuration (``budget.calibration_ratio``), or nowhere (priors off, ratio 1).
CALIBRATION_RATIO_SOURCES: Final = ("config", "explicit", "none", "prior", "usage")
# Iglewicz and Hoaglin's cut-off for the modified z-score 0.6745 * |x - median| / MAD.
_OUTLIER_Z: Final = 3.5
CALIBRATION_STATUSES: Final = ("calibrated", "insufficient-samples")
TOKEN_ESTIMATE_CODES: Final = (
    "token-calibration-sample-invalid",
    "token-encoding-invalid",
    "token-encoding-unavailable",
)

CalibrationStatus = Literal["calibrated", "insufficient-samples"]


class CalibrationRatio(float):
    """A ratio that says where it came from (one of ``CALIBRATION_RATIO_SOURCES``).

    It is a ``float``, so it goes wherever a ratio goes (``plan_context(calibration_ratio=...)``), and the
    planner shows ``source`` in ``plan.budget.calibration_source``; a plain float counts as ``explicit``.
    """

    __slots__ = ("source",)
    source: str

    def __new__(cls, value: float, source: str = "explicit") -> CalibrationRatio:
        ratio = super().__new__(cls, value)
        ratio.source = source if source in CALIBRATION_RATIO_SOURCES else "explicit"
        return ratio

    def __repr__(self) -> str:
        return f"CalibrationRatio({float(self)!r}, {self.source!r})"


def _clamp(ratio: float) -> float:
    if not math.isfinite(ratio):
        return float(CALIBRATION_MAX_RATIO)
    return min(float(CALIBRATION_MAX_RATIO), max(1.0, ratio))


def _step_up(ratio: float) -> float:
    # round() first: 1.25 / 0.05 is 25.000000000000004 in binary floating point, not a step above 1.25
    steps = math.ceil(round(ratio / CALIBRATION_RATIO_STEP, 6))
    return min(float(CALIBRATION_MAX_RATIO), round(steps * CALIBRATION_RATIO_STEP, 4))


def stable_ratio(measured: float, previous: float | None = None) -> float:
    """``measured`` clamped to [1, 4], rounded up to a step; from ``previous`` it moves as the module says."""
    clamped = _clamp(float(measured))
    target = _step_up(clamped)
    if previous is None or not math.isfinite(previous):
        return target
    current = _step_up(_clamp(float(previous)))
    if target >= current:
        return target
    if clamped >= current - CALIBRATION_RATIO_STEP - CALIBRATION_HYSTERESIS:
        return current
    return target


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

    def planner_ratio(self) -> CalibrationRatio | None:
        """The ratio to plan with (source ``usage``), or ``None`` with too few samples (a prior applies)."""
        if self.status != "calibrated":
            return None
        return CalibrationRatio(self.ratio, "usage")


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
    samples: Iterable[CalibrationSample | tuple[int, int]],
    *,
    min_samples: int = CALIBRATION_MIN_SAMPLES,
    previous: TokenCalibration | float | None = None,
) -> TokenCalibration:
    """Learn the ratio actual/estimated from samples, rejecting outliers; see the module rules.

    ``previous`` (the calibration or ratio published before) gives the step hysteresis; without it the
    ratio is the median rounded up to the next step.
    """
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
    import statistics  # noqa: PLC0415 - 3-5 ms of every start; only a calibration with samples needs it

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
        ratio=stable_ratio(median_ratio, _previous_ratio(previous)),
        median_ratio=median_ratio,
        samples=seen,
        used=len(kept),
        rejected_outliers=len(ratios) - len(kept),
        rejected_invalid=invalid,
    )


def _previous_ratio(previous: TokenCalibration | float | None) -> float | None:
    if isinstance(previous, TokenCalibration):
        return previous.ratio if previous.status == "calibrated" else None
    if isinstance(previous, bool) or not isinstance(previous, int | float):
        return None
    return float(previous)


def calibrated_limit(limit: int, calibration: TokenCalibration | float) -> int:
    """``floor(limit / ratio)`` with the ratio clamped as calibration clamps it: never above ``limit``."""
    ratio = calibration.ratio if isinstance(calibration, TokenCalibration) else float(calibration)
    if not math.isfinite(ratio):
        ratio = float(CALIBRATION_MAX_RATIO)
    ratio = min(float(CALIBRATION_MAX_RATIO), max(1.0, ratio))
    return math.floor(limit / ratio)


class TokenCalibrator:
    """Collects samples as calls happen (the newest ``max_samples``) and calibrates on demand. Thread-safe."""

    __slots__ = ("_lock", "_min_samples", "_published", "_samples")

    def __init__(
        self, *, max_samples: int = CALIBRATION_MAX_SAMPLES, min_samples: int = CALIBRATION_MIN_SAMPLES
    ) -> None:
        if max_samples < 1:
            raise ValueError("max_samples must be at least 1")
        self._samples: deque[CalibrationSample] = deque(maxlen=max_samples)
        self._min_samples = min_samples
        self._published: TokenCalibration | None = None
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
        """The calibration of the samples so far; its ratio moves from the last one only by whole steps."""
        with self._lock:
            samples, previous = tuple(self._samples), self._published
        calibration = calibrate_token_ratio(samples, min_samples=self._min_samples, previous=previous)
        with self._lock:
            if calibration.status == "calibrated":
                self._published = calibration
        return calibration


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
