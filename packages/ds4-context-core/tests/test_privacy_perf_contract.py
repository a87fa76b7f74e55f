"""The contract the fast privacy path must keep: no mutation, no aliasing, fail closed, and a batch screen
that never lets through what sanitizing each string on its own would have changed."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ds4_context_core import PrivacyEnforcementError
from ds4_context_core._privacy import _scan as _privacy_scan
from ds4_context_core._privacy import _walk as _privacy_walk
from ds4_context_core._privacy._rules import (
    _NORMALISE,
    _decoded_base64,
    base64_blob_secret,
    base64_run_may_hide,
    base64_run_text,
    is_secret_name,
    looks_like_secret_literal,
    redact_text_ungated,
)
from ds4_context_core.privacy import (
    PRIVACY_MAX_DEPTH,
    PrivacyPolicy,
    enforce_payload_privacy,
    redact_secrets,
    sanitize_text,
)

EXCLUDED = "[DS4 {} content excluded by privacy policy]"


def containers(value: Any) -> Iterator[Any]:
    """Every dict and list reachable from ``value`` (payloads here are trees)."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from containers(item)
    elif isinstance(value, list):
        yield value
        for item in value:
            yield from containers(item)


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def chat(count: int = 40) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for index in range(count):
        text = f"message {index}: read the file and run the tests again"
        if index % 7 == 3:
            text += " [ds4:local-only]the NAS password list[/ds4:local-only]"
        if index % 11 == 5:
            text += " with key sk-proj-oid7g14j4oh348q9zt96"
        messages.append({"role": "user" if index % 2 else "assistant", "content": text})
        if index % 5 == 4:
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{index}",
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"path": "src/a.py"}'},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"call_{index}", "content": "x = 1"})
    return {"model": "gpt-4.1", "messages": messages, "temperature": 0.2, "tools": [{"name": "read"}]}


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_the_callers_payload_is_never_mutated(provider: str) -> None:
    payload = chat()
    before = copy.deepcopy(payload)
    before_ids = {id(container) for container in containers(payload)}
    result = enforce_payload_privacy(payload, provider=provider)
    assert result.changed
    assert payload == before
    assert {id(container) for container in containers(payload)} == before_ids


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_the_result_never_shares_a_container_with_the_callers_payload(provider: str) -> None:
    payload = chat()
    payload["messages"].append(payload["messages"][0])  # the same dict twice in the input
    result = enforce_payload_privacy(payload, provider=provider)
    theirs = {id(container) for container in containers(payload)}
    ours = list(containers(result.payload))
    assert len(ours) > 80
    assert not any(id(container) in theirs for container in ours)
    result.payload["messages"][0]["content"] = "changed by the transport"
    assert payload["messages"][0]["content"] != "changed by the transport"


def test_unchanged_strings_are_the_callers_own_objects_and_changed_ones_are_new() -> None:
    payload = chat()
    result = enforce_payload_privacy(payload, provider="openai")
    theirs = {id(text) for text in strings(payload)}
    for before, after in zip(payload["messages"], result.payload["messages"], strict=True):
        if before["content"] == after["content"]:
            assert after["content"] is before["content"]
        else:
            assert id(after["content"]) not in theirs


def test_tuples_mappings_and_unchanged_payloads_still_come_back_as_new_plain_containers() -> None:
    class Frozen(Mapping[str, Any]):
        def __init__(self, data: dict[str, Any]) -> None:
            self._data = data

        def __getitem__(self, key: str) -> Any:
            return self._data[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self._data)

        def __len__(self) -> int:
            return len(self._data)

    inner = {"role": "user", "content": "plain text"}
    payload = {"messages": (Frozen(inner), [inner])}
    result = enforce_payload_privacy(payload, provider="openai")
    assert result.payload == {"messages": [inner, [inner]]}
    assert type(result.payload["messages"]) is list
    assert type(result.payload["messages"][0]) is dict
    assert result.payload["messages"][0] is not inner
    assert result.payload["messages"][1][0] is not inner
    assert (result.changed, result.blocked_blocks, result.secret_redactions) == (False, 0, 0)


