"""ReferenceRuntimeAdapter: history projection, completion, privacy, capabilities, local KV, lifecycle."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import anyio
import msgspec
import pytest
from reference_helpers import RUNTIME, SESSION, make_message

import ds4_context_core.adapter as core_adapter
import ds4_context_reference_adapter as reference
from ds4_context_core import AdapterClosedError, ModelDescriptor, TextBlock, ToolCallBlock, ToolResultBlock
from ds4_context_core.adapter import (
    CapabilityRequest,
    CompletionCompleted,
    CompletionFallback,
    CompletionRequest,
)
from ds4_context_core.localkv import LocalKvHit, LocalKvMiss, LocalKvReplayResult, LocalKvReuseRequest
from ds4_context_reference_adapter import (
    COMPACTION_UNSUPPORTED_REASON,
    CONTINUATION_UNSUPPORTED_REASON,
    ReferenceConfigError,
    ReferenceHistoryError,
    ReferenceLocalKvRequest,
    ReferenceRuntimeAdapter,
    append_reference_history_message,
    read_reference_history,
)

BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])
CREDENTIAL = "sk-LjCp390g0QVohwvUDq1AoPeDOrg3J7v53ZtX"
MODEL = ModelDescriptor(provider="remote-llm", id="big-model", context_window=32768, max_tokens=4096)


def _run(backend: str, function: Any, *args: Any) -> Any:
    return anyio.run(functools.partial(function, *args), backend=backend)


class RecordingTransport:
    """An async transport that remembers the payloads it was given and can be told to fail."""

    def __init__(self, output: Any = "answer") -> None:
        self.received: list[CompletionRequest] = []
        self.output = output
        self.failures = 0

    async def __call__(self, request: CompletionRequest) -> Any:
        self.received.append(request)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("provider unreachable")
        return self.output


class FakeKvPort:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.reuse_requests: list[LocalKvReuseRequest] = []
        self.replays = 0
        self.shutdowns = 0
        self.replay_fails = False
        self.shutdown_fails = False

    async def try_reuse(self, request: LocalKvReuseRequest) -> Any:
        self.reuse_requests.append(request)
        return self.answer

    async def full_replay(self, request: LocalKvReuseRequest) -> LocalKvReplayResult:
        self.replays += 1
        if self.replay_fails:
            raise RuntimeError("runtime gone")
        return LocalKvReplayResult(output="replayed", prefill_tokens=160, prefill_latency_ms=12.5)

    async def shutdown(self) -> None:
        self.shutdowns += 1
        if self.shutdown_fails:
            raise RuntimeError("port refused to stop")


def _request(content: Any = "hello", provider: str = "remote-llm") -> CompletionRequest:
    return CompletionRequest(
        provider=provider, model="big-model", payload={"messages": [{"role": "user", "content": content}]}
    )


def _adapter(history, **options: Any) -> ReferenceRuntimeAdapter:
    options.setdefault("transport", RecordingTransport())
    return ReferenceRuntimeAdapter(history, model=MODEL, **options)


def test_snapshot_projects_the_file_and_follows_appends(history, project):
    append_reference_history_message(history, make_message("u1"))
    adapter = _adapter(history, runtime_id=RUNTIME, session_id=SESSION)
    assert adapter.trusted_project_root() == str(project.resolve())
    first = adapter.snapshot_history()
    assert [m.source_entry_id for m in first.messages] == ["u1"]
    assert adapter.snapshot_history() == first
    adapter.append_message(make_message("u2"))
    second = adapter.snapshot_history()
    assert [m.source_entry_id for m in second.messages] == ["u1", "u2"]
    assert second.revision != first.revision
    assert adapter.current_model() == MODEL
    assert adapter.identity.adapter_name == "ds4-context-reference-adapter"
    assert adapter.identity.contract_version == "runtime-adapter-v1"


def test_rebuild_reproduces_the_same_snapshot_and_leaves_the_file(history):
    append_reference_history_message(history, make_message("u1"))
    adapter = _adapter(history)
    before_bytes = history.read_bytes()
    before = adapter.snapshot_history()
    adapter.rebuild_derived_state()
    after = adapter.snapshot_history()
    assert after == before
    assert history.read_bytes() == before_bytes
    assert [d.code for d in adapter.diagnostics()] == ["derived-state-rebuilt"]


def test_a_torn_file_is_rejected_with_a_diagnostic_and_left_alone(history):
    adapter = _adapter(history)
    with history.open("ab") as handle:
        handle.write(b'{"type":"message"')
    before = history.read_bytes()
    with pytest.raises(ReferenceHistoryError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "canonical-history-read-failed"
    assert [d.code for d in adapter.diagnostics()] == ["canonical-history-read-failed"]
    assert history.read_bytes() == before


def test_an_untrusted_root_or_foreign_session_is_rejected(history, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ReferenceHistoryError) as caught:
        _adapter(history, trusted_project_root=elsewhere).snapshot_history()
    assert (caught.value.code, caught.value.reason) == (
        "canonical-history-identity-mismatch",
        "project-root-untrusted",
    )
    adapter = _adapter(history, session_id="other-session")
    with pytest.raises(ReferenceHistoryError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "canonical-history-identity-mismatch"
    assert adapter.diagnostics()[-1].code == "canonical-history-identity-mismatch"


@BACKENDS
def test_async_transport_receives_the_sanitized_payload_only(history, backend):
    transport = RecordingTransport(output={"role": "assistant", "content": "done"})
    adapter = _adapter(history, transport=transport)
    secret = f"[ds4:local-only]private plan[/ds4:local-only] key {CREDENTIAL}"
    result = _run(backend, adapter.complete, _request(secret))
    assert isinstance(result, CompletionCompleted)
    assert result.output == {"role": "assistant", "content": "done"}
    assert result.privacy.destination == "remote"
    assert result.privacy.secret_redactions == 1
    sent = msgspec.json.encode(transport.received[0].payload).decode()
    assert CREDENTIAL not in sent
    assert "private plan" not in sent
    assert CREDENTIAL not in repr(result)


@BACKENDS
def test_a_plain_function_transport_runs_off_the_event_loop(history, backend):
    seen: list[str] = []

    def blocking_transport(request: CompletionRequest) -> str:
        seen.append(threading.current_thread().name)
        return "sync answer"

    adapter = _adapter(history, transport=blocking_transport)
    result = _run(backend, adapter.complete, _request())
    assert isinstance(result, CompletionCompleted)
    assert result.output == "sync answer"
    assert seen
    assert seen[0] != threading.main_thread().name


class ExplodingContent(Mapping[str, Any]):
    """Content that refuses every access, as a broken or hostile payload object might."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("no access")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("no access")

    def __len__(self) -> int:
        raise RuntimeError("no access")


