"""load_config reads values strictly: nothing is coerced, every rejected value keeps its default."""

import json
import math

import pytest

from ds4_context_core.config import CONFIG_WARNING_CODES, Ds4ContextConfig, load_config


def _field(config, path):
    section, key = path.split(".")
    return getattr(getattr(config, section), key)


def _with(path, value):
    section, key = path.split(".")
    return {section: {key: value}}


STRICT_CASES = [
    # a bool where an int is expected (lax pydantic read True as 1)
    ("budget.minimum_output_reserve", True, "wrong type"),
    ("budget.safety_margin_min", False, "wrong type"),
    ("pruning.preserve_recent", True, "wrong type"),
    ("planner.summary_tokens", True, "wrong type"),
    # a numeric string where a number is expected
    ("pruning.head_chars", "100", "wrong type"),
    ("pruning.tail_chars", " 50 ", "wrong type"),
    ("budget.hard_limit_ratio", "0.85", "wrong type"),
    ("planner.recent_tail_tokens", "1000", "wrong type"),
    # a float where an int is expected, with or without a fraction
    ("pruning.head_chars", 100.5, "wrong type"),
    ("pruning.head_chars", 100.0, "wrong type"),
    ("budget.preferred_output_reserve", 1e4, "wrong type"),
    ("planner.memory_tokens", 2.5, "wrong type"),
    # a bool where a float is expected, and numbers that are not finite
    ("budget.target_fill_ratio", True, "wrong type"),
    ("budget.calibration_ratio", math.nan, "not allowed"),
    ("budget.calibration_ratio", math.inf, "not allowed"),
    # switches take true/false only
    ("pruning.enabled", 0, "wrong type"),
    ("pruning.dry_run", "true", "wrong type"),
    ("privacy.enabled", "false", "wrong type"),
    ("privacy.redact_secrets", 0, "wrong type"),
    ("local_kv.enabled", 1, "wrong type"),
    ("local_kv.enabled", "yes", "wrong type"),
    # lists hold strings, and a bare string is not a list
    ("pruning.read_only_tools", "bash", "wrong type"),
    ("pruning.never_prune_tools", ["read", 3], "wrong type"),
    ("pruning.evidence_words", {"error": True}, "wrong type"),
    ("privacy.local_providers", "vllm", "wrong type"),
    ("privacy.remote_allowed", "normal", "wrong type"),
    # out of range
    ("budget.hard_limit_ratio", 1.5, "out of range"),
    ("budget.minimum_output_reserve", -1, "out of range"),
    ("budget.minimum_output_reserve", 10**12, "out of range"),
    ("pruning.preserve_recent", -1, "out of range"),
    ("planner.compaction_batch_ratio", 0.95, "out of range"),
    ("pruning.receipt_max_ratio", 0, "out of range"),
]


@pytest.mark.parametrize(("path", "value", "reason"), STRICT_CASES)
def test_a_value_of_another_type_or_out_of_range_is_reported_and_defaults(path, value, reason):
    result = load_config(_with(path, value))
    assert [(w.code, w.path) for w in result.warnings] == [("config-value-invalid", path)]
    assert result.warnings[0].detail.startswith(f"default used: {reason} (")
    assert not result.ok
    assert _field(result.config, path) == _field(Ds4ContextConfig(), path)
    assert result.config == Ds4ContextConfig()


@pytest.mark.parametrize(
    ("raw", "path", "expected"),
    [
        ({"budget": {"minimum_output_reserve": True}}, "budget.minimum_output_reserve", 1024),
        ({"pruning": {"head_chars": "100"}}, "pruning.head_chars", 600),
        ({"pruning": {"head_chars": 100.7}}, "pruning.head_chars", 600),
        ({"pruning": {"dry_run": "yes"}}, "pruning.dry_run", False),
        ({"pruning": {"enabled": 0}}, "pruning.enabled", True),
        ({"planner": {"summary_tokens": "400"}}, "planner.summary_tokens", None),
        ({"budget": {"pin_cap_ratio": "0.1"}}, "budget.pin_cap_ratio", 0.25),
    ],
)
def test_the_fallback_is_the_default_never_the_coerced_value(raw, path, expected):
    value = _field(load_config(raw).config, path)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("section", ["budget", "planner", "pruning", "privacy", "local_kv"])
def test_an_unknown_key_in_any_section_is_reported_by_path(section):
    result = load_config({section: {"colour": "blue"}})
    assert [(w.code, w.path) for w in result.warnings] == [("config-key-unknown", f"{section}.colour")]
    assert result.config == Ds4ContextConfig()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("budget.minimum_output_reserve", 4096),
        ("budget.hard_limit_ratio", 1),  # an integer is a number: JSON does not tell 1 from 1.0
        ("budget.calibration_ratio", 1.25),
        ("planner.summary_tokens", None),
        ("planner.summary_tokens", 2000),
        ("pruning.read_only_tools", ["read", "grep"]),  # JSON lists
        ("pruning.read_only_tools", ("read", "grep")),
        ("pruning.never_prune_tools", []),
        ("pruning.dry_run", True),
        ("local_kv.enabled", True),
        ("privacy.enabled", False),
        ("privacy.local_providers", ["ollama", "my-vllm"]),
        ("privacy.remote_allowed", ["normal"]),
        ("privacy.remote_allowed", []),
    ],
)
def test_values_of_the_right_type_are_kept_exactly(path, value):
    result = load_config(_with(path, value))
    assert result.warnings == ()
    kept = _field(result.config, path)
    assert kept == (tuple(value) if isinstance(value, list) else value)


def test_an_integer_in_a_number_field_is_read_as_the_same_float():
    value = load_config({"budget": {"hard_limit_ratio": 1}}).config.budget.hard_limit_ratio
    assert value == 1.0
    assert type(value) is float


@pytest.mark.parametrize(("path", "value", "reason"), STRICT_CASES)
def test_warnings_never_repeat_a_rejected_value(path, value, reason):
    secret = "sk-ant-" + "a" * 24
    for raw in (_with(path, secret), _with(path, [secret]), _with(path, {secret: 1})):
        text = repr(load_config(raw).warnings) + json.dumps([w.detail for w in load_config(raw).warnings])
        assert secret not in text


def test_every_strict_case_uses_a_documented_code():
    codes = {w.code for path, value, _ in STRICT_CASES for w in load_config(_with(path, value)).warnings}
    assert codes <= set(CONFIG_WARNING_CODES)


def test_direct_construction_is_strict_too():
    from pydantic import ValidationError  # noqa: PLC0415

    with pytest.raises(ValidationError):
        Ds4ContextConfig.model_validate({"budget": {"minimum_output_reserve": True}})
    with pytest.raises(ValidationError):
        Ds4ContextConfig.model_validate({"pruning": {"head_chars": "600"}})
    assert Ds4ContextConfig.model_validate(
        {"pruning": {"read_only_tools": ["read"]}}
    ).pruning.read_only_tools == ("read",)


def test_the_python_dump_and_the_json_dump_load_back_without_warnings():
    # the engine reloads ``config.model_dump()`` (tuples) for dry runs; files hold the JSON form (lists)
    config = load_config({"pruning": {"head_chars": 10}, "privacy": {"local_providers": ["vllm"]}}).config
    assert load_config(config.model_dump()).warnings == ()
    assert load_config(config.model_dump()).config == config
    as_json = json.loads(json.dumps(config.model_dump(mode="json")))
    assert load_config(as_json).warnings == ()
    assert load_config(as_json).config == config
