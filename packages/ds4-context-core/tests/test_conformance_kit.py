"""The conformance kit against a correct in-memory adapter and against adapters broken on purpose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from ds4_context_core import (
    AdapterArgumentError,
    AdapterClosedError,
    ConformanceError,
    MessageFlags,
    sha256_hex,
)
from ds4_context_core.adapter import (
    AdapterDiagnostic,
    AdapterIdentity,
    CapabilityDeclaration,
    CapabilityNegotiation,
    CapabilityRequest,
    CompletionCompleted,
    CompletionRequest,
    CompletionResult,
    DiagnosticsBuffer,
    RuntimeAdapter,
    complete_with_guards,
    negotiate_runtime_capabilities,
    validate_completion_request,
)
from ds4_context_core.conformance import (
    CONFORMANCE_CASE_IDS,
    CONFORMANCE_FAILURE_CODES,
    CONFORMANCE_FAILURE_DETAILS,
    CONFORMANCE_HISTORY_PARTS,
    ConformanceCaseResult,
    ConformanceFixture,
    ConformanceReport,
    ConformanceSubject,
    ConformanceTransport,
    SimpleConformanceFactory,
    assert_runtime_adapter_conformance,
    load_conformance_fixture,
    main,
    make_conformance_test,
    run_runtime_adapter_conformance,
    run_runtime_adapter_conformance_sync,
)
from ds4_context_core.history import build_runtime_history_snapshot
from ds4_context_core.privacy import PrivacyPolicy, PrivacyResult, enforce_payload_privacy

pytestmark = pytest.mark.timeout(60)


class MemoryAdapter:
    """A small, correct runtime adapter over an in-memory canonical history."""

    def __init__(self, fixture: ConformanceFixture, transport: ConformanceTransport, root: str) -> None:
        self.identity = AdapterIdentity(adapter_name="memory-test-adapter", adapter_version="1.0.0")
        self._fixture = fixture
        self._transport = transport
        self._root = root
        self._policy = PrivacyPolicy()
        self._diagnostics = DiagnosticsBuffer()
        self._closed = False
        self._cached: Any = None

    def _build_snapshot(self) -> Any:
        revision = sha256_hex(msgspec.json.encode(self._fixture.messages))
        return build_runtime_history_snapshot(
            runtime_id=self._fixture.runtime_id,
            session_id=self._fixture.session_id,
            revision=revision,
            project_root=self._root,
            messages=self._fixture.messages,
        )

    def snapshot_history(self) -> Any:
        if self._closed:
            self._diagnostics.record("adapter-closed", "history read after shutdown")
            raise AdapterClosedError("adapter-closed", "the adapter was shut down")
        if self._cached is None:
            self._cached = self._build_snapshot()
        return self._cached

    def rebuild_derived_state(self) -> None:
        self._cached = None
        self._diagnostics.record("derived-state-rebuilt", "snapshot cache discarded", severity="info")

    def current_model(self) -> Any:
        return self._fixture.model

    def trusted_project_root(self) -> str:
        return self._root

    def enforce_privacy(self, request: CompletionRequest) -> PrivacyResult:
        return enforce_payload_privacy(request.payload, provider=request.provider, policy=self._policy)

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        return await complete_with_guards(
            request,
            closed=self._closed,
            enforce_privacy=self.enforce_privacy,
            transport=self._transport,
            diagnostics=self._diagnostics,
        )

    def capability_declarations(self) -> Sequence[CapabilityDeclaration]:
        return (
            CapabilityDeclaration(id="compaction", supported=False, reason="no native compaction"),
            CapabilityDeclaration(id="provider-continuation", supported=False, reason="stateless transport"),
            CapabilityDeclaration(id="embeddings", supported=True, version="memory-embeddings-v1"),
            CapabilityDeclaration(id="local-kv-reuse", supported=False, reason="no local runtime"),
        )

    def negotiate_capabilities(self, requests: Sequence[CapabilityRequest]) -> CapabilityNegotiation:
        return negotiate_runtime_capabilities(self.capability_declarations(), requests)

    def diagnostics(self) -> Sequence[AdapterDiagnostic]:
        return self._diagnostics.snapshot()

    async def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._diagnostics.record("adapter-closed", "adapter shut down", severity="info")


def _factory(
    adapter_class: type[MemoryAdapter] = MemoryAdapter, name: str = "memory"
) -> SimpleConformanceFactory:
    root = os.path.realpath(os.getcwd())

    def create(fixture: ConformanceFixture, transport: ConformanceTransport) -> ConformanceSubject:
        return ConformanceSubject(adapter=adapter_class(fixture, transport, root), expected_project_root=root)

    return SimpleConformanceFactory(name=name, create=create)


# --- adapters broken on purpose, each in exactly one way -------------------------------------------------


class LeaksMarker(MemoryAdapter):
    def enforce_privacy(self, request: CompletionRequest) -> PrivacyResult:
        result = super().enforce_privacy(request)
        if result.blocked_blocks:  # "forgets" the marked span
            return PrivacyResult(
                provider=result.provider,
                destination=result.destination,
                payload=request.payload,
                changed=False,
                blocked_blocks=0,
                secret_redactions=0,
            )
        return result


class SendsAfterSanitizerError(MemoryAdapter):
    async def complete(self, request: CompletionRequest) -> CompletionResult:
        result = await super().complete(request)
        if getattr(result, "code", None) == "privacy-enforcement-failed":
            await self._transport(request)  # the raw payload goes out anyway
        return result


class RaisesFromComplete(MemoryAdapter):
    async def complete(self, request: CompletionRequest) -> CompletionResult:
        try:
            privacy = self.enforce_privacy(validate_completion_request(request))
        except Exception:
            return await super().complete(request)
        if self._closed:
            return await super().complete(request)
        output = await self._transport(request.with_payload(privacy.payload))  # transport errors escape
        return CompletionCompleted(output=output, privacy=privacy.summary())


class InventsHistory(MemoryAdapter):
    def _build_snapshot(self) -> Any:
        snapshot = super()._build_snapshot()
        invented = msgspec.structs.replace(
            snapshot.messages[-1],
            id=f"{self._fixture.session_id}:entry-invented",
            source_entry_id="entry-invented",
            provenance=msgspec.structs.replace(snapshot.messages[-1].provenance, entry_id="entry-invented"),
        )
        return msgspec.structs.replace(snapshot, messages=(*snapshot.messages, invented))


class DropsFlags(MemoryAdapter):
    """Keeps every block but loses the messages' flags (here, ``atomic`` on the tool call and result)."""

    def _build_snapshot(self) -> Any:
        snapshot = super()._build_snapshot()
        bare = tuple(msgspec.structs.replace(message, flags=MessageFlags()) for message in snapshot.messages)
        return msgspec.structs.replace(snapshot, messages=bare)


