"""The privacy and local_kv sections: defaults from the privacy module, fail-closed fallback, round trip."""

import itertools
import json
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ds4_context_core import PrivacyPolicyError
from ds4_context_core.config import (
    CONFIG_SCHEMA_ID,
    Ds4ContextConfig,
    LocalKvConfig,
    PrivacyConfig,
    load_config,
)
from ds4_context_core.privacy import (
    DEFAULT_LOCAL_PROVIDERS,
    DEFAULT_REMOTE_ALLOWED,
    PRIVACY_CLASSIFICATIONS,
    PrivacyPolicy,
    is_classification_allowed,
    privacy_destination,
)

PROVIDERS = ("openai", "anthropic", "my-vllm", "llama-server", *DEFAULT_LOCAL_PROVIDERS)


def _sends(policy, provider, classification):
    """Whether ``classification`` content would reach ``provider`` unredacted under ``policy``."""
    if not policy.enabled:
        return True
    return is_classification_allowed(classification, privacy_destination(provider, policy), policy)


def _never_wider_than_default(policy):
    default = PrivacyPolicy()
    providers = {*PROVIDERS, *policy.local_providers}
    for provider, level in itertools.product(providers, PRIVACY_CLASSIFICATIONS):
        if _sends(policy, provider, level):
            assert _sends(default, provider, level), (provider, level)
    assert policy.enabled or not default.enabled
    assert policy.redact_secrets or not default.redact_secrets


def test_the_default_config_gives_the_default_policy():
    assert Ds4ContextConfig().privacy.to_policy() == PrivacyPolicy()
    assert load_config(None).config.privacy.to_policy() == PrivacyPolicy()
    assert load_config({}).config.privacy.to_policy() == PrivacyPolicy()


def test_privacy_defaults_are_the_privacy_module_constants():
    privacy = PrivacyConfig()
    assert (privacy.local_providers, privacy.remote_allowed) == (
        DEFAULT_LOCAL_PROVIDERS,
        DEFAULT_REMOTE_ALLOWED,
    )
    # the very constants, not copies of their values
    assert PrivacyConfig.model_fields["local_providers"].default is DEFAULT_LOCAL_PROVIDERS
    assert PrivacyConfig.model_fields["remote_allowed"].default is DEFAULT_REMOTE_ALLOWED
    assert (privacy.enabled, privacy.redact_secrets) == (
        PrivacyPolicy().enabled,
        PrivacyPolicy().redact_secrets,
    )
    schema = PrivacyConfig.model_json_schema()["properties"]
    assert schema["local_providers"]["default"] == list(DEFAULT_LOCAL_PROVIDERS)
    assert schema["remote_allowed"]["default"] == list(DEFAULT_REMOTE_ALLOWED)


def test_local_kv_is_off_by_default():
    assert Ds4ContextConfig().local_kv == LocalKvConfig(enabled=False)
    assert load_config({"local_kv": {"enabled": True}}).config.local_kv.enabled is True


def test_a_user_local_provider_becomes_local():
    result = load_config({"privacy": {"local_providers": [*DEFAULT_LOCAL_PROVIDERS, "My-vLLM"]}})
    assert result.warnings == ()
    policy = result.config.privacy.to_policy()
    assert privacy_destination("my-vllm", policy) == "local"
    assert privacy_destination("ollama", policy) == "local"
    assert privacy_destination("my-vllm") == "remote"
    assert privacy_destination("openai", policy) == "remote"


def test_a_narrower_policy_is_kept():
    result = load_config({"privacy": {"remote_allowed": ["normal"], "local_providers": ["ollama"]}})
    assert result.warnings == ()
    policy = result.config.privacy.to_policy()
    assert policy == PrivacyPolicy(remote_allowed=("normal",), local_providers=("ollama",))
    _never_wider_than_default(policy)


INVALID_PRIVACY = [
    ({"remote_allowed": ["normal", "internal", "local-only"]}, "privacy.remote_allowed"),
    ({"remote_allowed": ["local-only"]}, "privacy.remote_allowed"),
    ({"remote_allowed": ["normal", "internal", "sensitive", "secret"]}, "privacy.remote_allowed"),
    ({"remote_allowed": ["Sensitive"]}, "privacy.remote_allowed"),
    ({"remote_allowed": "sensitive"}, "privacy.remote_allowed"),
    ({"remote_allowed": [None]}, "privacy.remote_allowed"),
    ({"remote_allowed": ["sensitive"] * 100}, "privacy.remote_allowed"),
    ({"local_providers": ["openai", ""]}, "privacy.local_providers"),
    ({"local_providers": ["openai", "   "]}, "privacy.local_providers"),
    ({"local_providers": ["openai\n"]}, "privacy.local_providers"),
    ({"local_providers": ["x" * 257]}, "privacy.local_providers"),
    ({"local_providers": "openai"}, "privacy.local_providers"),
    ({"local_providers": ["openai", 7]}, "privacy.local_providers"),
    ({"local_providers": [f"p{i}" for i in range(65)]}, "privacy.local_providers"),
    ({"enabled": "false"}, "privacy.enabled"),
    ({"enabled": 0}, "privacy.enabled"),
    ({"enabled": None}, "privacy.enabled"),
    ({"redact_secrets": "no"}, "privacy.redact_secrets"),
    ({"redact_secrets": 0}, "privacy.redact_secrets"),
    ({"allow_everything": True}, "privacy.allow_everything"),
]


