"""Every common secret format is caught wherever it sits, and code that only names a secret is left alone.

The formats are the ones ``docs/core/privacy.md`` lists; each secret is generated fresh in its real shape
and planted at the start, middle or end of a text, as an object value under a secret's name and as one
under a neutral name, in the four payload formats, plain, in fullwidth letters, with zero-width spaces
and wrapped in base64 (a whole string, or a blob inside a sentence).
"""

from __future__ import annotations

import base64
import binascii
import json
import string
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ds4_context_core as core
from ds4_context_core import PrivacyEnforcementError
from ds4_context_core.interop import to_anthropic_messages, to_openai_chat, to_openai_responses
from ds4_context_core.privacy import enforce_payload_privacy, redact_secrets

# Shipped beside the tests, so it travels with them (the compiled session runs a copy of tests/).
CORPUS = Path(__file__).resolve().parent / "fixtures" / "privacy-code-corpus.txt"
ALNUM = string.ascii_letters + string.digits


def _drawn_at_random(text: str) -> bool:
    """No 8 characters in a row each repeating or following the one before (``aaaaaaaa``, ``01234567``)."""
    steps = [ord(b) - ord(a) in (0, 1) for a, b in pairwise(text)]
    return not any(all(steps[start : start + 7]) for start in range(len(steps) - 6))


def _chars(alphabet: str, size: int) -> st.SearchStrategy[str]:
    # At least a few distinct characters and nothing counted, as every issued token has: one repeated
    # character or a count (``0123456789abcdef``) is a placeholder.
    return (
        st.text(alphabet=alphabet, min_size=size, max_size=size)
        .filter(lambda text: len(set(text)) >= 6)
        .filter(_drawn_at_random)
    )


def _mixed(alphabet: str, size: int) -> st.SearchStrategy[str]:
    """A generated token's body: random, so it mixes at least two of lower case, upper case and digits."""
    return _chars(alphabet, size).filter(
        lambda text: (
            sum(
                (
                    any(c.islower() for c in text),
                    any(c.isupper() for c in text),
                    any(c.isdigit() for c in text),
                )
            )
            >= 2
        )
    )