class SplitsToolGroup(MemoryAdapter):
    def _build_snapshot(self) -> Any:
        snapshot = super()._build_snapshot()
        group, *others = snapshot.tool_atomic_groups
        halves = tuple(
            msgspec.structs.replace(group, id=f"{group.id}-{index}", message_ids=(message_id,))
            for index, message_id in enumerate(group.message_ids)
        )
        return msgspec.structs.replace(snapshot, tool_atomic_groups=(*halves, *others))


class WrongRoot(MemoryAdapter):
    def trusted_project_root(self) -> str:
        return os.path.dirname(self._root) or "/"


class ShutdownNotIdempotent(MemoryAdapter):
    async def shutdown(self) -> None:
        if self._closed:
            raise RuntimeError("already shut down")
        await super().shutdown()


class ReadsAfterShutdown(MemoryAdapter):
    def snapshot_history(self) -> Any:
        if self._cached is None:
            self._cached = self._build_snapshot()
        return self._cached


class DiagnosticsHoldPrompt(MemoryAdapter):
    async def complete(self, request: CompletionRequest) -> CompletionResult:
        try:
            prompt = json.dumps(request.payload)[:500]
        except TypeError:
            prompt = "unprintable"
        self._diagnostics.add(AdapterDiagnostic(code="debug", severity="info", message=prompt))
        return await super().complete(request)


class DiagnosticsHoldSanitizedPayload(MemoryAdapter):
    """Copies the first 200 characters of every payload it sends, after privacy: no probe, still a leak."""

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        try:
            sent = json.dumps(self.enforce_privacy(request).payload)[:200]
        except Exception:  # the sanitizer's own failure is reported elsewhere
            sent = "unprintable"
        self._diagnostics.add(AdapterDiagnostic(code="debug", severity="info", message=sent))
        return await super().complete(request)


