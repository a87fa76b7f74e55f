"""Property: secrets and private values planted in every content position never reach a remote provider."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ds4_context_core.privacy import PRIVACY_CONTENT_KEYS, enforce_payload_privacy

# Filler never holds a backslash (which would escape a marker on purpose) and is kept apart from plants by
# a space, as secrets are in real text.
# Its letters are disjoint from the hex tokens, so a planted token can only appear if it leaked.
FILLER = st.text(alphabet=st.sampled_from("ijklmnop XYZ .,;:!?()[]{}-_/'\"\n\t"), max_size=24)


def _drawn_at_random(token: str) -> bool:
    """No 8 characters in a row each repeating or following the one before (``00000000``, ``01234567``):
    privacy leaves such counted values alone as documentation's stand-ins, and no issuer makes one."""
    steps = [ord(b) - ord(a) in (0, 1) for a, b in pairwise(token)]
    return not any(all(steps[start : start + 7]) for start in range(len(steps) - 6))


TOKEN = st.text(alphabet="0123456789abcdef", min_size=20, max_size=28).filter(_drawn_at_random)
NEUTRAL_KEYS = ("value", "body", "note", "data", "extra", "payload_part")


def _plant(kind: str, token: str) -> tuple[str, str]:
    """Text to plant and the substring that must never reach a remote provider."""
    private = f"PRIV{token}"
    plants = {
        "local-only": (f"[ds4:local-only]{private}[/ds4:local-only]", private),
        "sensitive": (f"[ds4:sensitive]{private}[/ds4:sensitive]", private),
        "upper": (f"[DS4:LOCAL-ONLY]{private}[/DS4:LOCAL-ONLY]", private),
        "nested": (f"[ds4:sensitive]a [ds4:normal]{private}[/ds4:normal] b[/ds4:sensitive]", private),
        "unbalanced": (f"[ds4:local-only]{private}", private),
        "openai": (f"sk-proj-{token}", token),
        "anthropic": (f"sk-ant-api03-{token}", token),
        "github": (f"ghp_{token}{token}", token),
        "aws": (f"AKIA{token.upper()[:16]}", token.upper()[:16]),
        "bearer": (f"Authorization: Bearer {token}", token),
        "password": (f"password={token}", token),
        "api-key": (f'"api_key": "{token}"', token),
        "pem": (f"-----BEGIN EC PRIVATE KEY-----\n{token}\n-----END EC PRIVATE KEY-----", token),
    }
    return plants[kind]


PLANT_KINDS = st.sampled_from(
    [
        "local-only",
        "sensitive",
        "upper",
        "nested",
        "unbalanced",
        "openai",
        "anthropic",
        "github",
        "aws",
        "bearer",
        "password",
        "api-key",
        "pem",
    ]
)


@st.composite
def planted_text(draw: st.DrawFn, secrets: list[str]) -> str:
    kind = draw(PLANT_KINDS)
    text, secret = _plant(kind, draw(TOKEN))
    secrets.append(secret)
    return f"{draw(FILLER)} {text} {draw(FILLER)}"


@st.composite
def content_tree(draw: st.DrawFn, secrets: list[str], depth: int = 0) -> Any:
    if depth >= 3 or draw(st.booleans()):
        return draw(planted_text(secrets))
    keys = st.sampled_from(PRIVACY_CONTENT_KEYS + NEUTRAL_KEYS)
    if draw(st.booleans()):
        size = draw(st.integers(min_value=1, max_value=3))
        return [draw(content_tree(secrets, depth + 1)) for _ in range(size)]
    names = draw(st.lists(keys, min_size=1, max_size=3, unique=True))
    return {name: draw(content_tree(secrets, depth + 1)) for name in names}


@st.composite
def planted_payload(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    secrets: list[str] = []
    messages = [
        {"role": draw(st.sampled_from(["user", "assistant", "tool"])), "content": draw(content_tree(secrets))}
        for _ in range(draw(st.integers(min_value=1, max_value=4)))
    ]
    payload: dict[str, Any] = {"model": "remote-model", "messages": messages}
    if draw(st.booleans()):
        payload["system"] = draw(planted_text(secrets))
    if draw(st.booleans()):
        payload["tools"] = [{"name": "read", "description": draw(planted_text(secrets))}]
    return payload, secrets


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted=planted_payload(), provider=st.sampled_from(["openai", "anthropic", "Gemini", "ollama-cloud"]))
def test_no_planted_secret_or_private_value_reaches_a_remote_provider(
    planted: tuple[dict[str, Any], list[str]], provider: str
) -> None:
    payload, secrets = planted
    before = json.dumps(payload, sort_keys=True)
    result = enforce_payload_privacy(payload, provider=provider)
    sent = json.dumps(result.payload)
    assert result.destination == "remote"
    for secret in secrets:
        assert secret not in sent
    assert "[ds4:" not in sent.lower()
    assert json.dumps(payload, sort_keys=True) == before  # the caller's payload is untouched
    assert result.blocked_blocks + result.secret_redactions >= 1


@settings(max_examples=30, deadline=None)
@given(planted=planted_payload())
def test_local_providers_receive_marked_content_without_tags(
    planted: tuple[dict[str, Any], list[str]],
) -> None:
    payload, secrets = planted
    result = enforce_payload_privacy(payload, provider="ollama")
    sent = json.dumps(result.payload)
    assert result.destination == "local"
    assert "[ds4:" not in sent.lower()
    for secret in secrets:
        assert secret in sent