def test_a_mapping_is_read_through_its_items_and_its_keys_as_text() -> None:
    class Pairs(Mapping[Any, Any]):
        """A mapping over a list of pairs: its keys may be equal as dict keys (1 and True) or as text."""

        def __init__(self, pairs: list[tuple[Any, Any]]) -> None:
            self._pairs = pairs

        def __getitem__(self, key: Any) -> Any:
            return next(value for item, value in self._pairs if item is key)

        def __iter__(self) -> Iterator[Any]:
            return iter([key for key, _value in self._pairs])

        def __len__(self) -> int:
            return len(self._pairs)

    class Overridden(dict[str, Any]):
        def items(self) -> Any:
            return [("content", "[ds4:local-only]from items[/ds4:local-only]")]

    result = enforce_payload_privacy({"messages": [Overridden(content="not this")]}, provider="openai")
    blocked = "[DS4 local-only content excluded by privacy policy]"
    assert result.payload == {"messages": [{"content": blocked}]}
    distinct = enforce_payload_privacy({"metadata": Pairs([(1, "a"), (True, "b")])}, provider="openai")
    assert distinct.payload == {"metadata": {"1": "a", "true": "b"}}
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy({"metadata": Pairs([(1, "a"), ("1", "b")])}, provider="openai")
    assert raised.value.code == "privacy-key-collision"


def nested(depth: int, kind: str) -> Any:
    value: Any = "[ds4:local-only]x[/ds4:local-only]"
    for level in range(depth):
        if kind == "dict" or (kind == "mixed" and level % 2):
            value = {"content": value}
        elif kind == "tuple":
            value = (value,)
        else:
            value = [value]
    return value


@pytest.mark.parametrize("kind", ["dict", "list", "tuple", "mixed"])
def test_the_depth_limit_is_exact_and_fails_closed(kind: str) -> None:
    deepest_allowed = nested(PRIVACY_MAX_DEPTH, kind)
    result = enforce_payload_privacy(deepest_allowed, provider="openai")
    assert EXCLUDED.format("local-only") in json.dumps(result.payload)
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy(nested(PRIVACY_MAX_DEPTH + 1, kind), provider="openai")
    assert raised.value.code == "privacy-payload-too-deep"
    assert raised.value.__cause__ is None


def test_a_dict_that_contains_itself_fails_closed() -> None:
    loop: dict[str, Any] = {"role": "user"}
    loop["content"] = loop
    with pytest.raises(PrivacyEnforcementError) as raised:
        enforce_payload_privacy({"messages": [loop]}, provider="ollama")
    assert raised.value.code == "privacy-payload-too-deep"


@pytest.mark.parametrize(
    "keys",
    [
        {1: "a", "1": "b"},
        {"x": "a", "[ds4:internal]x[/ds4:internal]": "b"},
        {True: "a", "true": "b"},
    ],
)
def test_keys_that_meet_after_sanitizing_collide_in_either_order(keys: dict[Any, str]) -> None:
    for ordered in (keys, dict(reversed(list(keys.items())))):
        with pytest.raises(PrivacyEnforcementError) as raised:
            enforce_payload_privacy({"messages": [ordered]}, provider="openai")
        assert raised.value.code == "privacy-key-collision"


def test_a_content_string_holding_only_a_stray_close_tag_is_blocked() -> None:
    # Regression: the batch screen used to look for "[ds4:" only, so "[/ds4:" alone went out verbatim.
    payload = {"messages": [{"role": "user", "content": "ok [/ds4:sensitive] then the rest"}]}
    result = enforce_payload_privacy(payload, provider="openai")
    assert result.payload["messages"][0]["content"] == EXCLUDED.format("sensitive")
    assert result.blocked_blocks == 1