class DeclaresThreeCapabilities(MemoryAdapter):
    def capability_declarations(self) -> Sequence[CapabilityDeclaration]:
        return tuple(super().capability_declarations())[:3]


class EnablesEverything(MemoryAdapter):
    def negotiate_capabilities(self, requests: Sequence[CapabilityRequest]) -> CapabilityNegotiation:
        honest = super().negotiate_capabilities(requests)
        return msgspec.structs.replace(honest, enabled=tuple(r.id for r in requests), disabled=())


class WrongModel(MemoryAdapter):
    def current_model(self) -> Any:
        return msgspec.structs.replace(self._fixture.model, context_window=1_000_000)


class EchoesPayloadInOutput(MemoryAdapter):
    async def complete(self, request: CompletionRequest) -> CompletionResult:
        result = await super().complete(request)
        if isinstance(result, CompletionCompleted):
            return msgspec.structs.replace(result, output={"echo": dict(request.payload)})
        return result


class SilentPrivacyFailure(MemoryAdapter):
    def diagnostics(self) -> Sequence[AdapterDiagnostic]:
        return tuple(d for d in super().diagnostics() if d.code != "privacy-enforcement-failed")


class RebuildDropsHistory(MemoryAdapter):
    def rebuild_derived_state(self) -> None:
        super().rebuild_derived_state()
        self._fixture = msgspec.structs.replace(self._fixture, messages=self._fixture.messages[:2])


class SendsNothing(MemoryAdapter):
    def enforce_privacy(self, request: CompletionRequest) -> PrivacyResult:
        result = super().enforce_privacy(request)
        return msgspec.structs.replace(result, payload={"messages": []})


BROKEN = [
    (SendsNothing, "privacy", "privacy-overblocked"),
    (DeclaresThreeCapabilities, "capabilities", "capability-declarations-incomplete"),
    (EnablesEverything, "capabilities", "capability-negotiation-mismatch"),
    (WrongModel, "identity", "model-mismatch"),
    (EchoesPayloadInOutput, "privacy", "result-contains-probe"),
    (SilentPrivacyFailure, "privacy", "privacy-failure-not-reported"),
    (RebuildDropsHistory, "rebuild", "rebuild-changed-history"),
    (LeaksMarker, "privacy", "privacy-probe-leaked"),
    (SendsAfterSanitizerError, "privacy", "transport-called-after-privacy-failure"),
    (RaisesFromComplete, "fallback", None),
    (InventsHistory, "canonical-history", "history-messages-mismatch"),
    (DropsFlags, "canonical-history", "history-flags-lost"),
    (SplitsToolGroup, "canonical-history", "history-invalid"),
    (WrongRoot, "identity", "trusted-root-mismatch"),
    (ShutdownNotIdempotent, "lifecycle", None),
    (ReadsAfterShutdown, "lifecycle", "closed-history-readable"),
    (DiagnosticsHoldPrompt, "privacy", "diagnostics-contain-probe"),
    (DiagnosticsHoldSanitizedPayload, "privacy", "diagnostics-contain-payload"),
]


def _probe_free(report: ConformanceReport) -> None:
    """The JSON of a report holds case ids, booleans and fixed codes only: no probe, payload or error text."""
    encoded = msgspec.json.encode(report).decode()
    for forbidden in (
        "ds4-conformance-private",
        "sk-",
        "Deploy key",
        "Summarize",
        "Is the module",
        "refused",
    ):
        assert forbidden not in encoded
    allowed_strings = {
        *CONFORMANCE_CASE_IDS,
        *CONFORMANCE_FAILURE_CODES,
        *CONFORMANCE_FAILURE_DETAILS,
        "runtime-adapter-conformance-v2",
        "runtime-adapter-conformance-fixture-v2",
        "runtime-adapter-v1",
        *CONFORMANCE_HISTORY_PARTS,
        report.factory_name,
    }
    decoded = json.loads(encoded)
    strings = {
        decoded["version"],
        decoded["contractVersion"],
        decoded["factoryName"],
        decoded["fixtureVersion"],
    }
    strings.update(decoded["skippedParts"])
    for case in decoded["cases"]:
        strings.update(value for value in case.values() if isinstance(value, str))
    assert strings <= allowed_strings


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_correct_in_memory_adapter_passes_all_seven_checks(anyio_backend: str) -> None:
    report = await run_runtime_adapter_conformance(_factory())
    assert [case.id for case in report.cases] == list(CONFORMANCE_CASE_IDS)
    assert [case.passed for case in report.cases] == [True] * 7
    assert report.passed is True
    assert report.version == "runtime-adapter-conformance-v2"
    assert report.fixture_version == "runtime-adapter-conformance-fixture-v2"
    assert report.skipped_parts == ()
    assert report.contract_version == "runtime-adapter-v1"
    assert report.factory_name == "memory"
    assert assert_runtime_adapter_conformance(report) is report
    _probe_free(report)