def _checksummed(prefix: str) -> st.SearchStrategy[tuple[str, str]]:
    """A GitHub or npm token: 30 random characters and their CRC32 in 6 base62 digits (any letters)."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

    def token(body: str) -> tuple[str, str]:
        value = binascii.crc32(body.encode())
        digits = ""
        while value:
            value, digit = divmod(value, 62)
            digits = alphabet[digit] + digits
        return f"{prefix}{body}{digits.rjust(6, '0')}", body

    return _chars(ALNUM, 30).map(token)


def _jwt(claims: str) -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps({"sub": claims}).encode()).rstrip(b"=").decode()
    return f"{head}.{body}.{claims[::-1]}"


# format -> (strategy of the text to plant, the part that must never reach a remote provider)
FORMATS: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    "openai": _chars(ALNUM, 40).map(lambda s: (f"sk-proj-{s}", s)),
    "anthropic": _chars(ALNUM, 60).map(lambda s: (f"sk-ant-api03-{s}AA", s)),
    "stripe": st.tuples(st.sampled_from(["sk_live_", "rk_live_", "sk_test_"]), _mixed(ALNUM, 24)).map(
        lambda p: (p[0] + p[1], p[1])
    ),
    "aws-access-key-id": _chars(string.ascii_uppercase + string.digits, 16).map(lambda s: (f"AKIA{s}", s)),
    "aws-secret-access-key": _chars(ALNUM + "+/", 40).map(lambda s: (f"AWS_SECRET_ACCESS_KEY={s}", s)),
    "github": st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]).flatmap(_checksummed),
    "github-fine-grained": _mixed(ALNUM, 60).map(lambda s: (f"github_pat_11AB{s}", s)),
    "gitlab": _chars(ALNUM, 20).map(lambda s: (f"glpat-{s}", s)),
    "google": _mixed(ALNUM, 35).map(lambda s: (f"AIza{s}", s)),
    "slack": _chars(ALNUM, 24).map(lambda s: (f"xoxb-123456789012-{s}", s)),
    "huggingface": _mixed(string.ascii_letters, 34).map(lambda s: (f"hf_{s}", s)),
    "npm": _checksummed("npm_"),
    "jwt": _chars(ALNUM, 24).map(lambda s: (_jwt(s), s[::-1])),
    "pem": _chars(ALNUM + "+/", 64).map(
        lambda s: (f"-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----", s)
    ),
    "pgp": _chars(ALNUM + "+/", 64).map(
        lambda s: (f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{s}\n-----END PGP PRIVATE KEY BLOCK-----", s)
    ),
    "credential-url": _chars(ALNUM, 16).map(lambda s: (f"postgres://app:{s}@db.internal:5432/app", s)),
    "bearer": _chars(ALNUM + "-._", 40).map(lambda s: (f"Authorization: Bearer {s}", s)),
    "password": _chars(ALNUM + "!#&", 14)
    .filter(lambda s: any(c.isdigit() for c in s))
    .map(lambda s: (f'password = "{s}"', s)),
}
WRAPPINGS = ("plain", "fullwidth", "zero-width", "base64")
POSITIONS = ("start", "middle", "end", "object-value", "neutral-object-value")


def _wrap(text: str, wrapping: str) -> str:
    if wrapping == "fullwidth":
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)
    if wrapping == "zero-width":
        return "\u200b".join(text[i : i + 5] for i in range(0, len(text), 5))
    if wrapping == "base64":
        return base64.b64encode(text.encode()).decode()
    return text


def _message(number: int, role: str, *blocks: Any) -> core.CanonicalMessage:
    return core.CanonicalMessage(
        id=f"s:{number}",
        source_entry_id=str(number),
        role=role,
        blocks=blocks,
        provenance=core.Provenance(source="runtime-session", session_id="s", entry_id=str(number)),
    )


def _history(text: str, position: str, wrapping: str) -> tuple[core.CanonicalMessage, ...]:
    arguments: dict[str, Any] = {"path": "src/app.py"}
    prose = "the build fails in the parser module"
    if position == "start":
        prose = f"{text} {prose}"
    elif position == "middle":
        prose = f"the build fails\n{text}\nin the parser module"
    elif position == "end":
        prose = f"{prose} {text}"
    elif position == "object-value":
        arguments["credential"] = text
    else:
        arguments["note"] = text
    call = core.ToolCallBlock(id="call-1", name="read", arguments=arguments)
    result = core.ToolResultBlock(tool_call_id="call-1", tool_name="read", content=prose)
    return (
        _message(1, "user", core.TextBlock(text=prose)),
        _message(2, "assistant", core.TextBlock(text="Reading it."), call),
        _message(3, "tool", result),
    )


PAYLOADS = {
    "canonical": lambda messages: {"messages": msgspec.to_builtins(messages)},
    "openai-chat": lambda messages: {"messages": to_openai_chat(messages)},
    "openai-responses": lambda messages: {"input": to_openai_responses(messages)},
    "anthropic": lambda messages: dict(to_anthropic_messages(messages)),
}


def _normalised(text: str) -> str:
    return "".join(chr(ord(c) - 0xFEE0) if 0xFF01 <= ord(c) <= 0xFF5E else c for c in text if c != "\u200b")


@st.composite
def _case(draw: st.DrawFn) -> tuple[str, str, str, str, str]:
    name = draw(st.sampled_from(sorted(FORMATS)))
    text, secret = draw(FORMATS[name])
    position = draw(st.sampled_from(POSITIONS))
    wrapping = draw(st.sampled_from(WRAPPINGS))
    return name, text, secret, position, wrapping


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_case(), payload_format=st.sampled_from(sorted(PAYLOADS)))
def test_every_format_is_caught_in_every_position_and_payload_format(case, payload_format):
    name, text, secret, position, wrapping = case
    planted = _wrap(text, wrapping)
    payload = PAYLOADS[payload_format](_history(planted, position, wrapping))
    result = enforce_payload_privacy(payload, provider="openai")
    sent = json.dumps(result.payload, ensure_ascii=False)
    assert secret not in _normalised(sent), (name, position, wrapping)
    assert planted not in sent
    assert result.secret_redactions >= 1
    assert "src/app.py" in sent  # what is not secret still goes


def _corpus() -> list[str]:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line and not line.startswith("# ")]


def test_the_code_corpus_is_never_changed() -> None:
    lines = _corpus()
    assert len(lines) > 100
    assert [line for line in lines if redact_secrets(line)[1]] == []
    joined = "\n".join(lines)
    assert redact_secrets(joined) == (joined, 0)


@pytest.mark.parametrize("payload_format", sorted(PAYLOADS))
def test_the_code_corpus_goes_out_unchanged_in_every_payload_format(payload_format: str) -> None:
    lines = _corpus()
    messages = tuple(
        _message(number, "user" if number % 2 else "assistant", core.TextBlock(text=line))
        for number, line in enumerate(lines, start=1)
    )
    result = enforce_payload_privacy(PAYLOADS[payload_format](messages), provider="openai")
    assert (result.secret_redactions, result.changed) == (0, False)


@pytest.mark.parametrize(
    ("value", "redacted"),
    [
        ("s3cr3t-Value!", True),
        ("Zq81mWx0aLp2", True),
        ("", False),
        ("${DB_PASSWORD}", False),
        ("<your-password>", False),
        ("********", False),
        ("OPENAI_API_KEY", False),
        ("api_key", False),
        ("development", False),
    ],
)
@pytest.mark.parametrize("payload_format", ["canonical", "anthropic", "openai-chat", "openai-responses"])
def test_an_object_value_under_a_secrets_name_is_judged_the_same_in_every_format(
    value: str, redacted: bool, payload_format: str
) -> None:
    call = core.ToolCallBlock(id="call-1", name="login", arguments={"user": "ann", "password": value})
    result = core.ToolResultBlock(tool_call_id="call-1", tool_name="login", content="ok")
    payload = PAYLOADS[payload_format]((_message(1, "assistant", call), _message(2, "tool", result)))
    sent = enforce_payload_privacy(payload, provider="openai")
    assert sent.secret_redactions == (1 if redacted else 0)
    if redacted:
        assert value not in json.dumps(sent.payload)


# Documentation's stand-ins: words for a secret, counted or repeated characters. No issuer makes one.
STAND_INS = (
    "deploy with key sk-live-0123456789abcdefghijklmnop",
    "the AWS docs use AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "sk-ant-api03-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "export OPENAI_API_KEY=sk-proj-1234567890abcdefghij",
    "ghp_0000000000000000000000000000000000000",
    "xoxb-0000000000-0000000000-aaaaaaaaaaaaaaaaaaaaaaaa",
    'password = "changeme"',
    'password = "change-me-please"',
    'api_key = "your-api-key"',
    '{"token": "<token>"}',
    'client_secret: "PLACEHOLDER_VALUE"',
    'secret_key = "replace-me-with-a-key"',
    "postgres://app:changeme@db:5432/app",
    "postgres://app:0123456789abcdef@db:5432/app",
    "Authorization: Bearer 0123456789abcdef0123456789",
    "Authorization: Bearer xxxxxxxxxxxxxxxx",
)


@pytest.mark.parametrize("text", STAND_INS)
def test_documentations_stand_ins_for_a_secret_are_sent_as_written(text: str) -> None:
    assert redact_secrets(text) == (text, 0)
    payload = {"messages": [{"role": "user", "content": text}]}
    assert enforce_payload_privacy(payload, provider="openai").secret_redactions == 0


def _uncounted(text: str) -> bool:
    """No 4 characters in a row each repeating or following the one before: random, as a token's body is."""
    steps = [ord(b) - ord(a) in (0, 1) for a, b in pairwise(text)]
    return not any(all(steps[start : start + 3]) for start in range(len(steps) - 2))