def test_text_that_grows_when_lower_cased_does_not_hide_a_later_secret() -> None:
    # Regression: "İ" lower-cases to two characters, which used to shift the screen onto the wrong string.
    texts = ["İ" * 50, "my key sk-sez4ZbMS1RACJp4m9dzh7fX6", "hello world, a longer plain string " * 3]
    payload = {"messages": [{"role": "user", "content": text} for text in texts]}
    result = enforce_payload_privacy(payload, provider="openai")
    sent = json.dumps(result.payload)
    assert "sk-sez4" not in sent
    assert result.secret_redactions == 1


def test_a_key_word_far_from_its_equals_sign_is_still_redacted() -> None:
    text = "password" + " " * 60 + "= hunter2hunter2"
    payload = {"messages": [{"role": "user", "content": "x" * 30}, {"role": "user", "content": text}]}
    result = enforce_payload_privacy(payload, provider="openai")
    assert "hunter2" not in json.dumps(result.payload)


def test_many_unconfirmed_hits_fall_back_to_the_full_rules() -> None:
    noisy = [f"a_b:c=d-e_f:{index} K" for index in range(300)]
    texts = [*noisy, "tail ghp_" + "a1" * 12, "Authorization: BEARER abcdefghijkl"]
    payload = {"messages": [{"role": "user", "content": text} for text in texts]}
    result = enforce_payload_privacy(payload, provider="openai")
    contents = [message["content"] for message in result.payload["messages"]]
    assert contents[:300] == noisy
    assert contents[300] == "tail [DS4 REDACTED CREDENTIAL]"
    assert contents[301] == "Authorization: BEARER [DS4 REDACTED TOKEN]"


# Fragments chosen to sit at every edge of the screen: anchors without their rule, rules split across
# neighbouring strings, case variants, escapes, spaces and quotes between a key and its "=", non-ASCII
# text that changes length when lower-cased, and NUL characters.
FRAGMENTS = st.sampled_from(
    [
        "plain words ",
        " ",
        "\t",
        "\n",
        "  " * 12,
        '"',
        "'",
        "=",
        ":",
        "-",
        "_",
        "K",
        "[",
        "]",
        "\\",
        "\0",
        "İ",
        "ß",
        "\u212a",  # KELVIN SIGN, lower-cases to an ASCII "k"
        "é",
        "sk",
        "sk-",
        "SK-",
        "sk-ant-",
        "gh",
        "ghp",
        "ghp_",
        "Ghp_",
        "ghx_",
        "A",
        "AKIA",
        "akia",
        "-----BEGIN ",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "bearer",
        "BeArEr",
        "bEARER ",
        "b",
        "B",
        "bea",
        "rer ",
        "[ds4 ",
        "ready = ",
        "Token:",
        "secreT'  :",
        "Authorization: Bearer ",
        "password",
        "PASSWORD",
        "api_key",
        "API-KEY",
        "apikey",
        "access_token",
        "auth-token",
        "client_secret",
        "secret",
        "token",
        "key",
        "0123456789abcdefghij",
        "ABCDEFGHIJKLMNOP0123",
        "[ds4:sensitive]",
        "[/ds4:sensitive]",
        "[DS4:LOCAL-ONLY]",
        "[/ds4:local-only]",
        "[ds4:internal]",
        "[/ds4:internal]",
        "[ds4:private]",
        "[ds4:",
        "[DS4 REDACTED SECRET]",
        "AKIAABCDEFGHIJKLMNOP",
        "-----BEGIN PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----",
        "ghp_abcdefghijklmnopqrstuvwxyz",
        "sk-abcdefghijklmnopqr",
        "Bearer abcdefghij",
        "password=hunter2",
        'api_key": "x',
        # Values the screen rules out by a look, next to ones it must leave to the rules.
        ".",
        "(",
        "[",
        "$",
        "os.environ",
        "get_token",
        "hunter2",
        "Zq81mWx0aLp2",
        '"s3cr3t-Value!"',
        '\\"s3cr3t-Value!\\"',
        "sk_live_4eC39HqLyjWDarjt",
        "postgres://app:Zq81mWx0@db",
        "=>",
        "\n",
        # The heads of every issued token's format, and bodies that pass their checks.
        "rk_test_",
        "Zq81mWx0aLp2Kd7Tr4Nv9Bc6",
        "hf_",
        "npm_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "1234567890-",
        "AIza",
        "ASIA",
        "eyJ",
        "eyJhbGciOiJIUzI1NiJ9.",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0.",
        "credentials",
        "PWD",
        "a2V5IHNrLXByb2otWnE4MW1XeDBhTHAyS2Q3VHI0TnY5QmM2",  # base64 of a sentence with a key in it
        "YWJj",  # base64 that joins such a blob into a longer run
        "\\u0073k-",  # an escaped "s": "sk-" spelt with a JSON escape
        "\\u0070assword",
        # Words at the lengths where the screen's look stops ruling a value out (19/20 bare, 39/40 quoted).
        "B" * 19,
        "c" * 20,
        "d" * 39,
        "E" * 40,
        "`",
        '\\"',
        # What the screen reads around a rare byte: a URL's "@" and the last "/" before it, a JWT's "J", a
        # private key's "G", an escape's backslash; and JSON texts that parse or do not.
        "://",
        "@",
        "/",
        "u:p@",
        "J",
        "G",
        "\\u",
        '{"k": "',
        '"}',
        "[[",
    ]
)
TEXT = st.lists(FRAGMENTS, max_size=12).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(TEXT, min_size=1, max_size=8),
    provider=st.sampled_from(["openai", "ollama"]),
    redact=st.booleans(),
)
def test_the_batch_screen_agrees_with_sanitizing_each_string_alone(
    texts: list[str], provider: str, redact: bool
) -> None:
    policy = PrivacyPolicy(redact_secrets=redact)
    payload = {
        "messages": [{"role": "user", "content": text} for text in texts],
        "tools": [{"name": "t", "description": text} for text in texts],
    }
    result = enforce_payload_privacy(payload, provider=provider, policy=policy)
    destination = result.destination
    assert destination == ("local" if provider == "ollama" else "remote")
    expected = [sanitize_text(text, destination=destination, policy=policy) for text in texts]
    assert [message["content"] for message in result.payload["messages"]] == [e[0] for e in expected]
    assert [tool["description"] for tool in result.payload["tools"]] == [e[0] for e in expected]
    assert result.blocked_blocks == 2 * sum(e[1] for e in expected)
    assert result.secret_redactions == 2 * sum(e[2] for e in expected)
    assert result.changed == any(e[0] != text for e, text in zip(expected, texts, strict=True))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXT, min_size=1, max_size=8), redact=st.booleans())
