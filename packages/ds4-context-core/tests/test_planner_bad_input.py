"""Bad input a host really sends: tiny or missing windows, reserves above the window, a 1 MB message,
images of unknown size, broken usage records. Each gives a plan that fits (in the destination's shape)
or a clear code with nothing over the limit sent, never an exception into the host's turn."""

from __future__ import annotations

import base64
import os

import pytest
from _messages import message
from test_planner_destinations import destination_problem

import ds4_context_core as core
from ds4_context_core.planner import PLAN_FALLBACK_CODES, plan_context, restore
from ds4_context_core.tokens import TokenCalibrator, calibrate_token_ratio, read_reported_input

ONE_MB = "x" * 1_000_000
WINDOWS = (0, 1, 100, 4_096, 32_768, 128_000, 200_000)
DESTINATIONS = (None, "anthropic", "openai-chat", "openai-responses")


def _model(window, max_tokens=None):
    return core.ModelDescriptor(
        provider="anthropic", id="claude", context_window=window, max_tokens=max_tokens
    )


def _text(entry, role, text):
    return message(entry, role, [core.TextBlock(text=text)])


def _assert_sendable(plan, window, destination):
    """What every plan owes the host, whatever went wrong."""
    if plan.ok or plan.messages:
        assert plan.budget.total_tokens <= max(plan.budget.hard_limit, 0) or plan.fallback.mode == "native"
        assert plan.budget.hard_limit < max(window, 1)
    if plan.fallback is not None:
        assert plan.fallback.code in PLAN_FALLBACK_CODES
        if plan.fallback.mode == "native":
            # the native context goes out only when it fits
            assert plan.budget.total_tokens <= plan.budget.context_window
    if plan.messages and destination is not None:
        assert destination_problem(destination, plan.messages) is None


def _histories():
    call = core.ToolCallBlock(id="c", name="read", arguments={"path": "big.log"})
    result = core.ToolResultBlock(tool_call_id="c", tool_name="read", content=ONE_MB)
    return {
        "request": [_text("u", "user", ONE_MB)],
        "result-in-progress": [
            _text("u", "user", "read it"),
            message("a", "assistant", [call]),
            message("r", "tool", [result]),
        ],
        "old-message": [
            _text("u0", "user", ONE_MB),
            _text("a0", "assistant", "that is long"),
            _text("u", "user", "what now?"),
        ],
        "image-of-unknown-size": [
            _text("u0", "user", "hello"),
            _text("a0", "assistant", "hi"),
            message("u", "user", [core.TextBlock(text="see"), core.ImageBlock(mime_type=None, data=None)]),
        ],
    }


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("shape", sorted(_histories()))
@pytest.mark.parametrize("destination", DESTINATIONS)
def test_tiny_windows_and_a_1_mb_message_give_a_plan_that_fits_or_a_code(window, shape, destination):
    history = _histories()[shape]
    plan = plan_context(history, model=_model(window), destination=destination)
    _assert_sendable(plan, window, destination)
    if window >= 4_096:
        # every usable window plans these: the 1 MB text is trimmed (restorable) or left out with a reason
        assert plan.ok, plan.fallback
        sent = {m.id for m in plan.messages}
        for original in history:
            if original.id not in sent:
                assert restore(plan, original.id) == (original,) or plan.manifest.exclusions
        if shape in ("request", "result-in-progress"):
            trimmed = [m for m in plan.messages if m.flags.synthetic and m.id in {h.id for h in history}]
            assert trimmed
            assert all(restore(plan, m.id)[0] in history for m in trimmed)
    else:
        assert plan.fallback is not None
        assert plan.fallback.code in {"window-invalid", "window-too-small"}
        assert plan.messages == ()  # nothing fits a window that leaves no room


@pytest.mark.parametrize(
    "config",
    [
        {"budget": {"minimum_output_reserve": 10_000}},
        {"budget": {"output_reserve_ratio": 1.0}},
        {"budget": {"minimum_output_reserve": 5_000, "max_output_reserve": 5_000}},
    ],
)
def test_a_reserve_above_the_window_is_a_code_and_sends_nothing(config):
    plan = plan_context([_text("u", "user", "hi")], model=_model(4_096), config=config)
    assert plan.fallback is not None
    assert plan.fallback.code == "window-too-small"
    assert plan.messages == ()
    assert "output reserve" in plan.fallback.detail


def test_max_tokens_above_the_window_still_plans():
    plan = plan_context([_text("u", "user", "hi")], model=_model(4_096, max_tokens=1_000_000))
    assert plan.ok


def test_a_large_opaque_image_is_a_clear_code_when_it_is_the_request_and_cut_when_it_is_old():
    data = base64.b64encode(os.urandom(750_000)).decode()
    image = core.OpaqueProviderBlock(
        original_type="openai-chat:image_url",
        value={"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}", "detail": "high"}},
    )
    request = [message("u", "user", [core.TextBlock(text="see"), image])]
    plan = plan_context(request, model=_model(128_000), destination="openai-chat")
    assert plan.fallback is not None
    assert (plan.fallback.mode, plan.fallback.code) == ("blocked", "message-exceeds-window")
    assert plan.messages == ()
    older = [*request, _text("a", "assistant", "nice"), _text("u2", "user", "and?")]
    plan = plan_context(older, model=_model(128_000), destination="openai-chat")
    assert plan.ok
    # the image is cut; the task digest in front keeps the request's words, not the image
    assert [m.id for m in plan.messages] == ["ds4-supplement:ds4-core-task-digest", "s:a", "s:u2"]
    digest = plan.messages[0].blocks[0].text
    assert "Original request: see" in digest
    assert data[:64] not in digest
    assert plan.manifest.exclusions[0].reason == "before-cut"


@pytest.mark.parametrize(
    "usage",
    [
        {"input": -5, "output": 1},
        {"output": 10},
        {"input": None, "cacheRead": 10},
        {"input": 10, "cacheRead": -1, "cacheWrite": 0},
        {"input_tokens": "12"},
        {"prompt_tokens": True},
        {},
        None,
        [1, 2],
    ],
)
def test_usage_with_negative_or_missing_fields_never_raises_and_never_calibrates(usage):
    reading = read_reported_input(usage)
    assert reading.ok is False
    assert reading.code
    calibrator = TokenCalibrator()
    for _ in range(6):
        calibrator.record(estimated=1_000, actual=reading.input_tokens or 0)
    calibration = calibrator.calibration()
    assert calibration.status == "insufficient-samples"
    assert calibration.planner_ratio() is None  # the prior stays in charge
    assert calibrate_token_ratio([(1_000, -1)] * 6).ratio == 1.0
    plan = plan_context(
        [_text("u", "user", "hi")], model=_model(32_768), calibration_ratio=calibration.planner_ratio()
    )
    assert plan.ok
    assert plan.budget.calibration_source == "prior"
