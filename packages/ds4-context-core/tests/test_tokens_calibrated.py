"""Calibrated by default: provider-family priors, stable step ratios, and the ratio's source in the budget."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core.planner import ContextPlanner, plan_context
from ds4_context_core.tokens import (
    CALIBRATION_RATIO_SOURCES,
    CalibrationRatio,
    TokenCalibrator,
    calibrate_token_ratio,
    calibration_prior,
    provider_family,
    stable_ratio,
)


def message(entry, role, text):
    return core.CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=(core.TextBlock(text=text),),
        provenance=core.Provenance(source="pi-session", session_id="s", entry_id=entry),
    )


HISTORY = [message("u1", "user", "fix the budget"), message("a1", "assistant", "done")]


def model(provider, model_id="m", window=128_000, max_tokens=16_384):
    return core.ModelDescriptor(provider=provider, id=model_id, context_window=window, max_tokens=max_tokens)


@pytest.mark.parametrize(
    ("provider", "model_id", "family"),
    [
        ("anthropic", "claude-sonnet-4-5", "anthropic"),
        ("openrouter", "anthropic/claude-opus-4.5", "anthropic"),
        ("amazon-bedrock", "us.anthropic.claude-sonnet-4-5-v1:0", "anthropic"),
        ("openai", "gpt-4.1-mini", "openai"),
        ("azure", "my-deployment", "openai"),
        ("openrouter", "openai/o3-mini", "openai"),
        ("google", "gemini-2.5-pro", "google"),
        ("ollama", "qwen3:8b", "other"),
        ("p", "m", "other"),
    ],
)
def test_provider_families(provider, model_id, family):
    assert provider_family(provider, model_id) == family


def test_without_usage_the_plan_uses_the_measured_prior_of_the_family():
    claude = plan_context(HISTORY, model=model("anthropic", "claude-sonnet-4-5")).budget
    gpt = plan_context(HISTORY, model=model("openai", "gpt-4.1")).budget
    uncalibrated = plan_context(HISTORY, model=model("anthropic"), calibration_ratio=1.0).budget
    # Claude's reported input ran 1.26-1.42x chars-v1 on real sessions: the prior covers the top of it
    assert (claude.calibration_ratio, claude.calibration_source) == (1.45, "prior")
    assert (gpt.calibration_ratio, gpt.calibration_source) == (1.15, "prior")
    assert claude.hard_limit == math.floor(uncalibrated.hard_limit / 1.45)
    assert claude.calibration_ratio * claude.hard_limit <= uncalibrated.hard_limit
    # an estimator that counts o200k exactly needs no prior for OpenAI, and less of one for Claude
    assert calibration_prior(model("openai"), "openai-o200k_base-v1").ratio == 1.0
    assert calibration_prior(model("anthropic"), "tiktoken-o200k_base-v1").ratio == 1.30
    assert calibration_prior(model("anthropic"), "my-own-tokenizer").ratio == 1.0


def test_the_source_of_the_ratio_is_in_the_budget_and_the_encoded_plan():
    usage = plan_context(HISTORY, model=model("anthropic"), calibration_ratio=CalibrationRatio(1.3, "usage"))
    explicit = plan_context(HISTORY, model=model("anthropic"), calibration_ratio=1.2)
    config = plan_context(HISTORY, model=model("anthropic"), config={"budget": {"calibration_ratio": 2.0}})
    off = plan_context(HISTORY, model=model("anthropic"), config={"budget": {"calibration_prior": False}})
    assert (usage.budget.calibration_ratio, usage.budget.calibration_source) == (1.3, "usage")
    assert (explicit.budget.calibration_ratio, explicit.budget.calibration_source) == (1.2, "explicit")
    assert (config.budget.calibration_ratio, config.budget.calibration_source) == (2.0, "config")
    assert (off.budget.calibration_ratio, off.budget.calibration_source) == (1.0, "none")
    assert b'"calibrationSource":"usage"' in usage.encode()
    for plan in (usage, explicit, config, off):
        assert plan.budget.calibration_source in CALIBRATION_RATIO_SOURCES


def test_a_calibration_with_too_few_samples_leaves_the_prior_in_charge():
    few = calibrate_token_ratio([(1000, 1300)] * 3)
    enough = calibrate_token_ratio([(1000, 1300)] * 5)
    assert few.planner_ratio() is None
    ratio = enough.planner_ratio()
    assert ratio is not None
    assert (float(ratio), ratio.source) == (1.3, "usage")
    budget = plan_context(HISTORY, model=model("anthropic"), calibration_ratio=few.planner_ratio()).budget
    assert budget.calibration_source == "prior"


def test_the_ratio_moves_in_steps_and_ignores_jitter():
    # measured on a real session: the median jittered 1.411, 1.418, 1.411 between calls
    previous = None
    published = []
    for measured in (1.411, 1.418, 1.411, 1.409, 1.402, 1.399, 1.404):
        previous = stable_ratio(measured, previous)
        published.append(previous)
    assert published == [1.45] * 7
    # up at once when the estimate runs lower than the step covers
    assert stable_ratio(1.452, 1.45) == 1.5
    # down only once the median is clearly below the next lower step
    assert stable_ratio(1.385, 1.45) == 1.45
    assert stable_ratio(1.37, 1.45) == 1.4
    assert stable_ratio(1.25) == 1.25  # not 1.3: 1.25 / 0.05 is not above 25 steps
    assert stable_ratio(0.7) == 1.0
    assert stable_ratio(9.0) == 4.0


@given(st.floats(min_value=0.5, max_value=5.0), st.floats(min_value=1.0, max_value=4.0) | st.none())
def test_a_stable_ratio_is_a_step_covering_the_measurement(measured, previous):
    ratio = stable_ratio(measured, previous)
    assert 1.0 <= ratio <= 4.0
    assert ratio >= min(4.0, max(1.0, measured)) - 1e-9  # never below what was measured
    assert abs(ratio / 0.05 - round(ratio / 0.05)) < 1e-6


def test_the_calibrator_publishes_a_stable_ratio_and_the_planner_keeps_its_prefix():
    calibrator = TokenCalibrator()
    ratios = []
    planner = ContextPlanner()
    history = [message("u0", "user", "start")]
    shared = []
    # a long run of calls whose measured ratio wanders by +-0.01 around 1.41
    for step in range(40):
        calibrator.record(estimated=1000, actual=1410 + (7 if step % 2 else -5))
        calibration = calibrator.calibration()
        ratios.append(calibration.ratio)
        history += [message(f"a{step}", "assistant", "x" * 4000), message(f"u{step + 1}", "user", "go on")]
        plan = planner.plan(
            history,
            model=model("anthropic", window=32_000, max_tokens=4_096),
            calibration_ratio=calibration.planner_ratio(),
        )
        shared.append(plan.budget.hard_limit)
    assert set(ratios[4:]) == {1.45}
    assert len(set(shared[4:])) == 1  # limits do not move, so prefixes are not cut by calibration
