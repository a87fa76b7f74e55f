"""Token estimation: chars-v1 by hand, the tokenizer estimator (injected and missing), cache, calibration."""

from __future__ import annotations

import sys
import types

import pytest

from ds4_context_core import (
    CanonicalMessage,
    ImageBlock,
    MissingExtraError,
    OpaqueProviderBlock,
    Provenance,
    StableJsonError,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._exceptions import TokenEstimateError
from ds4_context_core.tokens import (
    CALIBRATION_MAX_RATIO,
    TOKEN_ESTIMATE_CODES,
    CachedEstimator,
    CalibratedEstimator,
    CalibrationSample,
    CharsEstimator,
    TiktokenEstimator,
    TokenCalibrator,
    TokenEstimator,
    calibrate_token_ratio,
    calibrated_limit,
    estimate_message_tokens,
    estimate_messages_tokens,
    estimate_text_tokens,
)


def message(*blocks, entry: str = "e1", role: str = "user") -> CanonicalMessage:
    return CanonicalMessage(
        id=f"s:{entry}",
        source_entry_id=entry,
        role=role,  # type: ignore[arg-type]
        blocks=blocks,
        provenance=Provenance(source="pi-session", session_id="s", entry_id=entry),
    )


# Expected values are worked out by hand from: ceil(chars / 4) + 8 per message + 4 per block + 1024 per image.
@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        ((TextBlock(text="hello world"),), 3 + 8 + 4),  # 11 chars
        ((TextBlock(text=""),), 0 + 8 + 4),
        ((ToolCallBlock(id="c", name="read", arguments={"path": "a.py"}),), 5 + 8 + 4),  # 4 + 15 chars
        ((ToolResultBlock(tool_call_id="c", tool_name="read", content="x" * 16),), 5 + 8 + 4),  # 16 + 4
        ((ImageBlock(mime_type="image/png", data="AAAA"),), 0 + 8 + 4 + 1024),
        ((TextBlock(text="abcd"), ImageBlock()), 1 + 8 + 8 + 1024),
        ((OpaqueProviderBlock(value={"b": 1, "a": 2.0}),), 4 + 8 + 4),  # {"a":2,"b":1} is 13 chars
        ((), 8),
    ],
)
def test_chars_v1_matches_the_formula(blocks, expected):
    assert estimate_message_tokens(message(*blocks)) == expected
    assert CharsEstimator()(message(*blocks)) == expected


def test_text_and_sums():
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("abcde") == 2
    history = [message(TextBlock(text="abcd")), message(TextBlock(text="abcdefgh"), entry="e2")]
    assert estimate_messages_tokens(history) == (1 + 12) + (2 + 12)
    estimator = CharsEstimator()
    assert isinstance(estimator, TokenEstimator)
    assert estimator.version == "chars-v1"
    assert estimator.estimate_text("abcde") == 2