@pytest.mark.parametrize(("section", "path"), INVALID_PRIVACY)
def test_an_invalid_privacy_field_is_reported_and_never_widens_the_policy(section, path):
    result = load_config({"privacy": section})
    assert [w.path for w in result.warnings] == [path]
    assert result.warnings[0].code in {"config-value-invalid", "config-key-unknown"}
    policy = result.config.privacy.to_policy()
    assert policy == PrivacyPolicy()
    _never_wider_than_default(policy)


@pytest.mark.parametrize("section", [False, "off", None, ["ollama"], 0])
def test_a_privacy_section_that_is_not_a_mapping_gives_the_default_policy(section):
    result = load_config({"privacy": section})
    assert [(w.code, w.path) for w in result.warnings] == [("config-section-invalid", "privacy")]
    assert result.config.privacy.to_policy() == PrivacyPolicy()


def test_an_invalid_field_does_not_undo_a_valid_restriction_next_to_it():
    result = load_config({"privacy": {"remote_allowed": ["normal"], "local_providers": ["openai", ""]}})
    assert [w.path for w in result.warnings] == ["privacy.local_providers"]
    policy = result.config.privacy.to_policy()
    assert policy.remote_allowed == ("normal",)
    assert policy.local_providers == DEFAULT_LOCAL_PROVIDERS
    _never_wider_than_default(policy)


_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.one_of(st.none(), st.integers(), st.just(""), st.just("local-only")), min_size=1, max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(
    enabled=_JUNK.filter(lambda value: not isinstance(value, bool)),
    redact=_JUNK.filter(lambda value: not isinstance(value, bool)),
    providers=_JUNK.filter(
        lambda value: not (isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value))
    ),
    remote=_JUNK.filter(lambda value: not (isinstance(value, list) and set(value) <= {"normal", "internal"})),
)
def test_any_invalid_privacy_section_leaves_the_default_policy(enabled, redact, providers, remote):
    section = {
        "enabled": enabled,
        "redact_secrets": redact,
        "local_providers": providers,
        "remote_allowed": remote,
    }
    result = load_config({"privacy": section})
    assert sorted(w.path for w in result.warnings) == sorted(f"privacy.{key}" for key in section)
    assert result.config.privacy.to_policy() == PrivacyPolicy()


@pytest.mark.parametrize("size", [0, 1, 2, 3])
def test_the_section_accepts_exactly_what_the_policy_accepts(size):
    for levels in itertools.product(PRIVACY_CLASSIFICATIONS, repeat=size):
        try:
            PrivacyPolicy(remote_allowed=levels)
        except PrivacyPolicyError:
            policy_ok = False
        else:
            policy_ok = True
        try:
            PrivacyConfig(remote_allowed=levels)
        except ValidationError:
            config_ok = False
        else:
            config_ok = True
        assert config_ok == policy_ok, levels
        assert (load_config({"privacy": {"remote_allowed": list(levels)}}).warnings == ()) == policy_ok


def test_a_config_file_with_the_new_sections_round_trips(tmp_path):
    raw = {
        "schema": CONFIG_SCHEMA_ID,
        "budget": {"hard_limit_ratio": 0.85},
        "pruning": {"dry_run": True, "never_prune_tools": ["bash"]},
        "privacy": {
            "enabled": True,
            "local_providers": ["ollama", "llama-cpp", "lmstudio", "my-vllm"],
            "remote_allowed": ["normal"],
            "redact_secrets": True,
        },
        "local_kv": {"enabled": True},
    }
    path = tmp_path / "ds4-context.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    first = load_config(json.loads(path.read_text(encoding="utf-8")))
    assert first.warnings == ()
    config = first.config
    assert config.privacy.local_providers[-1] == "my-vllm"
    assert config.privacy.remote_allowed == ("normal",)
    assert config.local_kv.enabled is True

    path.write_text(
        json.dumps({"schema": CONFIG_SCHEMA_ID, **config.model_dump(mode="json")}), encoding="utf-8"
    )
    second = load_config(json.loads(path.read_text(encoding="utf-8")))
    assert second.warnings == ()
    assert second.config == config
    assert second.config.privacy.to_policy() == config.privacy.to_policy()


def test_a_toml_config_file_loads_the_new_sections():
    text = """
schema = "ds4-context-config-v1"

[privacy]
local_providers = ["ollama", "vllm-box"]
remote_allowed = ["normal", "internal"]

[local_kv]
enabled = true
"""
    result = load_config(tomllib.loads(text))
    assert result.warnings == ()
    assert privacy_destination("vllm-box", result.config.privacy.to_policy()) == "local"
    assert result.config.local_kv.enabled is True


def test_to_policy_fails_closed_on_a_section_built_without_validation():
    unchecked = PrivacyConfig.model_construct(remote_allowed=("normal", "local-only"))
    with pytest.raises(PrivacyPolicyError):
        unchecked.to_policy()
