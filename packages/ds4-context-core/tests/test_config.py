import json

import pytest

from ds4_context_core.config import (
    CONFIG_SCHEMA_ID,
    CONFIG_WARNING_CODES,
    BudgetConfig,
    Ds4ContextConfig,
    PruningConfig,
    load_config,
)


def test_defaults_are_the_reference_numbers():
    config = Ds4ContextConfig()
    assert (
        config.budget.target_fill_ratio,
        config.budget.soft_limit_ratio,
        config.budget.hard_limit_ratio,
    ) == (
        0.7,
        0.8,
        0.9,
    )
    assert (config.budget.minimum_output_reserve, config.budget.preferred_output_reserve) == (1024, 32768)
    assert (config.budget.output_reserve_ratio, config.budget.calibration_prior) == (0.25, True)
    pruning = config.pruning
    assert (pruning.preserve_recent, pruning.min_chars_to_prune, pruning.min_gain_chars) == (4, 400, 40)
    assert (pruning.head_chars, pruning.tail_chars) == (600, 200)
    assert (pruning.receipt_min_range_chars, pruning.receipt_max_ratio, pruning.receipt_max_per_pass) == (
        2000,
        0.5,
        3,
    )
    assert "shell" not in pruning.read_only_tools
    assert "bash" not in pruning.read_only_tools


def test_valid_mapping_loads_without_warnings():
    result = load_config({"schema": CONFIG_SCHEMA_ID, "pruning": {"dry_run": True, "head_chars": 100}})
    assert result.warnings == ()
    assert result.ok
    assert result.config.pruning.dry_run is True
    assert result.config.pruning.head_chars == 100
    assert result.config.budget == BudgetConfig()


@pytest.mark.parametrize(
    ("raw", "code", "path"),
    [
        ({"budgett": {}}, "config-key-unknown", "budgett"),
        ({"budget": {"hard_limit_ratio": 1.5}}, "config-value-invalid", "budget.hard_limit_ratio"),
        ({"budget": {"calibration_ratio": "fast"}}, "config-value-invalid", "budget.calibration_ratio"),
        ({"pruning": {"preserve_recent": -1}}, "config-value-invalid", "pruning.preserve_recent"),
        ({"pruning": {"nope": 1}}, "config-key-unknown", "pruning.nope"),
        ({"pruning": []}, "config-section-invalid", "pruning"),
        ({"schema": "ds4-context-config-v9"}, "config-schema-unknown", "schema"),
        ({"budget": {"target_fill_ratio": 0.95}}, "config-ratios-inconsistent", "budget"),
    ],
)
def test_bad_keys_warn_and_fall_back_to_defaults(raw, code, path):
    original = json.dumps(raw, sort_keys=True)
    result = load_config(raw)
    assert code in CONFIG_WARNING_CODES
    assert [(w.code, w.path) for w in result.warnings] == [(code, path)]
    assert result.config.budget.hard_limit_ratio == 0.9
    assert result.config.pruning.preserve_recent == 4
    assert json.dumps(raw, sort_keys=True) == original


def test_good_keys_survive_next_to_bad_ones():
    result = load_config({"pruning": {"head_chars": 10, "tail_chars": "many"}, "planner": {"x": 1}})
    assert result.config.pruning.head_chars == 10
    assert result.config.pruning.tail_chars == 200
    assert sorted(w.path for w in result.warnings) == ["planner.x", "pruning.tail_chars"]


def test_warnings_never_echo_the_rejected_value():
    result = load_config({"budget": {"calibration_ratio": "sk-secret-value"}, "sk-another-secret": 1})
    text = repr(result.warnings)
    assert "sk-secret-value" not in text
    assert "sk-another-secret" in text  # unknown key paths are named (keys are not values)


@pytest.mark.parametrize("raw", [42, "budget=1", ["budget"]])
def test_a_non_mapping_gives_defaults(raw):
    result = load_config(raw)
    assert [w.code for w in result.warnings] == ["config-not-a-mapping"]
    assert result.config == Ds4ContextConfig()


def test_json_schema_is_exported_with_every_section():
    schema = Ds4ContextConfig.model_json_schema()
    assert set(schema["properties"]) == {"budget", "planner", "pruning", "privacy", "local_kv"}
    pruning = schema["$defs"]["PruningConfig"]["properties"]
    assert pruning["head_chars"]["default"] == 600
    privacy = schema["$defs"]["PrivacyConfig"]["properties"]
    assert privacy["remote_allowed"]["default"] == ["normal", "internal"]
    assert schema["$defs"]["LocalKvConfig"]["properties"]["enabled"]["default"] is False
    json.dumps(schema)


def test_configs_are_frozen():
    with pytest.raises(ValueError, match="frozen"):
        PruningConfig().head_chars = 3  # type: ignore[misc]


def _nested_list(depth):
    outer = current = []
    for _ in range(depth):
        inner = []
        current.append(inner)
        current = inner
    return outer


def _nested_mapping(depth):
    outer = current = {}
    for _ in range(depth):
        inner = {}
        current["a"] = inner
        current = inner
    return outer


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"pruning": {"read_only_tools": _nested_list(100_000)}},
            ("config-value-invalid", "pruning.read_only_tools"),
        ),
        ({"budget": _nested_mapping(100_000)}, ("config-key-unknown", "budget.a")),
        ({"privacy": {"enabled": _nested_mapping(100_000)}}, ("config-value-invalid", "privacy.enabled")),
        (_nested_mapping(100_000), ("config-key-unknown", "a")),
    ],
    ids=["list-in-a-list-field", "mapping-in-a-section", "mapping-in-a-switch", "unknown-top-level"],
)
def test_a_mapping_nested_100000_deep_gives_a_warning_not_recursion_error(data, expected):
    # a host may pass what its own parser built (TOML, YAML, a settings service): depth alone never raises
    result = load_config(data)
    assert [(warning.code, warning.path) for warning in result.warnings] == [expected]
    assert result.config == Ds4ContextConfig()
