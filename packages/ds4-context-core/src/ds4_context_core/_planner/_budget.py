"""The budget stage: the token budget of one model call, and the adaptive ceilings of the context window."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from ds4_context_core._history._model import ModelDescriptor
from ds4_context_core._tokens._calibration import CALIBRATION_MAX_RATIO, CalibrationRatio
from ds4_context_core._tokens._priors import calibration_prior

from ._types import PlanBudget

if TYPE_CHECKING:
    from ds4_context_core.config import BudgetConfig, PlannerConfig

# (largest window, recent tail, retrieved history, project snippets) - the reference's adaptive ceilings.
_CEILINGS: Final = (
    (40_000, 12_000, 4_000, 4_000),
    (128_000, 24_000, 8_000, 12_000),
    (256_000, 32_000, 16_000, 20_000),
)
_LARGEST_CEILINGS: Final = (64_000, 32_000, 32_000)


class BudgetError(Exception):
    """Internal: a budget that cannot be planned against; carries the fallback code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _adaptive_ceilings(window: int) -> tuple[int, int, int]:
    for largest, tail, history, project in _CEILINGS:
        if window <= largest:
            return tail, history, project
    return _LARGEST_CEILINGS


def output_reserve(window: int, max_tokens: object, config: BudgetConfig) -> int:
    """Tokens kept free for the answer: a share of the window, within the model's output limit.

    ``min(window * output_reserve_ratio, preferred_output_reserve, max_tokens)``, and at least
    ``min(minimum_output_reserve, max_tokens)``: 1,024 at a 4,096 window, 8,192 at 32k, 32,000 at 128k
    without ``max_tokens``, 16,384 at 128k for a model that writes at most 16,384.
    """
    limit = max_tokens if type(max_tokens) is int and max_tokens > 0 else None
    share = min(math.floor(window * config.output_reserve_ratio), config.preferred_output_reserve)
    floor = config.minimum_output_reserve
    if limit is not None:
        share, floor = min(share, limit), min(floor, limit)
    return max(share, floor)


def safety_margin(window: int, config: BudgetConfig) -> int:
    """``min(max, max(ceil(window * ratio), min(safety_margin_min, window // 16)))``.

    The floor gives way to window / 16 in small windows, so that 1,024 tokens of margin do not take a
    quarter of a 4,096 window; from 16,384 up it is ``safety_margin_min`` as before.
    """
    floor = min(config.safety_margin_min, window // 16)
    return min(config.safety_margin_max, max(floor, math.ceil(window * config.safety_margin_ratio)))


def _calibration(
    model: ModelDescriptor, calibration_ratio: object, config: BudgetConfig
) -> tuple[float, str]:
    """The ratio to divide the limits by (>= 1) and its source (``CALIBRATION_RATIO_SOURCES``)."""
    ratio, source = 1.0, "none"
    if (
        isinstance(calibration_ratio, int | float)
        and not isinstance(calibration_ratio, bool)
        and math.isfinite(calibration_ratio)
        and calibration_ratio > 0
    ):
        ratio = float(calibration_ratio)
        source = calibration_ratio.source if isinstance(calibration_ratio, CalibrationRatio) else "explicit"
    elif config.calibration_prior:
        ratio, source = calibration_prior(model).ratio, "prior"
    if config.calibration_ratio > ratio:
        ratio, source = config.calibration_ratio, "config"
    return min(float(CALIBRATION_MAX_RATIO), max(1.0, ratio)), source


def compute_budget(
    model: object,
    fixed_tokens: object,
    budget_config: BudgetConfig,
    planner_config: PlannerConfig,
    calibration_ratio: float | None,
) -> PlanBudget:
    """Limits for one call. Calibration divides every limit by max(1, ratio): it can only lower them.

    ``calibration_ratio`` (a :class:`CalibrationRatio` from usage, or any float the caller chose) wins
    over the provider family's prior; ``None`` takes the prior (``budget.calibration_prior``).
    """
    if not isinstance(model, ModelDescriptor):
        raise BudgetError("window-invalid", "model is not a ModelDescriptor")
    window = model.context_window
    if type(window) is not int or window <= 0:
        raise BudgetError("window-invalid", "context window must be a positive integer")
    if type(fixed_tokens) is not int or fixed_tokens < 0:
        raise BudgetError("fixed-tokens-invalid", "fixed tokens must be a non-negative integer")
    reserve = output_reserve(window, model.max_tokens, budget_config)
    margin = safety_margin(window, budget_config)
    hard = min(window - reserve - margin, math.floor(window * budget_config.hard_limit_ratio))
    soft = min(hard, math.floor(window * budget_config.soft_limit_ratio))
    target = min(soft, math.floor(window * budget_config.target_fill_ratio))
    divisor, source = _calibration(model, calibration_ratio, budget_config)
    hard, soft, target = (math.floor(value / divisor) for value in (hard, soft, target))
    if hard <= 0:
        raise BudgetError(
            "window-too-small",
            f"window {window} leaves no input after output reserve {reserve} and margin {margin}: "
            "use a larger window or a smaller max_tokens, or lower budget.output_reserve_ratio",
        )
    tail, history, project = _adaptive_ceilings(window)
    return PlanBudget(
        context_window=window,
        output_reserve=reserve,
        safety_margin=margin,
        hard_limit=hard,
        soft_limit=max(soft, 0),
        target_tokens=max(target, 0),
        calibration_ratio=divisor,
        calibration_source=source,
        recent_tail_ceiling=_pick(planner_config.recent_tail_tokens, tail),
        retrieved_history_ceiling=_pick(planner_config.retrieved_history_tokens, history),
        project_snippet_ceiling=_pick(planner_config.project_snippet_tokens, project),
        summary_ceiling=_pick(planner_config.summary_tokens, history),
        memory_ceiling=_pick(planner_config.memory_tokens, history),
        pin_cap=math.floor(hard * budget_config.pin_cap_ratio),
        fixed_tokens=fixed_tokens,
    )


def _pick(configured: int | None, adaptive: int) -> int:
    return adaptive if configured is None else configured
