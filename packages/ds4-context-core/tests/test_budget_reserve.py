"""The default output reserve works for every window from 4,096 up; impossible budgets give a code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core.config import BudgetConfig
from ds4_context_core.planner import PLAN_FALLBACK_CODES, plan_context


def history():
    return [
        core.CanonicalMessage(
            id="s:u1",
            source_entry_id="u1",
            role="user",
            blocks=(core.TextBlock(text="please look at the failing test"),),
            provenance=core.Provenance(source="pi-session", session_id="s", entry_id="u1"),
        )
    ]


def model(window, max_tokens=None, provider="anthropic"):
    return core.ModelDescriptor(provider=provider, id="m", context_window=window, max_tokens=max_tokens)


@pytest.mark.parametrize(
    ("window", "max_tokens", "reserve"),
    [
        (4_096, None, 1_024),
        (8_192, None, 2_048),
        (32_768, None, 8_192),  # gave window-invalid before: the reserve was 32,768
        (128_000, None, 32_000),
        (200_000, None, 32_768),
        (128_000, 16_384, 16_384),  # the model's output limit caps the share
        (200_000, 64_000, 32_768),
        (4_096, 512, 512),
    ],
)
def test_the_default_reserve_is_a_share_of_the_window_capped_by_the_output_limit(window, max_tokens, reserve):
    plan = plan_context(history(), model=model(window, max_tokens))
    assert plan.ok, plan.fallback
    budget = plan.budget
    assert budget.output_reserve == reserve
    assert budget.hard_limit > 0
    # what the plan may hold, in real tokens, plus the reserve and the margin fits the window
    assert (
        budget.hard_limit * budget.calibration_ratio + budget.output_reserve + budget.safety_margin <= window
    )


@pytest.mark.parametrize(
    ("window", "max_tokens", "config", "code"),
    [
        (0, None, None, "window-invalid"),
        (-1, None, None, "window-invalid"),
        (1, None, None, "window-too-small"),
        (100, None, None, "window-too-small"),
        (1_000, 1_000, None, "window-too-small"),
        (4_096, None, {"budget": {"minimum_output_reserve": 10_000}}, "window-too-small"),
        (4_096, None, {"budget": {"output_reserve_ratio": 1.0}}, "window-too-small"),
    ],
)
def test_a_window_a_reserve_makes_unusable_gets_a_code_and_a_hint(window, max_tokens, config, code):
    plan = plan_context(history(), model=model(window, max_tokens), config=config)
    assert code in PLAN_FALLBACK_CODES
    assert plan.fallback is not None
    assert plan.fallback.code == code
    if code == "window-too-small":
        detail = plan.fallback.detail
        assert f"window {window}" in detail
        assert "output reserve" in detail
        assert "max_tokens" in detail


def test_a_model_output_limit_above_the_window_still_plans():
    plan = plan_context(history(), model=model(4_096, 100_000))
    assert plan.ok
    assert plan.budget.output_reserve == 1_024


@given(
    window=st.integers(min_value=-10, max_value=3_000_000),
    max_tokens=st.none() | st.integers(min_value=-5, max_value=5_000_000),
    ratio=st.none() | st.floats(allow_nan=True, allow_infinity=True),
)
def test_any_window_gives_a_plan_that_fits_or_a_code(window, max_tokens, ratio):
    plan = plan_context(history(), model=model(window, max_tokens), calibration_ratio=ratio)
    if plan.ok:
        budget = plan.budget
        assert budget.total_tokens <= budget.hard_limit
        assert budget.output_reserve + budget.safety_margin + budget.hard_limit <= window
    else:
        assert plan.fallback.code in PLAN_FALLBACK_CODES


def test_defaults_from_4096_up_leave_room():
    defaults = BudgetConfig()
    assert defaults.output_reserve_ratio == 0.25
    for window in (4_096, 6_000, 8_192, 16_384, 32_768, 65_536, 128_000, 200_000, 1_000_000):
        plan = plan_context(history(), model=model(window))
        assert plan.ok, (window, plan.fallback)
        assert plan.budget.hard_limit >= window // 4