@BACKENDS
def test_privacy_fails_closed_and_nothing_is_sent(history, backend):
    transport = RecordingTransport()
    adapter = _adapter(history, transport=transport)
    result = _run(backend, adapter.complete, _request(ExplodingContent()))
    assert isinstance(result, CompletionFallback)
    assert (result.code, result.retryable) == ("privacy-enforcement-failed", False)
    assert transport.received == []
    assert [d.code for d in adapter.diagnostics()] == ["privacy-enforcement-failed"]


@BACKENDS
def test_transport_failures_fall_back_retryably_and_diagnostics_stay_bounded(history, backend):
    transport = RecordingTransport()
    transport.failures = 150
    adapter = _adapter(history, transport=transport)

    async def many() -> list[Any]:
        return [await adapter.complete(_request(CREDENTIAL)) for _ in range(150)]

    results = _run(backend, many)
    assert {(r.code, r.retryable) for r in results} == {("transport-failed", True)}
    diagnostics = adapter.diagnostics()
    assert len(diagnostics) == 100
    assert {d.code for d in diagnostics} == {"completion-transport-failed"}
    assert CREDENTIAL not in repr(diagnostics)
    assert isinstance(_run(backend, adapter.complete, _request()), CompletionCompleted)


def test_invalid_requests_are_refused_without_calling_the_transport(history):
    transport = RecordingTransport()
    adapter = _adapter(history, transport=transport)
    result = anyio.run(adapter.complete, CompletionRequest(provider=" ", model="m", payload={}))
    assert isinstance(result, CompletionFallback)
    assert result.code == "invalid-request"
    assert transport.received == []


