from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import pytest

from ds4_context_core import PrivacyEnforcementError
from ds4_context_core._exceptions import PrivacyPolicyError
from ds4_context_core.privacy import (
    DEFAULT_LOCAL_PROVIDERS,
    DEFAULT_REMOTE_ALLOWED,
    PRIVACY_CLASSIFICATIONS,
    PrivacyPolicy,
    classify_text,
    enforce_payload_privacy,
    is_classification_allowed,
    privacy_destination,
    privacy_policy_version,
    redact_secrets,
    sanitize_text,
)

EXCLUDED = "[DS4 {} content excluded by privacy policy]"


def remote(text: str, policy: PrivacyPolicy | None = None) -> str:
    return sanitize_text(text, destination="remote", policy=policy)[0]


def test_defaults_match_the_published_policy() -> None:
    policy = PrivacyPolicy()
    assert policy.enabled is True
    assert policy.redact_secrets is True
    assert DEFAULT_LOCAL_PROVIDERS == ("ollama", "llama-cpp", "lmstudio")
    assert DEFAULT_REMOTE_ALLOWED == ("normal", "internal")
    assert PRIVACY_CLASSIFICATIONS == ("normal", "internal", "sensitive", "local-only")
    assert (policy.local_providers, policy.remote_allowed) == (
        DEFAULT_LOCAL_PROVIDERS,
        DEFAULT_REMOTE_ALLOWED,
    )


def test_destination_is_decided_by_provider_id_case_insensitively() -> None:
    assert privacy_destination("Ollama") == "local"
    assert privacy_destination("llama-cpp") == "local"
    assert privacy_destination("openai") == "remote"
    assert privacy_destination("ollama-cloud") == "remote"
    custom = PrivacyPolicy(local_providers=("my-box",))
    assert privacy_destination("MY-BOX", custom) == "local"
    assert privacy_destination("ollama", custom) == "remote"


def test_closed_markers_block_only_disallowed_levels_and_tags_never_leave() -> None:
    text = (
        "a [ds4:internal]b[/ds4:internal] c [ds4:sensitive]d[/ds4:sensitive] "
        "e [DS4:Local-Only]f[/ds4:local-only]"
    )
    assert remote(text) == f"a b c {EXCLUDED.format('sensitive')} e {EXCLUDED.format('local-only')}"
    assert sanitize_text(text, destination="local") == ("a b c d e f", 0, 0)


def test_leading_unclosed_marker_classifies_the_rest_of_the_string() -> None:
    assert remote("  [ds4:sensitive]everything after") == "  " + EXCLUDED.format("sensitive")
    assert classify_text("[ds4:local-only]rest") == "local-only"


def test_escaped_marker_is_literal_text_and_kept_verbatim() -> None:
    text = "write \\[ds4:local-only]like this\\[/ds4:local-only] in docs"
    assert remote(text) == text
    assert classify_text(text) == "normal"


def test_an_even_run_of_backslashes_does_not_escape_the_marker() -> None:
    assert remote("path C:\\\\[ds4:local-only]x[/ds4:local-only]") == "path C:\\\\" + EXCLUDED.format(
        "local-only"
    )


def test_a_tag_with_an_unknown_level_protects_as_local_only() -> None:
    text = "a [ds4:private]x[/ds4:private] b"
    assert remote(text) == f"a {EXCLUDED.format('local-only')} b"
    assert sanitize_text(text, destination="local")[0] == "a x b"
    assert classify_text(text) == "local-only"


@pytest.mark.parametrize(
    "text",
    [
        "ok [/ds4:local-only] stray close",
        "mid [ds4:local-only]never closed",
        "[ds4:sensitive]a[/ds4:internal]",
        "[ds4:internal]x[/ds4:internal] then [ds4:local-only]open",
    ],
)
def test_unbalanced_markers_raise_the_floor_of_the_whole_string(text: str) -> None:
    out, blocked, _ = sanitize_text(text, destination="remote")
    assert blocked == 1
    assert out.startswith("[DS4 ")
    assert out.endswith(" content excluded by privacy policy]")
    for visible in ("ok", "mid", "then"):
        assert visible not in out


def test_nesting_never_downgrades() -> None:
    text = "[ds4:local-only]outer [ds4:normal]inner[/ds4:normal] tail[/ds4:local-only] free"
    assert remote(text) == EXCLUDED.format("local-only") + " free"
    assert classify_text("[ds4:internal]a[ds4:normal]b[/ds4:normal][/ds4:internal]") == "internal"