@settings(max_examples=400, deadline=None)
@given(
    head=_mixed(ALNUM, 14).filter(_uncounted),
    tail=_mixed(ALNUM, 14).filter(_uncounted),
    alphabet=st.sampled_from([string.digits, string.ascii_lowercase, string.ascii_uppercase]),
    start=st.integers(min_value=0, max_value=6),
    size=st.integers(min_value=4, max_value=10),
    repeat=st.booleans(),
    prefix=st.sampled_from(["sk-proj-", "sk-ant-api03-", "glpat-", "hf_", "sk_live_"]),
)
def test_a_random_key_that_holds_a_short_count_is_still_a_key(
    head: str, tail: str, alphabet: str, start: int, size: int, repeat: bool, prefix: str
) -> None:
    # At most 10 counted characters of 32 or more: a key that happens to hold "1234" or "aaaa" stays a key.
    counted = alphabet[start] * size if repeat else alphabet[start : start + size]
    key = f"{prefix}{head}{counted}{tail}"
    redacted, found = redact_secrets(f"key {key} here")
    assert found == 1
    assert head not in redacted
    assert tail not in redacted


SECRET = "sk-proj-" + "Zq81mWx0aLp2Kd7Tr4Nv9Bc6"


def _anthropic(thinking: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": thinking, "signature": "EqQBCkYIBRgCIkD"},
                    {"type": "text", "text": "done"},
                ],
            },
        ]
    }


