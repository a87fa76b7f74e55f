"""A plan without a configuration uses plain-struct defaults: they must be the validated model's, exactly."""

from __future__ import annotations

import msgspec
import pytest

import ds4_context_core as core
from ds4_context_core._config_defaults import DEFAULT_CONFIG, DEFAULT_CONFIG_RESULT
from ds4_context_core.config import Ds4ContextConfig, load_config
from ds4_context_core.planner import plan_context
from ds4_context_core.privacy import PrivacyPolicy

SECTIONS = tuple(Ds4ContextConfig.model_fields)


def _typed(value):
    """A value with the type of every leaf, so that 1 and 1.0, or a tuple and a list, differ."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return (type(value).__name__, [_typed(item) for item in value])
    return (type(value).__name__, value)


@pytest.mark.parametrize("section", SECTIONS)
def test_each_default_section_has_the_models_fields_values_and_types(section):
    model = getattr(Ds4ContextConfig(), section)
    plain = getattr(DEFAULT_CONFIG, section)
    assert plain.__struct_fields__ == tuple(type(model).model_fields)
    assert _typed(msgspec.structs.asdict(plain)) == _typed(model.model_dump())


def test_the_default_config_has_the_models_sections_and_is_what_loading_nothing_gives():
    assert DEFAULT_CONFIG.__struct_fields__ == SECTIONS
    as_json = msgspec.json.decode(msgspec.json.encode(DEFAULT_CONFIG))
    assert as_json == load_config(None).config.model_dump(mode="json")
    assert DEFAULT_CONFIG_RESULT.warnings == ()


def test_the_default_privacy_section_gives_the_default_policy():
    assert DEFAULT_CONFIG.privacy.to_policy() == Ds4ContextConfig().privacy.to_policy() == PrivacyPolicy()


def _message(entry, role, *blocks):
    return core.CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=blocks,
        provenance=core.Provenance(source="pi-session", session_id="s", entry_id=entry),
    )


def _long_session(steps):
    history = [_message("u0", "user", core.TextBlock(text="Refactor the parser and keep the tests green."))]
    for step in range(steps):
        call = f"c{step}"
        history.append(
            _message(
                f"a{step}",
                "assistant",
                core.TextBlock(text=f"Reading module {step}."),
                core.ToolCallBlock(id=call, name="read", arguments={"path": f"src/m{step}.py"}),
            )
        )
        body = "\n".join(f"line {line} of module {step}: value = {line * step}" for line in range(120))
        history.append(
            _message(
                f"r{step}",
                "tool",
                core.ToolResultBlock(tool_call_id=call, tool_name="read", content=body, is_error=False),
            )
        )
    history.append(_message("u1", "user", core.TextBlock(text="Now fix the failing test.")))
    return history


def test_a_plan_without_a_config_is_the_plan_with_the_validated_defaults():
    history = _long_session(40)
    kinds = set()
    # windows where the plan trims (layer 1), leaves history out and puts the task digest in front, so
    # that a default that differs would show in one of them (with the low-water mark a default cold plan
    # cuts past what layer 2 would receipt; receipts' defaults are compared field by field above)
    for window in (32_000, 48_000, 64_000):
        model = core.ModelDescriptor(provider="openai", id="gpt-4.1-mini", context_window=window)
        plain = plan_context(history, model=model)
        validated = plan_context(history, model=model, config=Ds4ContextConfig())
        assert plain.manifest.fallback is None
        kinds |= {item.kind for item in plain.items}
        assert msgspec.json.encode(plain.manifest) == msgspec.json.encode(validated.manifest)
        assert msgspec.json.encode(plain.items) == msgspec.json.encode(validated.items)
        assert msgspec.json.encode(plain.messages) == msgspec.json.encode(validated.messages)
    assert {"trimmed-tool-result", "summary"} <= kinds