@pytest.mark.parametrize(
    ("secret", "placeholder"),
    [
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
            "[DS4 REDACTED PRIVATE KEY]",
        ),
        ("sk-proj-HUg8gp38G4O5mnjaykj1ux", "[DS4 REDACTED CREDENTIAL]"),
        ("sk-ant-api03-abcdefgh", "[DS4 REDACTED CREDENTIAL]"),
        ("ghp_xfwxlcPAnFHS0GcA05rfrUNZQW7WzYvgoEuV", "[DS4 REDACTED CREDENTIAL]"),
        ("gho_16C7e42F292c6912E7710c838347Ae178B4a", "[DS4 REDACTED CREDENTIAL]"),
        ("AKIAF98SS3JTBXX31FZ9", "[DS4 REDACTED CREDENTIAL]"),
        ("Bearer eyJhbGciOiJIUzI1NiJ9.payload", "Bearer [DS4 REDACTED TOKEN]"),
        ("api_key=abc123secret", "api_key=[DS4 REDACTED SECRET]"),
        ('"password": "hunter2"', '"password": "[DS4 REDACTED SECRET]"'),
        ("CLIENT_SECRET: Zq81mWx0aL", "CLIENT_SECRET: [DS4 REDACTED SECRET]"),
        ("access-token = 9fQ2-x7Lp0", "access-token = [DS4 REDACTED SECRET]"),
        ("APIKEY=zz9Kq7rT2w", "APIKEY=[DS4 REDACTED SECRET]"),
        ("authorization: bearer abcdefghij", "authorization: bearer [DS4 REDACTED TOKEN]"),
    ],
)
def test_each_secret_form_is_redacted_for_remote_destinations(secret: str, placeholder: str) -> None:
    out, blocked, redactions = sanitize_text(f"before {secret} after", destination="remote")
    assert out == f"before {placeholder} after"
    assert (blocked, redactions) == (0, 1)
    assert sanitize_text(f"before {secret} after", destination="local")[0] == f"before {secret} after"
    assert remote(f"x {secret}", PrivacyPolicy(redact_secrets=False)) == f"x {secret}"


def test_a_private_key_without_its_end_line_is_redacted_to_the_end() -> None:
    assert remote("key:\n-----BEGIN PRIVATE KEY-----\nMIIE truncated") == "key:\n[DS4 REDACTED PRIVATE KEY]"


def test_ordinary_words_are_not_redacted() -> None:
    text = "the task-force asked for a sketch of the password policy and the bearer of news"
    assert redact_secrets(text) == (text, 0)


def test_payload_traversal_sanitizes_content_keys_and_keeps_structural_keys() -> None:
    payload = {
        "model": "gpt-x",
        "user": "alice",
        "messages": [
            {"role": "user", "content": "key sk-f3Hbgzw3m4fZ6hQ2ak7eghzB"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "[ds4:sensitive]plan[/ds4:sensitive]"}],
                "tool_calls": [
                    {"id": "c1", "function": {"name": "read", "arguments": '{"password": "p4ss-w0rd!"}'}}
                ],
            },
        ],
        "temperature": 0.2,
        "stream": False,
    }
    original = copy.deepcopy(payload)
    result = enforce_payload_privacy(payload, provider="openai")
    assert payload == original
    assert result.payload["model"] == "gpt-x"
    assert result.payload["user"] == "alice"
    assert result.payload["temperature"] == 0.2
    assert result.payload["stream"] is False
    first, second = result.payload["messages"]
    assert first == {"role": "user", "content": "key [DS4 REDACTED CREDENTIAL]"}
    assert second["content"] == [{"type": "text", "text": EXCLUDED.format("sensitive")}]
    assert second["tool_calls"][0]["id"] == "c1"
    assert second["tool_calls"][0]["function"]["name"] == "read"
    assert second["tool_calls"][0]["function"]["arguments"] == '{"password": "[DS4 REDACTED SECRET]"}'
    assert (result.destination, result.changed, result.blocked_blocks, result.secret_redactions) == (
        "remote",
        True,
        1,
        2,
    )
    assert result.payload is not payload
    assert result.payload["messages"] is not payload["messages"]


def test_a_marker_outside_content_keys_is_still_enforced() -> None:
    result = enforce_payload_privacy({"role": "[ds4:local-only]private name[/ds4:local-only]"}, provider="x")
    assert result.payload == {"role": EXCLUDED.format("local-only")}