def test_a_signed_thinking_block_holding_a_secret_is_dropped_not_edited() -> None:
    result = enforce_payload_privacy(_anthropic(f"the key is {SECRET}"), provider="anthropic")
    content = result.payload["messages"][1]["content"]
    assert content == [{"type": "text", "text": "done"}]
    assert SECRET not in json.dumps(result.payload)
    assert result.blocked_blocks == 1


def test_a_clean_signed_thinking_block_goes_as_it_is() -> None:
    payload = _anthropic("look at the parser first")
    result = enforce_payload_privacy(payload, provider="anthropic")
    assert result.payload == payload
    assert result.changed is False


def test_a_signed_block_that_is_not_in_a_list_fails_closed() -> None:
    block = {"type": "thinking", "thinking": f"[ds4:local-only]{SECRET}[/ds4:local-only]", "signature": "x1"}
    for payload in (block, {"messages": {"only": block}}):
        with pytest.raises(PrivacyEnforcementError) as raised:
            enforce_payload_privacy(payload, provider="anthropic")
        assert raised.value.code == "privacy-signed-block"
        assert SECRET not in str(raised.value)


def test_deep_nesting_fails_closed_with_a_code() -> None:
    deep: Any = "x"
    for _ in range(10_000):
        deep = {"content": [deep]}
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy({"messages": [deep]}, provider="openai")
    assert raised.value.code == "privacy-payload-too-deep"


@pytest.mark.parametrize("depth", [40, 10_000])
def test_an_escaped_secret_in_a_json_text_too_deep_to_decode_is_still_caught(depth: int) -> None:
    # 40: decodable, but deeper than the rules walk; 10,000: past the decoder's own limit.
    text = "[" * depth + '"\\u0073k-proj-Zq81mWx0aLp2Kd7Tr4Nv9Bc6"' + "]" * depth
    result = enforce_payload_privacy({"messages": [{"role": "user", "content": text}]}, provider="openai")
    sent = result.payload["messages"][0]["content"]
    assert "Zq81mWx0aLp2" not in sent
    assert sent == "[" * depth + '"[DS4 REDACTED CREDENTIAL]"' + "]" * depth


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "\\u0073k-proj-Zq81mWx0aLp2Kd7Tr4Nv9Bc6" ,,}',  # broken JSON
        "the log says \\u0073k-proj-Zq81mWx0aLp2Kd7Tr4Nv9Bc6 twice",  # escapes in prose
    ],
)
def test_an_escaped_secret_outside_decodable_json_is_caught(text: str) -> None:
    redacted, found = redact_secrets(text)
    assert found == 1
    assert "Zq81mWx0aLp2" not in redacted


def test_a_50_megabyte_string_is_sanitized() -> None:
    big = ("plain text line with a token count = 5\n" * 1_300_000) + SECRET
    result = enforce_payload_privacy({"messages": [{"role": "user", "content": big}]}, provider="openai")
    assert result.secret_redactions == 1
    assert result.payload["messages"][0]["content"].endswith("[DS4 REDACTED CREDENTIAL]")


def test_invalid_surrogates_are_sanitized_not_raised() -> None:
    text = f"bad \ud800 surrogate {SECRET} and \udfff"
    result = enforce_payload_privacy({"messages": [{"role": "user", "content": text}]}, provider="openai")
    assert SECRET not in result.payload["messages"][0]["content"]
    assert "\ud800" in result.payload["messages"][0]["content"]


def test_a_value_that_raises_while_sanitized_fails_closed_without_its_text() -> None:
    class Hostile(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[override]
            raise RuntimeError(SECRET)

    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy({"messages": [{"content": Hostile(a=1)}]}, provider="openai")
    assert raised.value.code == "privacy-enforcement-failed"
    assert SECRET not in str(raised.value)
    assert raised.value.__cause__ is None
