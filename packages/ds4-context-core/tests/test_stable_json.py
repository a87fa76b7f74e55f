"""Stable JSON golden vectors. Every expected value below was written by hand from the rules in
docs/core/history.md (and, for numbers, from what JavaScript's JSON.stringify prints), not by running
the code under test.
"""

from __future__ import annotations

import array
import enum
import hashlib
import math
import os
import subprocess
import sys
from datetime import datetime

import pytest

from ds4_context_core import StableJsonError, TextBlock, ToolResultBlock, sha256_hex, stable_hash, stable_json
from ds4_context_core._history._stable_json import stable_json_bytes
from ds4_context_core.history import STABLE_JSON_ERROR_CODES, STABLE_JSON_VERSION


class Colour(enum.IntEnum):
    RED = 1


class Name(enum.StrEnum):
    ADA = "ada"


GOLDEN: list[tuple[object, bytes]] = [
    # objects: sorted keys, no whitespace
    ({"b": 1, "a": [True, None, False, "x"]}, b'{"a":[true,null,false,"x"],"b":1}'),
    ({}, b"{}"),
    ([], b"[]"),
    ({"B": 1, "a": 2, "_": 3, "1": 4}, b'{"1":4,"B":1,"_":3,"a":2}'),
    # floats: JavaScript Number#toString
    (1.0, b"1"),
    (-0.0, b"0"),
    (100.0, b"100"),
    (0.1, b"0.1"),
    (123.456, b"123.456"),
    (1e21, b"1e+21"),
    (1e20, b"100000000000000000000"),
    (2.0**53, b"9007199254740992"),
    (1.2345e25, b"1.2345e+25"),
    (1e-6, b"0.000001"),
    (0.000001234, b"0.000001234"),
    (1e-7, b"1e-7"),
    (1.5e-7, b"1.5e-7"),
    (-2.5e-9, b"-2.5e-9"),
    (5e-324, b"5e-324"),
    (1.7976931348623157e308, b"1.7976931348623157e+308"),
    (math.nan, b'"NaN"'),
    (math.inf, b'"Infinity"'),
    (-math.inf, b'"-Infinity"'),
    # ints: exact, any size
    (-5, b"-5"),
    (2**70, b"1180591620717411303424"),
    (Colour.RED, b"1"),
    # bytes-likes
    (b"abc", b'"[bytes:3]"'),
    (bytearray(2), b'"[bytes:2]"'),
    (memoryview(array.array("i", [1, 2])), b'"[bytes:8]"'),
    # tuples are arrays
    ((1, (2,), [3]), b"[1,[2],[3]]"),
    # non-string keys
    ({None: 1, False: 2, 2.5: 3, 10: 4}, b'{"10":4,"2.5":3,"false":2,"null":1}'),
    ({1.0: "a", math.inf: "b"}, b'{"1":"a","Infinity":"b"}'),
    # strings: UTF-8, only quote, backslash and C0 controls escaped
    ('a"b\\c\nd\te\r\b\f/', b'"a\\"b\\\\c\\nd\\te\\r\\b\\f/"'),
    ({"\u00e9": "\u2028", "z": "\x00\x1f\x7f"}, b'{"z":"\\u0000\\u001f\x7f","\xc3\xa9":"\xe2\x80\xa8"}'),
    ("\ud800x", b'"\\ud800x"'),
    # UTF-16 key order: U+1F600 is D83D DE00 in UTF-16, which sorts before U+FF61
    ({"\uff61": 2, "\U0001f600": 1}, b'{"\xf0\x9f\x98\x80":1,"\xef\xbd\xa1":2}'),
    (Name.ADA, b'"ada"'),
    ({Name.ADA: Colour.RED}, b'{"ada":1}'),
    # msgspec records: their wire (camelCase) objects, keys sorted
    (TextBlock(text="hi"), b'{"text":"hi","type":"text"}'),
    (
        ToolResultBlock(tool_call_id="c", tool_name="t", content="x"),
        b'{"content":"x","isError":false,"toolCallId":"c","toolName":"t","type":"toolResult"}',
    ),
]


@pytest.mark.parametrize(("value", "expected"), GOLDEN, ids=[repr(v)[:40] for v, _ in GOLDEN])
def test_golden_vectors(value, expected):
    assert stable_json_bytes(value) == expected
    assert stable_hash(value) == hashlib.sha256(expected).hexdigest()


def test_version_and_codes_are_pinned():
    assert STABLE_JSON_VERSION == "stable-json-v1"
    assert STABLE_JSON_ERROR_CODES == (
        "stable-json-unsupported-type",
        "stable-json-unsupported-key",
        "stable-json-key-collision",
        "stable-json-too-deep",
    )


def test_circular_containers_become_a_marker_and_shared_ones_are_repeated():
    loop: list[object] = [1]
    loop.append(loop)
    assert stable_json(loop) == '[1,"[circular]"]'
    cyclic: dict[str, object] = {"a": 1}
    cyclic["self"] = cyclic
    assert stable_json(cyclic) == '{"a":1,"self":"[circular]"}'
    shared = [1]
    assert stable_json([shared, shared]) == "[[1],[1]]"


def test_stable_json_is_text_of_the_bytes():
    assert stable_json({"é": 1}) == '{"é":1}'
    assert sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert sha256_hex(b"abc") == sha256_hex("abc")


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ({1, 2}, "stable-json-unsupported-type"),
        (datetime(2025, 1, 1), "stable-json-unsupported-type"),
        (object(), "stable-json-unsupported-type"),
        ({(1, 2): "tuple key"}, "stable-json-unsupported-key"),
        ({"\udc80": 1, "é": 2}, "stable-json-unsupported-key"),
        ({1: "a", "1": "b"}, "stable-json-key-collision"),
        ({None: "a", "null": "b"}, "stable-json-key-collision"),
    ],
)
def test_values_without_a_stable_form_raise_with_a_code(value, code):
    with pytest.raises(StableJsonError) as caught:
        stable_json(value)
    assert caught.value.code == code
    assert code in STABLE_JSON_ERROR_CODES
    assert isinstance(caught.value, ValueError)


def test_too_deep_nesting_raises_instead_of_overflowing_the_stack():
    deep: list[object] = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(StableJsonError) as caught:
        stable_json(deep)
    assert caught.value.code == "stable-json-too-deep"
    shallow: list[object] = []
    for _ in range(200):
        shallow = [shallow]
    assert stable_json(shallow) == "[" * 201 + "]" * 201


def test_input_is_not_modified():
    value = {"b": [3, 1.0, {"z": 1, "a": 2}], 1: b"x"}
    before = repr(value)
    stable_json(value)
    assert repr(value) == before


_CHILD = """
import sys
from ds4_context_core import stable_hash
value = {"z": [1.5, None, "\u00e9", {"k": (1, 2)}], 3: True, "a": {"n": float("nan")}, "b": b"xy"}
sys.stdout.write(stable_hash(value))
"""


def test_hash_is_the_same_in_another_process_with_another_hash_seed():
    value = {"z": [1.5, None, "\u00e9", {"k": (1, 2)}], 3: True, "a": {"n": math.nan}, "b": b"xy"}
    expected_bytes = b'{"3":true,"a":{"n":"NaN"},"b":"[bytes:2]","z":[1.5,null,"\xc3\xa9",{"k":[1,2]}]}'
    assert stable_json_bytes(value) == expected_bytes
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        child = subprocess.run(
            [sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, check=True, timeout=60
        )
        assert child.stdout == hashlib.sha256(expected_bytes).hexdigest()