def test_memory_adapter_satisfies_the_protocol() -> None:
    fixture = load_conformance_fixture()
    adapter = MemoryAdapter(fixture, ConformanceTransport({}), "/tmp")
    assert isinstance(adapter, RuntimeAdapter)


@pytest.mark.parametrize(("adapter_class", "case", "detail"), BROKEN, ids=[b[0].__name__ for b in BROKEN])
def test_each_broken_adapter_fails_exactly_its_check(
    adapter_class: type[MemoryAdapter], case: str, detail: str | None
) -> None:
    report = run_runtime_adapter_conformance_sync(_factory(adapter_class, adapter_class.__name__))
    failed = report.failed_cases()
    assert [result.id for result in failed] == [case]
    (result,) = failed
    if detail is None:
        assert result.failure_code == f"{case}-threw"
    else:
        assert result.failure_code == f"{case}-assertion-failed"
        assert result.detail == detail
    assert report.passed is False
    _probe_free(report)
    with pytest.raises(ConformanceError) as raised:
        assert_runtime_adapter_conformance(report)
    assert raised.value.code == "runtime-adapter-conformance-failed"
    assert case in str(raised.value)
    assert raised.value.report is report


def test_broken_adapters_also_fail_under_trio() -> None:
    report = run_runtime_adapter_conformance_sync(_factory(SendsAfterSanitizerError), backend="trio")
    assert [(c.id, c.failure_code) for c in report.failed_cases()] == [
        ("privacy", "privacy-assertion-failed")
    ]


def test_a_hanging_adapter_times_out_as_threw() -> None:
    class Hangs(MemoryAdapter):
        async def complete(self, request: CompletionRequest) -> CompletionResult:
            await anyio.sleep(30)
            raise AssertionError("unreachable")

    report = run_runtime_adapter_conformance_sync(_factory(Hangs), case_timeout=0.2)
    failing = {case.id: (case.failure_code, case.detail) for case in report.failed_cases()}
    assert failing == {
        "privacy": ("privacy-threw", "timeout"),
        "fallback": ("fallback-threw", "timeout"),
        "lifecycle": ("lifecycle-threw", "timeout"),
    }


def test_a_factory_that_raises_fails_every_case_without_leaking_its_message() -> None:
    def create(fixture: ConformanceFixture, transport: ConformanceTransport) -> ConformanceSubject:
        raise RuntimeError("secret-token-in-error sk-should-not-appear-anywhere")

    report = run_runtime_adapter_conformance_sync(
        SimpleConformanceFactory(name="broken\nname\x00", create=create)
    )
    assert report.factory_name == "broken name"
    assert [case.failure_code for case in report.cases] == [f"{case}-threw" for case in CONFORMANCE_CASE_IDS]
    assert {case.detail for case in report.cases} == {"adapter-create-failed"}
    assert "secret-token" not in msgspec.json.encode(report).decode()


def test_an_async_factory_and_async_cleanup_are_awaited() -> None:
    cleaned: list[str] = []
    root = os.path.realpath(os.getcwd())

    async def cleanup() -> None:
        cleaned.append("done")

    async def create(fixture: ConformanceFixture, transport: ConformanceTransport) -> ConformanceSubject:
        return ConformanceSubject(
            adapter=MemoryAdapter(fixture, transport, root), expected_project_root=root, cleanup=cleanup
        )

    report = run_runtime_adapter_conformance_sync(SimpleConformanceFactory(name="async", create=create))
    assert report.passed
    assert cleaned == ["done"] * 7


def test_assert_rejects_a_report_that_claims_to_pass_with_missing_cases() -> None:
    forged = ConformanceReport(
        version="runtime-adapter-conformance-v2",
        contract_version="runtime-adapter-v1",
        factory_name="forged",
        passed=True,
        cases=(ConformanceCaseResult(id="identity", passed=True),),
    )
    with pytest.raises(ConformanceError) as raised:
        assert_runtime_adapter_conformance(forged)
    assert raised.value.code == "runtime-adapter-conformance-failed"