def test_the_screen_flags_every_string_the_rules_change(texts: list[str], redact: bool) -> None:
    policy = PrivacyPolicy(redact_secrets=redact)
    changed = {
        index
        for index, text in enumerate(texts)
        if sanitize_text(text, destination="remote", policy=policy) != (text, 0, 0)
    }
    assert changed <= _privacy_walk._flag_strings(texts, redact)


# Every kind of secret the screen confirms by its rule's own match, right after a string that ends in a
# letter or digit and right before one that starts with one: a string's start and end are its own, never
# read as part of a neighbour.
NEIGHBOURED = [
    "sk-proj-Zq81mWx0aLp2Kd7Tr4Nv",
    "ghp_Zq81mWx0aLp2Kd7Tr4Nv9Bc6Hj3Yu5Qw",
    "AKIAZQ81MWX0ALP2KD7T",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA",
    "postgres://app:Zq81mWx0@db",
    "Bearer Zq81mWx0aLp2Kd7Tr4",
    "password=Zq81mWx0aLp2",
    "a2V5IHNrLXByb2otWnE4MW1XeDBhTHAyS2Q3VHI0TnY5QmM2",
    '{"a": "a2V5IHNrLXByb2otWnE4MW1XeDBhTHAyS2Q3VHI0TnY5QmM2"}',
    "\\u0073k-proj-Zq81mWx0aLp2Kd7Tr4Nv",
]