def test_a_blocked_name_stays_an_identifier() -> None:
    # Providers check tool names against a pattern: a blocked one becomes a fixed identifier.
    result = enforce_payload_privacy(
        {"name": "[ds4:local-only]lookup_patient[/ds4:local-only]"}, provider="x"
    )
    assert result.payload == {"name": "ds4_excluded"}
    assert result.blocked_blocks == 1


def test_binary_is_blocked_for_remote_and_kept_for_local() -> None:
    payload = {"messages": [{"role": "user", "content": b"\x89PNG"}]}
    result = enforce_payload_privacy(payload, provider="anthropic")
    assert result.payload["messages"][0]["content"] == "[DS4 binary content excluded by privacy policy]"
    assert result.blocked_blocks == 1
    assert enforce_payload_privacy(payload, provider="ollama").payload["messages"][0]["content"] == b"\x89PNG"


def test_keys_that_collide_after_sanitizing_fail_closed() -> None:
    payload = {"messages": [{"[ds4:normal]content[/ds4:normal]": "a", "content": "b"}]}
    original = copy.deepcopy(payload)
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy(payload, provider="openai")
    assert raised.value.code == "privacy-key-collision"
    assert payload == original


def test_content_keys_holding_secrets_are_redacted() -> None:
    payload = {"arguments": {"sk-f3Hbgzw3m4fZ6hQ2ak7eghzB": 1}}
    assert enforce_payload_privacy(payload, provider="openai").payload == {
        "arguments": {"[DS4 REDACTED CREDENTIAL]": 1}
    }


class Exploding(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom: secret prompt text")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom: secret prompt text")

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"messages": [Exploding()]}, "privacy-enforcement-failed"),
        ({"messages": [{"content": object()}]}, "privacy-unsupported-value"),
        ({"messages": {frozenset(): "x"}}, "privacy-unsupported-value"),
    ],
)
def test_any_failure_raises_privacy_enforcement_error_without_content(payload: Any, code: str) -> None:
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy(payload, provider="openai")
    assert raised.value.code == code
    assert "secret prompt" not in str(raised.value)
    assert raised.value.__cause__ is None


def test_deep_and_circular_payloads_fail_closed() -> None:
    deep: Any = "x"
    for _ in range(500):
        deep = {"content": deep}
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy(deep, provider="openai")
    assert raised.value.code == "privacy-payload-too-deep"
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy({"messages": loop}, provider="openai")
    assert raised.value.code == "privacy-payload-too-deep"


def test_missing_provider_fails_closed() -> None:
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy({"messages": []}, provider=" ")
    assert raised.value.code == "privacy-enforcement-failed"


def test_disabled_policy_passes_the_payload_through_untouched() -> None:
    payload = {"messages": [{"role": "user", "content": "[ds4:local-only]x[/ds4:local-only]"}]}
    result = enforce_payload_privacy(payload, provider="openai", policy=PrivacyPolicy(enabled=False))
    assert result.payload is payload
    assert (result.changed, result.blocked_blocks, result.secret_redactions) == (False, 0, 0)


def test_unchanged_payload_reports_no_change() -> None:
    result = enforce_payload_privacy({"messages": [{"role": "user", "content": "hello"}]}, provider="openai")
    assert (result.changed, result.blocked_blocks, result.secret_redactions) == (False, 0, 0)


def test_summary_never_holds_the_payload() -> None:
    result = enforce_payload_privacy({"messages": [{"content": "sk-f3Hbgzw3m4fZ6hQ2ak7eghzB"}]}, provider="x")
    summary = msgspec.to_builtins(result.summary())
    assert summary == {
        "provider": "x",
        "destination": "remote",
        "changed": True,
        "blockedBlocks": 0,
        "secretRedactions": 1,
    }


@pytest.mark.parametrize(
    ("remote_allowed", "code"),
    [(("normal", "local-only"), "privacy-policy-invalid"), (("secret",), "privacy-classification-unknown")],
)
def test_policies_that_would_weaken_protection_are_rejected(remote_allowed: Any, code: str) -> None:
    with pytest.raises(PrivacyPolicyError) as raised:
        PrivacyPolicy(remote_allowed=remote_allowed)
    assert raised.value.code == code
    with pytest.raises((PrivacyPolicyError, msgspec.ValidationError)):
        msgspec.convert({"remoteAllowed": list(remote_allowed)}, PrivacyPolicy)


def test_policy_decodes_from_camel_case_config_and_stricter_policy_blocks_more() -> None:
    policy = msgspec.convert({"remoteAllowed": ["normal"], "localProviders": ["vllm-local"]}, PrivacyPolicy)
    assert remote("[ds4:internal]x[/ds4:internal]", policy) == EXCLUDED.format("internal")
    assert is_classification_allowed("internal", "remote", policy) is False
    assert is_classification_allowed("local-only", "local", policy) is True
    assert privacy_destination("vllm-local", policy) == "local"