def test_fixture_matches_the_published_v2_fixture() -> None:
    fixture = load_conformance_fixture()
    assert fixture.version == "runtime-adapter-conformance-fixture-v2"
    assert fixture.runtime_id == "conformance-runtime"
    assert fixture.session_id == "runtime-adapter-conformance-session"
    assert json.loads(msgspec.json.encode(fixture.model)) == {
        "provider": "conformance-remote",
        "id": "conformance-model",
        "contextWindow": 32768,
        "maxTokens": 4096,
        "reasoning": True,
        "input": ["text", "image"],
    }
    entries = (
        "entry-system", "entry-user", "entry-call", "entry-result", "entry-assistant", "entry-image",
        "entry-thinking", "entry-parallel-call", "entry-parallel-result-a", "entry-parallel-result-b",
        "entry-pinned", "entry-local", "entry-answer",
    )  # fmt: skip
    assert fixture.message_ids == tuple(f"runtime-adapter-conformance-session:{entry}" for entry in entries)
    by_entry = {message.source_entry_id: message for message in fixture.messages}
    call = by_entry["entry-call"].blocks[0]
    assert msgspec.to_builtins(call) == {
        "type": "toolCall",
        "id": "tool-call-1",
        "name": "read",
        "arguments": {"path": "src/index.ts"},
    }
    assert getattr(by_entry["entry-result"].blocks[0], "content", None) == "export const ready = true;"
    assert by_entry["entry-system"].role == "system"
    assert [_kind(block) for block in by_entry["entry-image"].blocks] == ["text", "image"]
    assert [_kind(block) for block in by_entry["entry-thinking"].blocks] == ["thinking", "text"]
    assert by_entry["entry-parallel-call"].tool_call_ids == ("tool-call-2", "tool-call-3")
    assert getattr(by_entry["entry-parallel-result-b"].blocks[0], "is_error", None) is True
    assert by_entry["entry-pinned"].flags == MessageFlags(pinned=True)
    assert by_entry["entry-local"].flags == MessageFlags(local_only=True)
    assert {message.provenance.source for message in fixture.messages} == {"runtime-session"}
    assert {message.provenance.runtime_id for message in fixture.messages} == {"conformance-runtime"}
    assert fixture.transport_output == {"role": "assistant", "content": "conformance completion"}
    first, parallel = fixture.tool_atomic_groups()
    assert first.complete
    assert first.tool_call_ids == ("tool-call-1",)
    assert parallel.complete
    assert parallel.tool_call_ids == ("tool-call-2", "tool-call-3")
    assert len(parallel.message_ids) == 3
    assert tuple(fixture.parts) == CONFORMANCE_HISTORY_PARTS
    # every part's messages exist, and no message belongs to two parts
    listed = [message_id for ids in fixture.parts.values() for message_id in ids]
    assert len(listed) == len(set(listed))
    assert set(listed) <= set(fixture.message_ids)


# --- the v2 fixture's parts: an adapter that loses one fails, one that declares it cannot carry it skips it


def _replace_messages(snapshot: Any, change: Any) -> Any:
    """The snapshot rebuilt over the changed messages (so its tool groups still fit them)."""
    changed = (change(message) for message in snapshot.messages)
    return build_runtime_history_snapshot(
        runtime_id=snapshot.runtime_id,
        session_id=snapshot.session_id,
        revision=snapshot.revision,
        project_root=snapshot.project_root,
        messages=tuple(message for message in changed if message is not None),
    )


def _kind(block: Any) -> str:
    return str(block.__struct_config__.tag)


def _losing(change: Any) -> type[MemoryAdapter]:
    class Loses(MemoryAdapter):
        def _build_snapshot(self) -> Any:
            return _replace_messages(super()._build_snapshot(), change)

    return Loses


def _without_blocks(kind: str) -> Any:
    def change(message: Any) -> Any:
        kept = tuple(block for block in message.blocks if _kind(block) != kind)
        return msgspec.structs.replace(message, blocks=kept) if kept else None

    return change


def _second_parallel_call_dropped(message: Any) -> Any:
    if message.source_entry_id == "entry-parallel-call":
        return msgspec.structs.replace(message, blocks=message.blocks[:1])
    return None if message.source_entry_id == "entry-parallel-result-b" else message