class ByteTokenizer:
    """A stand-in for a tiktoken Encoding: one token per UTF-8 byte, and it records what it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.seen.append(text)
        return list(text.encode("utf-8"))


def test_tokenizer_estimator_uses_the_injected_encoding_with_the_same_overheads():
    tokenizer = ByteTokenizer()
    estimator = TiktokenEstimator(tokenizer)
    assert estimator.version == "tiktoken-o200k_base-v1"
    assert isinstance(estimator, TokenEstimator)
    text = "héllo <|endoftext|>"  # é is two bytes; the special token is counted as ordinary text
    assert estimator.estimate_text(text) == len(text) + 1
    assert tokenizer.seen == [text]
    call = ToolCallBlock(id="c", name="read", arguments={"path": "a.py"})
    assert estimator(message(TextBlock(text="abc"), call, ImageBlock())) == (3 + 4 + 15) + 8 + 3 * 4 + 1024
    assert estimator.estimate_text("") == 0


def test_tokenizer_estimator_reports_a_missing_extra_lazily(monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes ``import tiktoken`` fail as if not installed
    estimator = TiktokenEstimator()  # constructing imports nothing
    with pytest.raises(MissingExtraError) as caught:
        estimator.estimate_text("hello")
    error = caught.value
    assert isinstance(error, ImportError)
    assert error.code == "optional-dependency-missing"
    assert error.extra == "tiktoken"
    assert 'pip install "ds4-context-core[tiktoken]"' in str(error)


def test_tiktoken_is_imported_on_first_use_with_the_named_encoding(monkeypatch):
    requested: list[str] = []
    tokenizer = ByteTokenizer()

    def get_encoding(name: str) -> ByteTokenizer:
        requested.append(name)
        return tokenizer

    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=get_encoding))
    estimator = TiktokenEstimator()
    assert requested == []
    assert estimator.estimate_text("abc") == 3
    assert estimator.estimate_text("de") == 2
    assert requested == ["o200k_base"]  # loaded once, then reused


def test_an_encoding_tiktoken_cannot_load_is_reported_with_a_code(monkeypatch):
    def get_encoding(name: str) -> None:
        raise OSError("network is unreachable")

    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=get_encoding))
    with pytest.raises(TokenEstimateError) as caught:
        TiktokenEstimator().estimate_text("x")
    assert caught.value.code == "token-encoding-unavailable"
    assert "TiktokenEstimator(encoding)" in str(caught.value)


def test_broken_injected_encodings_are_rejected_with_a_code():
    assert TOKEN_ESTIMATE_CODES == (
        "token-calibration-sample-invalid",
        "token-encoding-invalid",
        "token-encoding-unavailable",
    )
    with pytest.raises(TokenEstimateError) as caught:
        TiktokenEstimator(object())  # type: ignore[arg-type]
    assert caught.value.code == "token-encoding-invalid"

    class ReturnsNothing:
        def encode_ordinary(self, text: str) -> None:
            return None

    with pytest.raises(TokenEstimateError) as caught:
        TiktokenEstimator(ReturnsNothing()).estimate_text("x")  # type: ignore[arg-type]
    assert caught.value.code == "token-encoding-invalid"


class CountingEstimator:
    version = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def estimate_text(self, text: str) -> int:
        return len(text)

    def __call__(self, message: CanonicalMessage) -> int:
        self.calls += 1
        return estimate_message_tokens(message)


def test_cache_is_keyed_by_id_and_content_and_bounded():
    base = CountingEstimator()
    cache = CachedEstimator(base, max_entries=2)
    first = message(TextBlock(text="abcd"))
    assert cache(first) == 13
    assert cache(first) == 13
    assert (base.calls, cache.hits, cache.misses) == (1, 1, 1)
    edited = message(TextBlock(text="abcdefgh"))  # same id, new content
    assert cache(edited) == 14
    assert base.calls == 2
    assert cache(message(TextBlock(text="abcd"), role="assistant")) == 13  # role is part of the content
    assert base.calls == 3
    assert len(cache) == 2
    assert cache(first) == 13  # evicted as least recently used, so estimated again
    assert base.calls == 4
    assert cache.version == "counting"
    with pytest.raises(ValueError, match="max_entries"):
        CachedEstimator(base, max_entries=0)


def test_cache_still_estimates_content_it_cannot_hash():
    base = CountingEstimator()
    cache = CachedEstimator(base)
    odd = message(OpaqueProviderBlock(value=[1, 2]))
    unencodable = message(ToolCallBlock(id="c", name="x", arguments={"when": {1, 2}}))  # a set
    assert cache(odd) == cache(odd)
    with pytest.raises(StableJsonError):
        cache(unencodable)  # the estimator's own error surfaces; nothing is cached
    assert len(cache) == 1


def test_calibration_median_with_outliers_rejected():
    samples = [(100, 120)] * 5 + [(100, 1000)]
    result = calibrate_token_ratio(samples)
    assert result.status == "calibrated"
    assert result.ratio == pytest.approx(1.2)
    assert (result.samples, result.used, result.rejected_outliers, result.rejected_invalid) == (6, 5, 1, 0)
    # median 1.225, MAD 0.075: 5.0 has modified z = 0.6745 * 3.775 / 0.075 = 33.9 > 3.5, 1.1 has 1.12
    spread = [(1000, 1100), (1000, 1200), (1000, 1300), (1000, 1250), (1000, 1150), (1000, 5000)]
    result = calibrate_token_ratio(CalibrationSample(estimated=e, actual=a) for e, a in spread)
    assert result.ratio == pytest.approx(1.2)
    assert result.rejected_outliers == 1


def test_calibration_never_raises_limits_and_is_bounded():
    over = calibrate_token_ratio([(200, 100)] * 6)
    assert over.median_ratio == pytest.approx(0.5)
    assert over.ratio == 1.0
    wild = calibrate_token_ratio([(10, 1000)] * 6)
    assert wild.ratio == CALIBRATION_MAX_RATIO
    assert calibrated_limit(100_000, 1.25) == 80_000
    assert calibrated_limit(100_000, over) == 100_000
    assert calibrated_limit(100_000, float("nan")) == 25_000
    assert calibrated_limit(100_000, 0.1) == 100_000


def test_calibration_needs_enough_valid_samples_and_skips_empty_usage():
    few = calibrate_token_ratio([(100, 110)] * 4 + [(0, 50), (100, 0), (-3, 10)])
    assert few.status == "insufficient-samples"
    assert few.ratio == 1.0
    assert (few.samples, few.used, few.rejected_invalid) == (7, 0, 3)


@pytest.mark.parametrize("bad", [("100", 120), (100, None), (100, 1.5), (True, 100), (1, 2, 3), "xy"])
def test_calibration_rejects_samples_that_are_not_token_counts(bad):
    with pytest.raises(TokenEstimateError) as caught:
        calibrate_token_ratio([(100, 120), bad])
    assert caught.value.code == "token-calibration-sample-invalid"


def test_calibrator_keeps_the_newest_samples_and_calibrated_estimator_scales_up():
    calibrator = TokenCalibrator(max_samples=5)
    for _ in range(5):
        calibrator.record(estimated=100, actual=300)
    for _ in range(5):
        calibrator.record(estimated=100, actual=150)
    assert calibrator.samples() == (CalibrationSample(estimated=100, actual=150),) * 5
    calibration = calibrator.calibration()
    assert calibration.ratio == pytest.approx(1.5)
    with pytest.raises(TokenEstimateError):
        calibrator.record(estimated=100, actual="many")  # type: ignore[arg-type]
    assert len(calibrator.samples()) == 5
    estimator = CalibratedEstimator(CharsEstimator(), calibration)
    assert estimator(message(TextBlock(text="abcd"))) == 20  # ceil(13 * 1.5)
    assert estimator.estimate_text("abcdefgh") == 3  # ceil(2 * 1.5)
    assert CalibratedEstimator(CharsEstimator(), 0.5).ratio == 1.0
