import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ds4_context_engine.providers import (
    MODEL_REFERENCE_ERROR_CODES,
    ModelReference,
    ModelReferenceError,
    parse_model_reference,
)


def test_only_the_first_colon_separates_provider_and_model():
    reference = parse_model_reference("ollama:hf.co/ns/repo:Q4_K_M")
    assert reference.provider == "ollama"
    assert reference.model == "hf.co/ns/repo:Q4_K_M"
    assert reference.reference == "ollama:hf.co/ns/repo:Q4_K_M"
    assert str(reference) == "ollama:hf.co/ns/repo:Q4_K_M"


def test_provider_grammar_accepts_dots_dashes_and_underscores():
    assert parse_model_reference("openai-codex:gpt-5.5").provider == "openai-codex"
    assert parse_model_reference("my_gw.v2:m").provider == "my_gw.v2"
    assert parse_model_reference("9router:x").provider == "9router"


def test_worst_realistic_reference_fits_and_one_byte_more_is_refused():
    worst = "ollama:hf.co/" + "n" * 32 + "/" + "r" * 96 + ":" + "q" * 16
    assert len(worst.encode()) == 159
    assert parse_model_reference(worst).model.endswith("q" * 16)
    assert parse_model_reference(worst + "x").reference == worst + "x"
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference(worst + "xy")
    assert caught.value.code == "model-reference-too-long"


def test_byte_limit_counts_utf8_bytes_not_characters():
    text = "p:" + "é" * 79  # 2 + 158 bytes = 160
    assert parse_model_reference(text).model == "é" * 79
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference(text + "é")
    assert caught.value.code == "model-reference-too-long"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "model-reference-empty"),
        ("gpt-4o", "model-reference-missing-separator"),
        ("openai/gpt-4o", "model-reference-missing-separator"),
        (":gpt-4o", "model-reference-invalid-provider"),
        ("-openai:gpt-4o", "model-reference-invalid-provider"),
        ("open ai:gpt-4o", "model-reference-invalid-provider"),
        ("open/ai:gpt-4o", "model-reference-invalid-provider"),
        ("openai:", "model-reference-missing-model"),
        (" openai:gpt-4o", "model-reference-not-trimmed"),
        ("openai:gpt-4o ", "model-reference-not-trimmed"),
        ("openai: gpt-4o", "model-reference-not-trimmed"),
        ("openai:gpt\x00-4o", "model-reference-control-character"),
        ("openai:gpt-4o\n", "model-reference-control-character"),
        ("openai:gpt\u200b4o", "model-reference-control-character"),
        ("openai:gpt\u20284o", "model-reference-control-character"),
        ("openai:gpt\u20294o", "model-reference-control-character"),
        ("openai:gpt\u202e4o", "model-reference-control-character"),
        ("sonnet", "model-reference-retired-alias"),
        ("Opus", "model-reference-retired-alias"),
        ("anthropic:sonnet", "model-reference-retired-alias"),
    ],
)
def test_malformed_references_are_refused_with_a_stable_code(text, code):
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference(text)
    assert caught.value.code == code
    assert code in MODEL_REFERENCE_ERROR_CODES
    assert isinstance(caught.value, ValueError)


def test_non_string_input_is_refused():
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference(42)  # type: ignore[arg-type]
    assert caught.value.code == "model-reference-not-a-string"


def test_retired_alias_message_names_the_fix():
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference("sonnet")
    assert "exact model id" in str(caught.value)


def test_error_echo_is_bounded_and_escaped():
    secretish = "openai:" + "A" * 200 + "\x1b[31m"
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference(secretish)
    message = str(caught.value)
    assert "A" * 10 not in message
    assert "A" * 9 in message  # 16 bytes of input: "openai:" + 9 letters, shorter than any key
    assert "[truncated]" in message
    assert "\x1b" not in message


def test_a_pasted_key_is_never_echoed_whole():
    key = "sk-proj-" + "Zq81mWx0aLp2Kd7Tr4Nv9Bc6"
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference(f"openai:{key} ")
    assert key[:17] not in str(caught.value)


def test_control_characters_are_escaped_in_the_echo():
    with pytest.raises(ModelReferenceError) as caught:
        parse_model_reference("openai:a\x07b")
    message = str(caught.value)
    assert "\x07" not in message
    assert "\\u0007" in message
    assert "U+0007" in message


def test_parts_must_spell_the_canonical_reference():
    assert ModelReference(provider="openai", model="gpt-4o").reference == "openai:gpt-4o"
    with pytest.raises(ModelReferenceError) as caught:
        ModelReference(provider="a:b", model="c")
    assert caught.value.code == "model-reference-not-canonical"
    with pytest.raises(ModelReferenceError) as caught:
        ModelReference(provider="", model="c")
    assert caught.value.code == "model-reference-invalid-provider"


def test_decoding_validates_as_well():
    encoded = msgspec.json.encode(parse_model_reference("ollama:llama3:8b"))
    assert msgspec.json.decode(encoded, type=ModelReference).model == "llama3:8b"
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(b'{"provider":"x y","model":"m"}', type=ModelReference)
    cause = caught.value.__cause__
    assert isinstance(cause, ModelReferenceError)
    assert cause.code == "model-reference-invalid-provider"


_provider = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,20}\Z")
_model = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Zl", "Zp", "Cs", "Zs")), min_size=1, max_size=40
)


@given(provider=_provider, model=_model)
def test_round_trip_of_valid_parts(provider, model):
    if model.lower() in ("sonnet", "opus", "haiku"):
        return
    parsed = parse_model_reference(f"{provider}:{model}")
    assert (parsed.provider, parsed.model) == (provider, model)
    assert parse_model_reference(parsed.reference) == parsed


@given(st.text(max_size=200))
def test_parser_either_accepts_or_raises_a_coded_error(text):
    codes = []
    try:
        parsed = parse_model_reference(text)
    except ModelReferenceError as error:
        codes.append(error.code)
    else:
        assert parsed.reference == text
    assert set(codes) <= set(MODEL_REFERENCE_ERROR_CODES)