def test_declarations_without_ports_and_negotiation_diagnostics(history):
    adapter = _adapter(history)
    declarations = {d.id: d for d in adapter.capability_declarations()}
    assert list(declarations) == ["compaction", "provider-continuation", "embeddings", "local-kv-reuse"]
    assert (declarations["compaction"].supported, declarations["compaction"].reason) == (
        False,
        COMPACTION_UNSUPPORTED_REASON,
    )
    assert declarations["provider-continuation"].reason == CONTINUATION_UNSUPPORTED_REASON
    assert not declarations["embeddings"].supported
    assert not declarations["local-kv-reuse"].supported
    negotiation = adapter.negotiate_capabilities([CapabilityRequest(id="compaction", required=True)])
    assert negotiation.enabled == ()
    assert negotiation.disabled == ("compaction",)
    assert [(d.code, d.severity) for d in adapter.diagnostics()] == [("capability-unsupported", "warning")]


class Embedder:
    def __init__(self) -> None:
        self.received: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        self.received.append(list(texts))
        return [[float(len(text))] for text in texts]


@BACKENDS
def test_an_embedding_port_is_declared_and_gets_sanitized_texts(history, backend):
    embedder = Embedder()
    adapter = _adapter(history, embedding_port=embedder, embedding_provider="remote-embeddings")
    declaration = {d.id: d for d in adapter.capability_declarations()}["embeddings"]
    assert (declaration.supported, declaration.version) == (True, "embedding-port-v1")
    negotiation = adapter.negotiate_capabilities([CapabilityRequest(id="embeddings")])
    assert negotiation.enabled == ("embeddings",)
    vectors = _run(backend, adapter.embed, ["plain", f"token {CREDENTIAL}"])
    assert len(vectors) == 2
    assert CREDENTIAL not in repr(embedder.received)
    with pytest.raises(ReferenceConfigError):
        _run(backend, _adapter(history).embed, ["x"])


def test_the_embedding_port_names_are_the_core_ones(history):
    assert reference.EmbeddingPort is core_adapter.EmbeddingPort
    assert reference.EMBEDDING_PORT_VERSION == core_adapter.EMBEDDING_PORT_VERSION == "embedding-port-v1"
    assert isinstance(Embedder(), core_adapter.EmbeddingPort)
    with pytest.raises(ReferenceConfigError):
        _adapter(history, embedding_port=object())


KV_HINTS = ReferenceLocalKvRequest(
    prompt_prefix="system prompt and tools",
    prefix_token_count=120,
    context_token_count=160,
    model_revision="r1",
)


@BACKENDS
def test_local_kv_stays_off_until_enabled_even_with_a_port(history, backend):
    port = FakeKvPort(LocalKvHit(output="from cache", saved_prefill_tokens=120, prefill_latency_ms=1.0))
    transport = RecordingTransport()
    adapter = _adapter(history, transport=transport, local_kv_port=port)
    declaration = {d.id: d for d in adapter.capability_declarations()}["local-kv-reuse"]
    assert (declaration.supported, declaration.version) == (True, "local-kv-runtime-port-v1")
    result = _run(
        backend, functools.partial(adapter.complete, local_kv=KV_HINTS), _request(provider="ollama")
    )
    assert result.output == "answer"
    assert result.local_kv is None
    assert port.reuse_requests == []
    assert adapter.local_kv_diagnostics().requests == 0


@BACKENDS
def test_local_kv_hit_miss_and_remote_bypass(history, backend):
    hit = FakeKvPort(LocalKvHit(output="from cache", saved_prefill_tokens=120, prefill_latency_ms=1.0))
    transport = RecordingTransport()
    adapter = _adapter(history, transport=transport, local_kv_port=hit, local_kv_enabled=True)
    complete = functools.partial(adapter.complete, local_kv=KV_HINTS)
    result = _run(backend, complete, _request(provider="ollama"))
    assert (result.output, result.local_kv.status, result.local_kv.saved_prefill_tokens) == (
        "from cache",
        "hit",
        120,
    )
    assert transport.received == []
    assert len(hit.reuse_requests[0].hashes.fingerprint) == 64

    remote = _run(backend, complete, _request(provider="remote-llm"))
    assert (remote.output, remote.local_kv.status, remote.local_kv.rejection) == (
        "answer",
        "bypassed",
        "non-local-destination",
    )
    counters = adapter.local_kv_diagnostics()
    assert (counters.requests, counters.hits, counters.bypassed_requests, counters.saved_prefill_tokens) == (
        2,
        1,
        1,
        120,
    )

    miss = FakeKvPort(LocalKvMiss())
    adapter = _adapter(history, local_kv_port=miss, local_kv_enabled=True)
    replayed = _run(
        backend, functools.partial(adapter.complete, local_kv=KV_HINTS), _request(provider="ollama")
    )
    assert (replayed.output, replayed.local_kv.status, replayed.local_kv.replayed) == (
        "replayed",
        "miss",
        True,
    )
    assert miss.replays == 1