def test_policy_version_is_stable_and_tracks_effect() -> None:
    assert privacy_policy_version() == privacy_policy_version(PrivacyPolicy())
    assert privacy_policy_version().startswith("ds4-privacy-policy-v1:")
    assert privacy_policy_version(PrivacyPolicy(local_providers=("OLLAMA", "lmstudio", "llama-cpp"))) == (
        privacy_policy_version()
    )
    assert privacy_policy_version(PrivacyPolicy(redact_secrets=False)) != privacy_policy_version()


def test_tuples_and_structs_are_traversed() -> None:
    class Note(msgspec.Struct, rename="camel"):
        text: str

    payload = {
        "messages": ({"content": ("sk-f3Hbgzw3m4fZ6hQ2ak7eghzB",)}, Note(text="Bearer abc123defghijkl"))
    }
    result = enforce_payload_privacy(payload, provider="openai")
    assert json.dumps(result.payload) == json.dumps(
        {"messages": [{"content": ["[DS4 REDACTED CREDENTIAL]"]}, {"text": "Bearer [DS4 REDACTED TOKEN]"}]}
    )


def _base62_checksum(body: str) -> str:
    """The 6 base62 digits of the CRC32 of ``body``, as GitHub and npm end their tokens with."""
    import binascii  # noqa: PLC0415

    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    value = binascii.crc32(body.encode())
    digits = ""
    while value:
        value, digit = divmod(value, 62)
        digits = alphabet[digit] + digits
    return digits.rjust(6, "0")


@pytest.mark.parametrize("prefix", ["ghp_", "gho_", "ghs_", "npm_"])
def test_a_token_without_digits_is_caught_by_its_checksum(prefix: str) -> None:
    body = "QwErTyUiOpAsDfGhJkLzXcVbNmQwEr"  # letters only: caught by the checksum, not by its mix
    token = prefix + body + _base62_checksum(body)
    assert sanitize_text(f"key {token}.", destination="remote")[0] == "key [DS4 REDACTED CREDENTIAL]."


@pytest.mark.parametrize(
    "text",
    [
        "ghs_ProcessHandlerFactoryImplementation",  # a symbol that starts like a GitHub token
        "ghp_" + "a" * 36,  # no checksum, no digits: a placeholder
        "npm_" + "x" * 36,
        "sk_live_abcdefghijklmnop",  # a Stripe-looking name of one kind of character
        "AIza" + "b" * 35,
        "hf_" + "modelcardsandconfigurationfiles",
        "xoxo-hugs-and-kisses-to-you",  # Slack tokens hold their team and user numbers
        # Two base64url JSON parts, but the first names no algorithm: not a JWT.
        "eyJmb28iOiJiYXIifQ.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig",
    ],
)
def test_a_name_that_only_starts_like_a_token_is_left_alone(text: str) -> None:
    assert sanitize_text(f"see {text} here", destination="remote") == (f"see {text} here", 0, 0)


def test_base64_inside_a_sentence_that_decodes_to_a_secret_is_redacted() -> None:
    import base64  # noqa: PLC0415

    blob = base64.b64encode(b"export OPENAI_API_KEY=sk-proj-Zq81mWx0aLp2Kd7Tr4Nv9Bc6").decode()
    text = f"the CI log had {blob} in it"
    assert sanitize_text(text, destination="remote") == (
        "the CI log had [DS4 REDACTED SECRET] in it",
        0,
        1,
    )
    # In a JSON text inside a string too, and in tool arguments (a payload's nested object).
    payload = {"messages": [{"role": "tool", "content": json.dumps({"note": f"see {blob}"})}]}
    sent = json.dumps(enforce_payload_privacy(payload, provider="openai").payload)
    assert blob not in sent
    assert "sk-proj-" not in sent


def test_base64_that_decodes_to_no_secret_or_to_binary_is_left_alone() -> None:
    import base64  # noqa: PLC0415

    words = base64.b64encode(b"the build passed on every platform we test").decode()
    binary = base64.b64encode(bytes(range(256))).decode()
    integrity = "sha512-" + base64.b64encode(bytes(range(64))).decode()
    for text in (f"log: {words} done", f"data:image/png;base64,{binary}", f'"integrity": "{integrity}"'):
        assert sanitize_text(text, destination="remote") == (text, 0, 0)