@pytest.mark.parametrize("secret", NEIGHBOURED)
def test_the_screen_reads_each_string_on_its_own_beside_its_neighbours(secret: str) -> None:
    assert redact_secrets(secret)[1] > 0
    texts = ["word1", secret, "2word", secret, "x"]
    assert {1, 3} <= _privacy_walk._flag_strings(texts, True)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(st.binary(max_size=48), st.text(max_size=32).map(str.encode)),
    cut=st.integers(min_value=0, max_value=3),
    pad=st.integers(min_value=0, max_value=2),
)
def test_a_base64_run_that_decodes_to_text_passes_the_quick_look(data: bytes, cut: int, pad: int) -> None:
    run = base64.b64encode(data).rstrip(b"=")
    run = run[: max(0, len(run) - cut)] + b"=" * pad
    if _decoded_base64(run.decode("ascii")) is not None:
        assert base64_run_text(run)


@settings(max_examples=500, deadline=None)
@given(
    first=st.sampled_from("ghijklmnopqrstuv+/"),
    rest=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", max_size=60),
)
def test_a_run_whose_first_byte_starts_no_utf8_is_no_text(first: str, rest: str) -> None:
    # The quick look rules these out by their first character; no such run decodes to text.
    run = first + rest
    assert _decoded_base64(run) is None
    assert not base64_run_text(run.encode("ascii"))


def _hex_bytes() -> tuple[set[int], set[int], set[int]]:
    """The bytes a run of lower-case hex digits can decode to at each position of a group of three."""
    digits = "0123456789abcdef"
    first: set[int] = set()
    second: set[int] = set()
    third: set[int] = set()
    for group in (a + b + c + d for a in digits for b in digits for c in digits for d in digits):
        decoded = base64.b64decode(group)
        first.add(decoded[0])
        second.add(decoded[1])
        third.add(decoded[2])
    return first, second, third


def test_no_run_of_hex_digits_can_spell_what_every_rule_needs() -> None:
    # The screen and the rules skip runs of hex digits (base64_run_may_hide): every character they can
    # decode to, in any alignment and after normalising (fullwidth forms read as ASCII, zero-width ones
    # dropped), is derived here, and none is a character each rule's match needs: "-" (private keys,
    # "sk-", Slack, GitLab), "/" (URLs), "A" (AWS and Google keys), "e"/"E" ("bearer", JWTs, Stripe,
    # the names key, token, secret, credential), "h" (GitHub, Hugging Face), "p"/"P" (npm, password,
    # passwd, pwd). Padding only drops bytes from the end, so it can add none.
    positions = _hex_bytes()
    reachable: set[str] = set()
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        encoded = chr(code).encode("utf-8")
        if any(
            all(byte in positions[(start + offset) % 3] for offset, byte in enumerate(encoded))
            for start in range(3)
        ):
            reachable.add(chr(code).translate(_NORMALISE))
    needed = set("-/AeEhpP")
    assert "i" in reachable  # the derivation finds what a hex run does decode to ("i" from "a...")
    assert not needed & set("".join(reachable))


@settings(max_examples=500, deadline=None)
@given(run=st.text(alphabet="0123456789abcdef", min_size=24, max_size=120), pad=st.integers(0, 2))
def test_a_run_of_hex_digits_is_skipped_and_never_hides_a_secret(run: str, pad: int) -> None:
    blob = run + "=" * pad
    assert not base64_run_may_hide(blob.encode("ascii"))
    assert not base64_blob_secret(blob)


def test_a_base64_run_with_a_secret_is_not_skipped() -> None:
    blob = base64.b64encode(b"key sk-proj-Zq81mWx0aLp2Kd7Tr4Nv9Bc6").decode("ascii")
    assert base64_blob_secret(blob)
    assert base64_run_may_hide(blob.encode("ascii"))