@BACKENDS
def test_a_failed_local_replay_is_a_retryable_fallback(history, backend):
    port = FakeKvPort(LocalKvMiss())
    port.replay_fails = True
    adapter = _adapter(history, local_kv_port=port, local_kv_enabled=True)
    result = _run(
        backend, functools.partial(adapter.complete, local_kv=KV_HINTS), _request(provider="ollama")
    )
    assert (result.code, result.retryable) == ("transport-failed", True)
    assert [d.code for d in adapter.diagnostics()] == [
        "local-kv-replay-failed",
        "completion-transport-failed",
    ]


@BACKENDS
def test_shutdown_is_idempotent_and_closes_everything(history, backend):
    port = FakeKvPort(LocalKvMiss())
    port.shutdown_fails = True
    transport = RecordingTransport()
    adapter = _adapter(history, transport=transport, local_kv_port=port)
    before = history.read_bytes()

    async def lifecycle() -> Any:
        await adapter.shutdown()
        await adapter.shutdown()
        return await adapter.complete(_request())

    closed = _run(backend, lifecycle)
    assert (closed.code, closed.retryable) == ("adapter-closed", False)
    assert transport.received == []
    assert port.shutdowns == 1
    with pytest.raises(AdapterClosedError):
        adapter.snapshot_history()
    with pytest.raises(AdapterClosedError):
        adapter.append_message(make_message("u1"))
    codes = [d.code for d in adapter.diagnostics()]
    assert codes[0] == "local-kv-shutdown-failed"
    assert "adapter-closed" in codes
    assert history.read_bytes() == before


def test_bad_construction_is_refused_with_a_code(history):
    with pytest.raises(ReferenceConfigError) as caught:
        ReferenceRuntimeAdapter(history, transport="not callable")  # type: ignore[arg-type]
    assert caught.value.code == "reference-adapter-config-invalid"
    with pytest.raises(ReferenceConfigError):
        ReferenceRuntimeAdapter(history, transport=RecordingTransport(), local_kv_port=object())  # type: ignore[arg-type]


def test_an_unchanged_file_reuses_its_projection_but_any_byte_change_is_seen(history):
    append_reference_history_message(history, make_message("u1", TextBlock(text="first draft")))
    adapter = _adapter(history)
    first = adapter.snapshot_history()
    assert adapter.snapshot_history() is first
    # Same size, same inode, one letter different: only the content hash can notice.
    edited = history.read_bytes().replace(b"first draft", b"first craft")
    with history.open("r+b") as handle:
        handle.write(edited)
    second = adapter.snapshot_history()
    assert second.revision != first.revision
    assert second.messages[0].blocks == (TextBlock(text="first craft"),)


def test_a_snapshot_after_appends_equals_a_fresh_read_and_names_bad_new_lines(history):
    append_reference_history_message(history, make_message("u1"))
    adapter = _adapter(history)
    adapter.snapshot_history()
    append_reference_history_message(
        history, make_message("a1", ToolCallBlock(id="c1", name="ls", arguments={}))
    )
    append_reference_history_message(
        history,
        make_message("t1", ToolResultBlock(tool_call_id="c1", tool_name="ls", content="x"), role="tool"),
    )
    grown = adapter.snapshot_history()
    assert grown == read_reference_history(history).snapshot
    assert grown.tool_atomic_groups[0].complete
    with history.open("ab") as handle:
        handle.write(b"not json\n")
    with pytest.raises(ReferenceHistoryError) as caught:
        adapter.snapshot_history()
    assert (caught.value.reason, caught.value.line) == ("record-invalid", 5)
