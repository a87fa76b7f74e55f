"""The budget stage: the token budget of one model call, and the adaptive ceilings of the context window."""

from __future__ import annotations

import math
from typing import Final

from ds4_context_core._model import ModelDescriptor
from ds4_context_core.config import BudgetConfig, PlannerConfig

from ._types import PlanBudget

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


def compute_budget(
    model: object,
    fixed_tokens: object,
    budget_config: BudgetConfig,
    planner_config: PlannerConfig,
    calibration_ratio: float | None,
) -> PlanBudget:
    """Limits for one call. Calibration divides every limit by max(1, ratio): it can only lower them."""
    if not isinstance(model, ModelDescriptor):
        raise BudgetError("window-invalid", "model is not a ModelDescriptor")
    window = model.context_window
    if type(window) is not int or window <= 0:
        raise BudgetError("window-invalid", "context window must be a positive integer")
    if type(fixed_tokens) is not int or fixed_tokens < 0:
        raise BudgetError("fixed-tokens-invalid", "fixed tokens must be a non-negative integer")
    max_tokens = model.max_tokens
    ceiling = (
        max_tokens if type(max_tokens) is int and max_tokens > 0 else budget_config.preferred_output_reserve
    )
    reserve = max(
        min(budget_config.minimum_output_reserve, ceiling),
        min(budget_config.preferred_output_reserve, ceiling),
    )
    margin = min(
        budget_config.safety_margin_max,
        max(budget_config.safety_margin_min, math.ceil(window * budget_config.safety_margin_ratio)),
    )
    hard = min(window - reserve - margin, math.floor(window * budget_config.hard_limit_ratio))
    soft = min(hard, math.floor(window * budget_config.soft_limit_ratio))
    target = min(soft, math.floor(window * budget_config.target_fill_ratio))
    ratio = budget_config.calibration_ratio
    if calibration_ratio is not None and math.isfinite(calibration_ratio) and calibration_ratio > ratio:
        ratio = calibration_ratio
    divisor = max(1.0, ratio)
    hard, soft, target = (math.floor(value / divisor) for value in (hard, soft, target))
    if hard <= 0:
        raise BudgetError("window-invalid", "the window leaves no input tokens after reserve and margin")
    tail, history, project = _adaptive_ceilings(window)
    return PlanBudget(
        context_window=window,
        output_reserve=reserve,
        safety_margin=margin,
        hard_limit=hard,
        soft_limit=max(soft, 0),
        target_tokens=max(target, 0),
        calibration_ratio=divisor,
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