def _flag_cleared(name: str) -> Any:
    def change(message: Any) -> Any:
        if getattr(message.flags, name):
            return msgspec.structs.replace(
                message, flags=msgspec.structs.replace(message.flags, **{name: None})
            )
        return message

    return change


def _system_as_user(message: Any) -> Any:
    return msgspec.structs.replace(message, role="user") if message.role == "system" else message


def _provenance_of_another_entry(message: Any) -> Any:
    if message.source_entry_id != "entry-answer":
        return message
    moved = msgspec.structs.replace(message.provenance, entry_id="entry-elsewhere")
    return msgspec.structs.replace(message, source_entry_id="entry-elsewhere", provenance=moved)


def _provenance_of_another_runtime(message: Any) -> Any:
    moved = msgspec.structs.replace(message.provenance, runtime_id="another-runtime")
    return msgspec.structs.replace(message, provenance=moved)


LOSSES = [
    ("image", _without_blocks("image"), "history-image-lost"),
    ("thinking", _without_blocks("thinking"), "history-thinking-lost"),
    ("parallel", _second_parallel_call_dropped, "history-parallel-tool-calls-lost"),
    ("system-as-user", _system_as_user, "history-system-lost"),
    ("pinned", _flag_cleared("pinned"), "history-pinned-flag-lost"),
    ("local-only", _flag_cleared("local_only"), "history-local-only-flag-lost"),
    ("entry-id", _provenance_of_another_entry, "history-provenance-mismatch"),
    # the snapshot validator itself refuses provenance naming another runtime
    ("runtime-id", _provenance_of_another_runtime, "history-invalid"),
]


@pytest.mark.parametrize(("name", "change", "detail"), LOSSES, ids=[loss[0] for loss in LOSSES])
def test_an_adapter_that_loses_a_part_of_the_fixture_fails_naming_it(
    name: str, change: Any, detail: str
) -> None:
    report = run_runtime_adapter_conformance_sync(_factory(_losing(change), name))
    failed = report.failed_cases()
    assert [(case.id, case.failure_code, case.detail) for case in failed] == [
        ("canonical-history", "canonical-history-assertion-failed", detail)
    ]
    assert report.skipped_parts == ()
    _probe_free(report)


def test_the_system_message_dropped_whole_fails_too() -> None:
    drops = _losing(lambda message: None if message.role == "system" else message)
    report = run_runtime_adapter_conformance_sync(_factory(drops, "drops-system"))
    assert [case.detail for case in report.failed_cases()] == ["history-system-lost"]


def _declaring(parts: Any, adapter_class: type[MemoryAdapter] = MemoryAdapter) -> Any:
    factory = _factory(adapter_class, "declares")
    return SimpleConformanceFactory(name="declares", create=factory.create, unsupported_history_parts=parts)


def test_a_declared_unsupported_part_is_left_out_of_the_fixture_and_reported_skipped() -> None:
    seen: list[ConformanceFixture] = []
    inner = _factory()

    def create(fixture: ConformanceFixture, transport: ConformanceTransport) -> Any:
        seen.append(fixture)
        return inner.create(fixture, transport)

    factory = SimpleConformanceFactory(
        name="no-images", create=create, unsupported_history_parts=frozenset({"image", "system"})
    )
    report = run_runtime_adapter_conformance_sync(factory)
    assert report.passed
    assert report.skipped_parts == ("system", "image")  # in CONFORMANCE_HISTORY_PARTS order
    assert len(seen) == 7
    full = load_conformance_fixture()
    for fixture in seen:
        assert full.parts["image"][0] not in fixture.message_ids
        assert full.parts["system"][0] not in fixture.message_ids
        assert len(fixture.messages) == len(full.messages) - 2
        assert set(fixture.parts) == set(CONFORMANCE_HISTORY_PARTS) - {"image", "system"}
    _probe_free(report)
    assert "skippedParts" in msgspec.json.encode(report).decode()


def test_a_declared_skip_covers_only_its_own_part() -> None:
    # an adapter that cannot carry images but also loses thinking blocks still fails on thinking
    report = run_runtime_adapter_conformance_sync(
        _declaring(frozenset({"image"}), _losing(_without_blocks("thinking")))
    )
    assert [case.detail for case in report.failed_cases()] == ["history-thinking-lost"]
    assert report.skipped_parts == ("image",)


