"""PiSessionAdapter: the runtime-adapter-v1 contract over real Pi session files."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import anyio
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ds4_context_core import AdapterClosedError, stable_hash
from ds4_context_core.adapter import (
    EMBEDDING_PORT_VERSION,
    CapabilityRequest,
    CompletionFallback,
    CompletionRequest,
    EmbeddingPort,
)
from ds4_context_core.conformance import (
    ConformanceTransport,
    assert_runtime_adapter_conformance,
    load_conformance_fixture,
    run_runtime_adapter_conformance_sync,
)
from ds4_context_engine._exceptions import PiSessionError, UntrustedPathError
from ds4_context_engine.pi import (
    PI_EMBEDDING_CAPABILITY_VERSION,
    PiSessionAdapter,
    append_pi_entry,
    pi_session_conformance_factory,
    pi_session_revision,
    read_pi_session_bytes,
)
from ds4_context_engine.store import append_pin_event, append_unpin_event

FIXTURES = Path(__file__).parent / "fixtures" / "pi"


async def _transport(request):
    return {"role": "assistant", "content": "ok"}


def _session_in(tmp_path, fixture="v3-coding.jsonl", cwd=None):
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    data = (FIXTURES / fixture).read_text()
    original_cwd = json.loads(data.splitlines()[0])["cwd"]
    path = tmp_path / "session.jsonl"
    path.write_text(data.replace(f'"cwd":"{original_cwd}"', f'"cwd":"{cwd or project}"', 1))
    return path, project


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_pi_adapter_passes_the_conformance_kit(backend):
    report = run_runtime_adapter_conformance_sync(pi_session_conformance_factory(), backend=backend)
    assert_runtime_adapter_conformance(report)
    assert [case.id for case in report.cases if case.passed] == [
        "identity",
        "capabilities",
        "canonical-history",
        "rebuild",
        "privacy",
        "fallback",
        "lifecycle",
    ]
    # a Pi file has no system message and no local-only mark: skipped, and said so; pins are carried
    assert report.skipped_parts == ("system", "local-only-flag")
    assert report.fixture_version == "runtime-adapter-conformance-fixture-v2"


def test_the_pi_adapter_carries_images_thinking_and_parallel_tool_calls_of_the_v2_fixture(tmp_path):
    """What the Pi form can hold comes back exactly; an adapter that lost it would fail the kit."""
    fixture = load_conformance_fixture().without(frozenset({"system", "local-only-flag"}))
    subject = pi_session_conformance_factory().create(fixture, ConformanceTransport({}))
    try:
        snapshot = subject.adapter.snapshot_history()
        got = {message.source_entry_id: message for message in snapshot.messages}
        for part in ("image", "thinking", "parallel-tool-calls", "pinned-flag"):
            for message_id in fixture.parts[part]:
                want = next(message for message in fixture.messages if message.id == message_id)
                assert got[want.source_entry_id].blocks == want.blocks
                assert got[want.source_entry_id].flags == want.flags
        parallel = [group for group in snapshot.tool_atomic_groups if len(group.tool_call_ids) == 2]
        assert [group.tool_call_ids for group in parallel] == [("tool-call-2", "tool-call-3")]
    finally:
        anyio.run(subject.adapter.shutdown)
        assert subject.cleanup is not None
        subject.cleanup()


def test_snapshot_revision_is_sha256_of_stable_json_of_leaf_and_entries(tmp_path):
    path, project = _session_in(tmp_path)
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    snapshot = adapter.snapshot_history()
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    expected = hashlib.sha256(
        json.dumps({"leafId": "a0000010", "entries": entries}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert snapshot.revision == expected
    assert snapshot.project_root == str(project.resolve())
    assert snapshot.session_id == "4f1c2a7e-0b5d-4a8e-9c1f-2d3e4f5a6b7c"
    assert len(snapshot.messages) == 10
    assert all(group.complete for group in snapshot.tool_atomic_groups)


def test_appends_change_the_revision_and_show_up_in_the_next_snapshot(tmp_path):
    path, project = _session_in(tmp_path)
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    first = adapter.snapshot_history()
    entry = append_pi_entry(path, "message", {"message": {"role": "user", "content": "next", "timestamp": 9}})
    second = adapter.snapshot_history()
    assert second.revision != first.revision
    assert second.messages[-1].source_entry_id == entry.id
    assert second.messages[:-1] == first.messages


def test_a_leaf_id_selects_an_older_branch(tmp_path):
    path, project = _session_in(tmp_path, "v2-branches.jsonl")
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport, leaf_id="b0000004")
    assert [m.source_entry_id for m in adapter.snapshot_history().messages] == [
        "b0000001",
        "b0000002",
        "b0000003",
        "b0000004",
    ]


def test_a_cwd_outside_the_trusted_roots_is_refused_and_reported(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path, project = _session_in(tmp_path, cwd=elsewhere)
    before = path.read_bytes()
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    with pytest.raises(UntrustedPathError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "trusted-project-root-untrusted"
    with pytest.raises(UntrustedPathError):
        adapter.trusted_project_root()
    assert [d.code for d in adapter.diagnostics()] == ["canonical-history-read-failed"]
    assert path.read_bytes() == before


def test_a_symlink_inside_the_root_that_leads_outside_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "link").symlink_to(outside, target_is_directory=True)
    path, _ = _session_in(tmp_path, cwd=project / "link")
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    with pytest.raises(UntrustedPathError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "trusted-project-root-untrusted"


@pytest.mark.parametrize("fixture", ["corrupt.jsonl", "cycle.jsonl"])
def test_a_damaged_session_is_rejected_not_repaired(tmp_path, fixture):
    path, project = _session_in(tmp_path, fixture)
    before = path.read_bytes()
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    with pytest.raises(PiSessionError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "pi-session-damaged"
    assert "canonical-history-read-failed" in [d.code for d in adapter.diagnostics()]
    assert path.read_bytes() == before


def test_unknown_entry_types_do_not_block_a_snapshot(tmp_path):
    path, project = _session_in(tmp_path, "v3-compacted.jsonl")
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    assert adapter.snapshot_history().messages[0].source_entry_id == "c0000005"


def test_capabilities_follow_the_embedding_port_and_local_kv_is_unsupported(tmp_path):
    path, project = _session_in(tmp_path)
    requests = [
        CapabilityRequest(id=c)
        for c in ("compaction", "provider-continuation", "embeddings", "local-kv-reuse")
    ]
    without = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    negotiated = without.negotiate_capabilities(requests)
    assert negotiated.enabled == ("compaction", "provider-continuation")
    statuses = {status.id: status for status in negotiated.statuses}
    assert statuses["compaction"].version == "pi-session-compact-v1"
    assert statuses["provider-continuation"].version == "pi-openai-responses-continuation-v1"
    assert statuses["local-kv-reuse"].reason
    with_port = PiSessionAdapter(path, trusted_roots=[project], transport=_transport, embedding_port=object())
    assert with_port.negotiate_capabilities(requests).enabled == (
        "compaction",
        "provider-continuation",
        "embeddings",
    )
    assert {s.id: s.version for s in with_port.negotiate_capabilities(requests).statuses}["embeddings"] == (
        "embedding-port-v1"
    )


def test_the_embedding_capability_uses_the_core_embedding_port(tmp_path):
    class Port:
        async def embed(self, texts):
            return [[0.0] for _ in texts]

    assert isinstance(Port(), EmbeddingPort)
    assert PI_EMBEDDING_CAPABILITY_VERSION == EMBEDDING_PORT_VERSION
    path, project = _session_in(tmp_path)
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport, embedding_port=Port())
    declaration = {d.id: d for d in adapter.capability_declarations()}["embeddings"]
    assert (declaration.supported, declaration.version) == (True, EMBEDDING_PORT_VERSION)


def test_shutdown_closes_reads_and_completions(tmp_path):
    path, project = _session_in(tmp_path)
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)

    async def run():
        await adapter.shutdown()
        await adapter.shutdown()
        return await adapter.complete(
            CompletionRequest(provider="openai", model="m", payload={"messages": []})
        )

    result = anyio.run(run)
    assert isinstance(result, CompletionFallback)
    assert result.code == "adapter-closed"
    with pytest.raises(AdapterClosedError):
        adapter.snapshot_history()


def test_a_replaced_file_is_read_again_from_the_start(tmp_path):
    path, project = _session_in(tmp_path)
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    adapter.snapshot_history()
    (tmp_path / "other").mkdir()
    other, _ = _session_in(tmp_path / "other", "v2-branches.jsonl", cwd=project)
    shutil.copy(other, path)
    with pytest.raises(PiSessionError) as caught:
        adapter.snapshot_history()
    assert caught.value.code == "pi-session-identity-changed"


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_JSON_VALUES, min_size=1, max_size=4))
def test_revision_equals_stable_hash_of_the_original_values(payloads):
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/p"}
    entries = []
    parent = None
    for number, payload in enumerate(payloads):
        entry_id = f"{number:08x}"
        entries.append(
            {
                "type": "custom",
                "id": entry_id,
                "parentId": parent,
                "timestamp": "t",
                "customType": "x",
                "data": payload,
            }
        )
        parent = entry_id
    data = b"".join(msgspec.json.encode(line) + b"\n" for line in [header, *entries])
    session = read_pi_session_bytes(data)
    assert pi_session_revision(session, session.leaf_id) == stable_hash(
        {"leafId": parent, "entries": entries}
    )


def test_the_adapter_marks_pins_from_the_sessions_pin_events_and_follows_unpins(tmp_path):
    """The pinned flag comes from ``ds4-context.pin`` entries (as the CLI writes them), read incrementally."""
    path, project = _session_in(tmp_path)
    adapter = PiSessionAdapter(path, trusted_roots=[project], transport=_transport)
    first = adapter.snapshot_history().messages[0]
    assert first.flags is None or not first.flags.pinned
    append_pin_event(path, first.source_entry_id, label="keep")
    pinned = adapter.snapshot_history().messages[0]
    assert pinned.flags is not None
    assert pinned.flags.pinned
    others = adapter.snapshot_history().messages[1:]
    assert all(message.flags is None or not message.flags.pinned for message in others)
    append_unpin_event(path, first.source_entry_id)
    unpinned = adapter.snapshot_history().messages[0]
    assert unpinned.flags is None or not unpinned.flags.pinned
    adapter.rebuild_derived_state()  # a replay from the first entry gives the same answer
    again = adapter.snapshot_history().messages[0]
    assert again.flags is None or not again.flags.pinned