# The two ways of finding the screen's candidates (_scan.py): the compiled wheel uses the one pass over the
# bytes, the pure one the C-level searches; each must find what the other does, on any bytes.
CANDIDATE_KINDS = (
    "tags",
    "signs",
    "heads",
    "jwts",
    "aws",
    "private_keys",
    "urls",
    "bearers",
    "escapes",
    "runs",
)
# Runs of base64 characters just under, at and over the shortest the scan reports, and their padding.
RUN_EDGES = st.sampled_from(["=", "==", "===", "+/", "Q" * 23, "Q" * 24, "q" * 25])
SCANNED = st.one_of(
    st.lists(st.one_of(FRAGMENTS, RUN_EDGES, st.text(max_size=6)), max_size=24)
    .map("".join)
    .map(lambda text: text.encode("ascii", "replace")),
    st.binary(max_size=64),
)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=SCANNED)
def test_the_scan_finds_the_candidates_the_searches_find(raw: bytes) -> None:
    by_search = _privacy_scan.candidates_by_search(raw)
    by_scan = _privacy_scan.candidates_by_scan(raw)
    for kind in CANDIDATE_KINDS:
        assert set(getattr(by_scan, kind)) == set(getattr(by_search, kind)), kind


@pytest.mark.parametrize(
    ("raw", "kind", "expected"),
    [
        (b"x = API-KEY ' :hunter", "signs", [14]),
        (b'"client_secret"\t=', "signs", [16]),
        (b"sk_live_abc SK-1 task_", "heads", [0, 12, 19]),
        (b"ASIASIA AIza AKI", "aws", [0, 3, 8]),
        (b"eyJ aeyJ eyj", "jwts", [0, 5]),
        (b"-----BEGIN -----BEGIN", "private_keys", [0]),
        (b"a://u:p@h@ x/y@", "urls", [1]),
        (b"Bearer\tx bearer bEARER bearer", "bearers", [0, 9, 16]),
        (b"[ds4:x] [DS4:internal] [/ds4:a] [x [ds4:]", "tags", [0, 8, 23]),
        (b"\\u \\x \\u", "escapes", [0, 6]),
        (b"A" * 24 + b"== " + b"b" * 23 + b" " + b"c" * 30, "runs", [(0, 26), (51, 81)]),
    ],
)
def test_each_anchor_is_found_where_it_is(raw: bytes, kind: str, expected: list[object]) -> None:
    # As sets: a candidate may be found twice (the "_" inside "sk_live_" names the same head's start).
    assert sorted(set(getattr(_privacy_scan.candidates_by_scan(raw), kind))) == expected
    assert sorted(set(getattr(_privacy_scan.candidates_by_search(raw), kind))) == expected


@pytest.mark.parametrize("name", _privacy_scan.SECRET_NAMES)
def test_every_secret_name_before_a_sign_is_found_both_ways(name: bytes) -> None:
    for raw in (name + b"=", name.upper().replace(b"_", b"-") + b" ':", b"x." + name + b'"\\\t='):
        sign = len(raw) - 1
        assert _privacy_scan.candidates_by_scan(raw).signs == [sign]
        assert _privacy_scan.candidates_by_search(raw).signs == [sign]


@pytest.mark.parametrize("head", _privacy_scan.TOKEN_HEADS)
def test_every_token_head_is_found_both_ways(head: bytes) -> None:
    for raw in (head + b"_", b"(" + head.upper().replace(b"_", b"-") + b"-"):
        start = 0 if raw.startswith(head) else 1
        assert set(_privacy_scan.candidates_by_scan(raw).heads) == {start}
        assert set(_privacy_scan.candidates_by_search(raw).heads) == {start}


def test_the_compiled_wheel_scans_and_the_pure_one_searches() -> None:
    compiled = not str(_privacy_scan.__file__).endswith(".py")
    assert _privacy_scan.COMPILED is compiled
    expected = _privacy_scan.candidates_by_scan if compiled else _privacy_scan.candidates_by_search
    assert _privacy_scan.find_candidates is expected


# The secret rules run without the substring tests in front of them: the tests must never change a result.
def reference_redaction(text: str) -> tuple[str, int]:
    return redact_text_ungated(text)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.lists(FRAGMENTS, max_size=16).map("".join), st.text(max_size=40)))