@pytest.mark.parametrize("parts", [frozenset({"videos", "everything"}), 42, ("image", 7)])
def test_unknown_or_malformed_declarations_skip_nothing_unknown(parts: Any) -> None:
    report = run_runtime_adapter_conformance_sync(_declaring(parts, _losing(_without_blocks("thinking"))))
    assert [case.detail for case in report.failed_cases()] == ["history-thinking-lost"]
    assert set(report.skipped_parts) <= {"image"}


# --- the console command ------------------------------------------------------------------------------------


def conformance_factory() -> SimpleConformanceFactory:
    """Target for the command-line tests: ``test_conformance_kit:conformance_factory``."""
    return _factory(name="cli-memory")


broken_factory = _factory(ReadsAfterShutdown, "cli-broken")
no_system_factory = SimpleConformanceFactory(
    name="cli-no-system", create=_factory().create, unsupported_history_parts=frozenset({"system"})
)


@pytest.fixture
def importable_tests(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    return "test_conformance_kit"


def test_cli_passes_and_prints_json(importable_tests: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"{importable_tests}:conformance_factory", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is True
    assert report["factoryName"] == "cli-memory"
    assert [case["id"] for case in report["cases"]] == list(CONFORMANCE_CASE_IDS)


def test_cli_exit_code_one_on_failure_and_text_table(
    importable_tests: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([f"{importable_tests}:broken_factory", "--backend", "trio"]) == 1
    out = capsys.readouterr().out
    assert "lifecycle" in out
    assert "lifecycle-assertion-failed (closed-history-readable)" in out
    assert "FAILED (6/7 cases)" in out


def test_cli_names_the_skipped_parts_above_the_cases(
    importable_tests: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([f"{importable_tests}:no_system_factory"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "fixture=runtime-adapter-conformance-fixture-v2" in lines[0]
    assert lines[1] == "  skipped (the factory says its runtime cannot carry them): system"
    assert lines[-1] == "result: passed (7/7 cases)"
    assert main([f"{importable_tests}:no_system_factory", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skippedParts"] == ["system"]


@pytest.mark.parametrize(
    "target",
    [
        "no-colon",
        "definitely_missing_module_xyz:factory",
        "test_conformance_kit:missing",
        "test_conformance_kit:BROKEN",
    ],
)
def test_cli_rejects_bad_targets_with_exit_code_two(
    importable_tests: str, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([target]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error [conformance-target-")
    assert len(err.splitlines()) == 1, err


# A target module in a user's project directory: it loads, and its factory fails every case on purpose.
_CWD_TARGET = """\
from ds4_context_core.conformance import SimpleConformanceFactory


def _create(fixture, transport):
    raise RuntimeError("not built yet")


factory = SimpleConformanceFactory(name="cwd-target", create=_create)
"""


def _run_kit(cwd: Path, *args: str, console: bool = False) -> subprocess.CompletedProcess[str]:
    if console:
        command = [str(Path(sys.executable).parent / "ds4-context-conformance")]
    else:
        command = [sys.executable, "-m", "ds4_context_core.conformance"]
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PYTHONSAFEPATH"}}
    return subprocess.run(
        [*command, *args], cwd=cwd, capture_output=True, text=True, check=False, env=env, timeout=120
    )


def _one_error_line(result: subprocess.CompletedProcess[str], code: str) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error [{code}]: ")
    return lines[0]


@pytest.mark.parametrize("target", ["bad:target", "bad.deeper:target", "ds4_context_core.absent_xyz:f"])
def test_python_dash_m_refuses_a_missing_module_with_exit_two(tmp_path: Path, target: str) -> None:
    line = _one_error_line(_run_kit(tmp_path, target), "conformance-target-not-found")
    assert "no such module" in line


def test_a_module_that_raises_at_import_is_a_coded_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "raising_target.py").write_text('raise RuntimeError("sk-secret-in-message")\n')
    line = _one_error_line(_run_kit(tmp_path, "raising_target:factory"), "conformance-target-import-failed")
    assert "raised RuntimeError while it was imported" in line
    assert "sk-secret-in-message" not in line, "the target's own message may hold anything"


@pytest.mark.parametrize("console", [False, True], ids=["python-m", "console-command"])
def test_a_factory_function_that_raises_is_a_coded_error_not_a_traceback(
    tmp_path: Path, console: bool
) -> None:
    (tmp_path / "calling_target.py").write_text(
        'def factory():\n    raise RuntimeError("sk-secret-in-message")\n'
    )
    result = _run_kit(tmp_path, "calling_target:factory", console=console)
    line = _one_error_line(result, "conformance-target-raised")
    assert "calling the target raised RuntimeError" in line
    assert "sk-secret-in-message" not in line


def test_a_missing_dependency_of_the_module_is_named(tmp_path: Path) -> None:
    (tmp_path / "needy_target.py").write_text("import ds4_uninstalled_runtime_xyz\n")
    result = _run_kit(tmp_path, "needy_target:factory")
    line = _one_error_line(result, "conformance-target-dependency-missing")
    assert "'needy_target' imports 'ds4_uninstalled_runtime_xyz', which is not installed" in line


@pytest.mark.parametrize("console", [False, True], ids=["python-m", "console-command"])
def test_a_module_in_the_current_directory_is_found(tmp_path: Path, console: bool) -> None:
    (tmp_path / "cwd_target.py").write_text(_CWD_TARGET)
    result = _run_kit(tmp_path, "cwd_target:factory", console=console)
    assert result.returncode == 1, result.stdout + result.stderr  # loaded and run: its cases fail
    assert "factory=cwd-target" in result.stdout
    assert "identity-threw (adapter-create-failed)" in result.stdout


def test_the_trio_backend_without_trio_is_one_coded_line(tmp_path: Path) -> None:
    (tmp_path / "cwd_target.py").write_text(_CWD_TARGET)
    code = (
        "import sys; sys.modules['trio'] = None\n"
        "from ds4_context_core.conformance import main\n"
        "raise SystemExit(main(['cwd_target:factory', '--backend', 'trio']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
    )
    line = _one_error_line(result, "conformance-backend-unavailable")
    assert "pip install trio" in line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "the following arguments are required: target"),
        (("cwd_target:factory", "--timeout", "soon"), "must be a number of seconds, got 'soon'"),
        (("cwd_target:factory", "--timeout", "0"), "must be a positive, finite number of seconds"),
        (("cwd_target:factory", "--timeout", "-5"), "must be a positive, finite number of seconds"),
        (("cwd_target:factory", "--timeout", "nan"), "must be a positive, finite number of seconds"),
        (("cwd_target:factory", "--backend", "curio"), "invalid choice: 'curio'"),
        (("cwd_target:factory", "--jsn"), "unrecognized arguments: --jsn"),
    ],
)
def test_a_command_line_the_kit_cannot_run_is_one_coded_line_and_nothing_runs(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    (tmp_path / "cwd_target.py").write_text(_CWD_TARGET)
    line = _one_error_line(_run_kit(tmp_path, *args), "conformance-usage")
    assert said in line
    assert line.endswith("(see --help)")


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "30", True, None])
def test_a_case_timeout_that_cannot_time_a_case_is_refused_before_any_case_runs(timeout: object) -> None:
    # 0 or less let every case pass with no deadline, nan or a string failed every case as the adapter's
    created: list[object] = []

    def create(fixture: Any, transport: Any) -> Any:
        created.append(fixture)
        raise RuntimeError("never reached")

    with pytest.raises(AdapterArgumentError) as raised:
        run_runtime_adapter_conformance_sync(
            SimpleConformanceFactory(name="t", create=create),
            case_timeout=timeout,  # type: ignore[arg-type]
        )
    assert raised.value.code == "conformance-timeout-invalid"
    assert created == []


# --- the pytest helper and import hygiene -------------------------------------------------------------

test_memory_adapter_through_the_pytest_helper = make_conformance_test(_factory(name="pytest-helper"))


def test_the_pytest_helper_fails_a_broken_adapter() -> None:
    broken_test = make_conformance_test(_factory(WrongRoot), backends=("asyncio",))
    with pytest.raises(ConformanceError) as raised:
        broken_test("asyncio")
    assert "identity-assertion-failed" in str(raised.value)


def test_importing_the_kit_imports_no_test_framework() -> None:
    code = (
        "import sys, ds4_context_core.conformance, ds4_context_core.adapter; "
        "print(sorted(name for name in ('pytest', 'hypothesis', '_pytest') if name in sys.modules))"
    )
    output = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert output.strip() == "[]"