def test_gated_redaction_equals_running_every_rule(text: str) -> None:
    assert redact_secrets(text) == reference_redaction(text)


@pytest.mark.parametrize(
    "text",
    [
        "password" + " " * 40 + "= hunter2",
        "x = 1, y: 2, z = 3, w: 4, v = 5, u: 6, t = 7, s: 8, r = 9, q: 10, auth_token = 'abc12345'",
        "ghp_" + "a1" * 12 + " and xghp_" + "b2" * 12,
        "sk-MQsfdgx0fzbjq6C1SUd6-AKIAG26Q2L14ER5XGM0J",
        "9sk-c6AFAcli71FnyMPHnCwi AKIARWJAU5I8O4I6SF0K",
        "Authorization: Bearer abcdefghij, api_key: 'zzz9Kq7r'",
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" + " rk_test_" + "Zq81mWx0aLp2",
        "github_pat_11IT60YJ7MYAGYEDWWBB64_UrTcU6Hf8dknzKJlhNbnVdmOrtEjZC",
        "glpat-Q7mW2xLp9Zr4Kd8Nc3vT xoxb-123456789012-Zr4Kd8Nc3v",
        "AIzaSyMp6LCpi71Dc3wpMetr4BIphNy4h59IKq2 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",
        "npm_9F4dpVaiy122qL9BW2KWjrkyiNHntRjwkuNk",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----",
        "postgres://app:s3cr3tPass@db:5432/app",
        "AWS_SECRET_ACCESS_KEY=liQMhM3VNHtXNojIloUhgIB0g1BHMeCnPMso6Ezo",
        "an AWS key AKIAN31HX6QYSWD1BSVS here",
        "key:\n-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----\ntruncated",
        "token gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "client-secret:\t'abc12345'",
    ],
)
def test_gated_redaction_on_edge_cases(text: str) -> None:
    assert redact_secrets(text) == reference_redaction(text)
    assert redact_secrets(text)[1] >= 1


def expected_content_dict(source: dict[str, Any]) -> tuple[dict[str, Any] | None, int, int]:
    """What sanitizing a content dict must give, key by key in order: None when two keys meet."""
    result: dict[str, Any] = {}
    blocked = redactions = 0
    for key, value in source.items():
        new_key, key_blocked, key_redactions = sanitize_text(key, destination="remote")
        if new_key in result:
            return None, 0, 0
        if new_key != key:
            blocked, redactions = blocked + key_blocked, redactions + key_redactions
        inner = value["content"] if isinstance(value, dict) else value
        if isinstance(value, str) and is_secret_name(new_key) and looks_like_secret_literal(value):
            # A secret's name with a literal under it: the value goes whole, whatever it holds.
            result[new_key] = "[DS4 REDACTED SECRET]"
            redactions += 1
            continue
        text, text_blocked, text_redactions = sanitize_text(inner, destination="remote")
        blocked, redactions = blocked + text_blocked, redactions + text_redactions
        result[new_key] = {"content": text} if isinstance(value, dict) else text
    return result, blocked, redactions


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(
        st.tuples(TEXT, st.one_of(TEXT, TEXT.map(lambda text: {"content": text}))), min_size=1, max_size=6
    )
)
def test_rewritten_keys_keep_their_place_and_every_value_is_still_sanitized(
    entries: list[tuple[str, Any]],
) -> None:
    # A content dict whose keys hold markers or secrets is rebuilt from the first rewritten key on: the
    # keys keep their order, and the values before and after it (nested ones too) are all sanitized.
    source = dict(entries)
    expected, blocked, redactions = expected_content_dict(source)
    payload = {"metadata": source}
    if expected is None:
        with pytest.raises(PrivacyEnforcementError) as raised:
            enforce_payload_privacy(payload, provider="openai")
        assert raised.value.code == "privacy-key-collision"
        return
    result = enforce_payload_privacy(payload, provider="openai")
    assert list(result.payload["metadata"].items()) == list(expected.items())
    assert (result.blocked_blocks, result.secret_redactions) == (blocked, redactions)
