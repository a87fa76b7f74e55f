"""The seven runtime-adapter conformance checks and their report.

Every case gets a fresh adapter from the factory, so one broken behaviour fails exactly the case that
exercises it. A report holds case ids, booleans and fixed codes only: probe values, payloads and
exception messages never enter it.

A factory whose runtime has no form for a part of the fixture (a system message, an image ...) names it
in ``unsupported_history_parts``; every case then runs on the fixture without that part's messages, and
the report lists the part in ``skipped_parts``, so a pass never hides what was not checked.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import secrets
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Literal, Protocol

import anyio
import msgspec

from ds4_context_core._adapter._capabilities import (
    CAPABILITY_REGISTRY_V1,
    RUNTIME_ADAPTER_CONTRACT_VERSION,
    CapabilityRequest,
    negotiate_runtime_capabilities,
)
from ds4_context_core._adapter._types import (
    CompletionCompleted,
    CompletionFallback,
    CompletionRequest,
    RuntimeAdapter,
)
from ds4_context_core._exceptions import AdapterArgumentError, AdapterClosedError, ConformanceError
from ds4_context_core._history._model import CanonicalMessage, RuntimeHistorySnapshot
from ds4_context_core._history._validation import validate_runtime_history_snapshot

from ._fixture import (
    CONFORMANCE_FIXTURE_VERSION,
    CONFORMANCE_HISTORY_PARTS,
    ConformanceFixture,
    ConformanceTransport,
    load_conformance_fixture,
)

__all__ = [
    "CONFORMANCE_CASE_IDS",
    "CONFORMANCE_FAILURE_CODES",
    "CONFORMANCE_FAILURE_DETAILS",
    "CONFORMANCE_REPORT_VERSION",
    "ConformanceCaseResult",
    "ConformanceFactory",
    "ConformanceReport",
    "ConformanceSubject",
    "SimpleConformanceFactory",
    "assert_runtime_adapter_conformance",
    "run_runtime_adapter_conformance",
    "run_runtime_adapter_conformance_sync",
]

CONFORMANCE_REPORT_VERSION: Final = "runtime-adapter-conformance-v2"
CONFORMANCE_CASE_IDS: Final = (
    "identity",
    "capabilities",
    "canonical-history",
    "rebuild",
    "privacy",
    "fallback",
    "lifecycle",
)
CONFORMANCE_FAILURE_CODES: Final = tuple(
    f"{case}-{kind}" for case in CONFORMANCE_CASE_IDS for kind in ("assertion-failed", "threw")
)
# Why a case failed, from this closed list only (never adapter-supplied text).
CONFORMANCE_FAILURE_DETAILS: Final = (
    "adapter-create-failed",
    "capability-declaration-invalid",
    "capability-declarations-incomplete",
    "capability-diagnostics-not-isolated",
    "capability-negotiation-mismatch",
    "closed-completion-not-adapter-closed",
    "closed-diagnostics-missing-adapter-closed",
    "closed-history-readable",
    "closed-transport-called",
    "contract-version-mismatch",
    "diagnostics-contain-payload",
    "diagnostics-contain-probe",
    "exception",
    "history-flags-lost",
    "history-identity-mismatch",
    "history-image-lost",
    "history-invalid",
    "history-local-only-flag-lost",
    "history-messages-mismatch",
    "history-not-deterministic",
    "history-parallel-tool-calls-lost",
    "history-pinned-flag-lost",
    "history-provenance-mismatch",
    "history-system-lost",
    "history-thinking-lost",
    "history-unavailable-after-failure",
    "identity-invalid",
    "invalid-request-not-rejected",
    "model-mismatch",
    "privacy-destination-wrong",
    "privacy-failure-not-reported",
    "privacy-overblocked",
    "privacy-probe-leaked",
    "rebuild-changed-history",
    "recovery-completion-failed",
    "result-contains-probe",
    "sanitizer-failure-not-fallback",
    "timeout",
    "tool-groups-mismatch",
    "transport-called-after-privacy-failure",
    "transport-failure-not-fallback",
    "transport-failure-not-reported",
    "transport-not-called",
    "trusted-root-mismatch",
)

_DEFAULT_CASE_TIMEOUT_SECONDS: Final = 30.0
_FACTORY_NAME_MAX_CHARS: Final = 128

CaseId = Literal[
    "identity", "capabilities", "canonical-history", "rebuild", "privacy", "fallback", "lifecycle"
]


class ConformanceCaseResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One check: its id, whether it passed, and on failure a fixed code and a fixed detail."""

    id: str
    passed: bool
    failure_code: str | None = None
    detail: str | None = None


class ConformanceReport(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``runtime-adapter-conformance-v2``: passed only with exactly the seven cases, all passing.

    ``skipped_parts`` names the parts of :data:`CONFORMANCE_HISTORY_PARTS` the factory declared it cannot
    carry: no case saw them, so the pass says nothing about them.
    """

    version: str
    contract_version: str
    factory_name: str
    passed: bool
    cases: tuple[ConformanceCaseResult, ...]
    fixture_version: str = CONFORMANCE_FIXTURE_VERSION
    skipped_parts: tuple[str, ...] = ()

    def failed_cases(self) -> tuple[ConformanceCaseResult, ...]:
        """The cases that did not pass, in case order."""
        return tuple(case for case in self.cases if not case.passed)


@dataclass(frozen=True, kw_only=True)
class ConformanceSubject:
    """What a factory returns: the adapter under test, the root it must report, optional cleanup."""

    adapter: RuntimeAdapter
    expected_project_root: str
    cleanup: Callable[[], Awaitable[None] | None] | None = None


class ConformanceFactory(Protocol):
    """Builds a fresh adapter over the fixture's history with ``transport`` as its provider boundary.

    ``create`` may be a plain function or a coroutine function. It is called once per case. A factory may
    also have ``unsupported_history_parts``: names from :data:`CONFORMANCE_HISTORY_PARTS` its runtime has
    no form for (the Protocol leaves it out, as it is optional).
    """

    @property
    def name(self) -> str:
        """A short name for reports."""
        ...

    def create(
        self, fixture: ConformanceFixture, transport: ConformanceTransport
    ) -> ConformanceSubject | Awaitable[ConformanceSubject]:
        """A new subject whose canonical history holds exactly ``fixture.messages``."""
        ...


@dataclass(frozen=True)
class SimpleConformanceFactory:
    """A factory from a name, a ``create(fixture, transport)`` callable and the parts it cannot carry."""

    name: str
    create: Callable[[ConformanceFixture, ConformanceTransport], Any]
    unsupported_history_parts: frozenset[str] = frozenset()


class _CheckFailedError(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _require(condition: bool, detail: str) -> None:
    if not condition:
        raise _CheckFailedError(detail)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class _Probes:
    """Random per run, so an adapter cannot special-case them."""

    def __init__(self) -> None:
        self.private = f"ds4-conformance-private-{secrets.token_hex(8)}"
        self.credential = f"sk-ds4conformance{secrets.token_hex(12)}"
        # Normal content that must survive: an adapter that sends nothing at all is not private, it is broken.
        self.visible = f"ds4-conformance-visible-{secrets.token_hex(8)}"

    def values(self) -> tuple[str, str]:
        return self.private, self.credential

    def found_in(self, value: Any) -> bool:
        text = _describe(value)
        return any(probe in text for probe in self.values())


def _describe(value: Any) -> str:
    """Everything an object shows about itself, for leak searches."""
    try:
        text = repr(value)
    except Exception:
        text = ""
    try:
        encoded = msgspec.json.encode(value, enc_hook=repr).decode("utf-8", "replace")
    except Exception:
        encoded = ""
    return text + "\n" + encoded


class _ExplodingContent(Mapping[str, Any]):
    """Message content whose every access raises: sanitizing it must fail closed."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("conformance: content access refused")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("conformance: content access refused")

    def __len__(self) -> int:
        raise RuntimeError("conformance: content access refused")

    def __repr__(self) -> str:
        return "<conformance exploding content>"


def _request(fixture: ConformanceFixture, payload: Mapping[str, Any]) -> CompletionRequest:
    return CompletionRequest(provider=fixture.model.provider, model=fixture.model.id, payload=payload)


def _plain_request(fixture: ConformanceFixture) -> CompletionRequest:
    return _request(
        fixture, {"messages": [{"role": "user", "content": "Is the module in src/index.ts ready?"}]}
    )


# Diagnostics are metadata only: no run of this many characters of any payload string may appear in them.
_PAYLOAD_WINDOW: Final = 16


def _payload_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _payload_strings(item)]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _payload_strings(item)]
    return []


def _holds_payload(adapter: RuntimeAdapter, payload: Any) -> bool:
    """Whether the adapter's diagnostics show any part of ``payload``: any window of any of its strings."""
    shown = _describe(tuple(adapter.diagnostics()))
    size = _PAYLOAD_WINDOW
    for text in _payload_strings(payload):
        if len(text) < size:
            continue
        if any(text[start : start + size] in shown for start in range(len(text) - size + 1)):
            return True
    return False


def _diagnostic_codes(adapter: RuntimeAdapter) -> set[str]:
    return {str(getattr(diagnostic, "code", "")) for diagnostic in adapter.diagnostics()}


def _snapshot(adapter: RuntimeAdapter) -> RuntimeHistorySnapshot:
    snapshot = adapter.snapshot_history()
    _require(isinstance(snapshot, RuntimeHistorySnapshot), "history-invalid")
    return snapshot


def _provenance_matches(got: CanonicalMessage, want: CanonicalMessage, runtime_id: str) -> bool:
    """Same session and entry; a runtime id, when the adapter sets one, is the snapshot's own.

    The ``source`` and ``original_role`` may be the runtime's own words (``pi-session``, ``toolResult``).
    """
    provenance = got.provenance
    return (
        provenance.session_id == want.provenance.session_id
        and provenance.entry_id == want.provenance.entry_id == got.source_entry_id
        and provenance.runtime_id in (None, runtime_id)
    )


def _history_mismatch(snapshot: RuntimeHistorySnapshot, fixture: ConformanceFixture) -> str | None:
    """``None`` when the snapshot holds the fixture's messages, else the fixed detail saying what was lost.

    A message of one of the fixture's parts that comes back different (or not at all) names its part
    (``history-image-lost`` ...), so an adapter author sees which part their runtime drops.
    """
    got_by_id = {message.id: message for message in snapshot.messages}
    for want in fixture.messages:
        got = got_by_id.get(want.id)
        part = fixture.part_of(want.id)
        if got is None or got.role != want.role or got.blocks != want.blocks:
            return f"history-{part}-lost" if part else "history-messages-mismatch"
        # Flags carry meaning (atomic tool pairs, pinned, local-only): an adapter may not drop them.
        if got.flags != want.flags:
            return f"history-{part}-lost" if part and part.endswith("-flag") else "history-flags-lost"
        if got.source_entry_id != want.source_entry_id or not _provenance_matches(
            got, want, snapshot.runtime_id
        ):
            return "history-provenance-mismatch"
    if tuple(message.id for message in snapshot.messages) != fixture.message_ids:
        return "history-messages-mismatch"  # invented, repeated or reordered messages
    return None


async def _check_identity(adapter: RuntimeAdapter, fixture: ConformanceFixture, root: str, _: Any) -> None:
    identity = adapter.identity
    _require(
        getattr(identity, "contract_version", None) == RUNTIME_ADAPTER_CONTRACT_VERSION,
        "contract-version-mismatch",
    )
    for value in (getattr(identity, "adapter_name", None), getattr(identity, "adapter_version", None)):
        _require(isinstance(value, str) and 0 < len(value) <= 256 and value.isprintable(), "identity-invalid")
    model = adapter.current_model()
    expected = fixture.model
    _require(
        model is not None
        and model.provider == expected.provider
        and model.id == expected.id
        and model.context_window == expected.context_window
        and model.max_tokens == expected.max_tokens,
        "model-mismatch",
    )
    trusted = adapter.trusted_project_root()
    _require(isinstance(trusted, str) and os.path.isabs(trusted) and trusted == root, "trusted-root-mismatch")


async def _check_capabilities(
    adapter: RuntimeAdapter, fixture: ConformanceFixture, root: str, _: Any
) -> None:
    declarations = tuple(adapter.capability_declarations())
    ids = [getattr(declaration, "id", None) for declaration in declarations]
    _require(sorted(map(str, ids)) == sorted(CAPABILITY_REGISTRY_V1), "capability-declarations-incomplete")
    alone = negotiate_runtime_capabilities(declarations)
    _require(
        not any(d.code == "capability-declaration-invalid" for d in alone.diagnostics),
        "capability-declaration-invalid",
    )
    requests = tuple(
        CapabilityRequest(id=capability, required=index % 2 == 0)
        for index, capability in enumerate(CAPABILITY_REGISTRY_V1)
    )
    expected = negotiate_runtime_capabilities(declarations, requests)
    negotiated = adapter.negotiate_capabilities(requests)
    _require(negotiated == expected, "capability-negotiation-mismatch")
    supported = tuple(d.id for d in declarations if d.supported)
    _require(
        set(negotiated.enabled) == set(supported)
        and all(d.capability in negotiated.disabled for d in negotiated.diagnostics),
        "capability-diagnostics-not-isolated",
    )


async def _check_canonical_history(
    adapter: RuntimeAdapter, fixture: ConformanceFixture, root: str, _: Any
) -> None:
    snapshot = _snapshot(adapter)
    issues = validate_runtime_history_snapshot(
        snapshot, expected_session_id=fixture.session_id, trusted_project_root=root
    )
    _require(not issues, "history-invalid")
    _require(
        snapshot.session_id == fixture.session_id and snapshot.project_root == root,
        "history-identity-mismatch",
    )
    mismatch = _history_mismatch(snapshot, fixture)
    _require(mismatch is None, mismatch or "")
    _require(snapshot.tool_atomic_groups == fixture.tool_atomic_groups(), "tool-groups-mismatch")
    again = _snapshot(adapter)
    _require(again == snapshot, "history-not-deterministic")


async def _check_rebuild(adapter: RuntimeAdapter, fixture: ConformanceFixture, root: str, _: Any) -> None:
    before = _snapshot(adapter)
    rebuild: Callable[[], Any] = adapter.rebuild_derived_state  # some runtimes rebuild asynchronously
    await _maybe_await(rebuild())
    after = _snapshot(adapter)
    _require(after == before, "rebuild-changed-history")


async def _check_privacy(
    adapter: RuntimeAdapter, fixture: ConformanceFixture, root: str, transport: ConformanceTransport
) -> None:
    probes = _Probes()
    payload = {
        "messages": [
            {"role": "system", "content": "You answer conformance questions."},
            {
                "role": "user",
                "content": (
                    f"Summarize the project {probes.visible}. "
                    f"[ds4:local-only]{probes.private}[/ds4:local-only] Deploy key: {probes.credential}"
                ),
            },
        ]
    }
    request = _request(fixture, payload)
    result = adapter.enforce_privacy(request)
    _require(getattr(result, "destination", None) == "remote", "privacy-destination-wrong")
    _require(not probes.found_in(result), "privacy-probe-leaked")
    _require(probes.visible in _describe(getattr(result, "payload", None)), "privacy-overblocked")

    calls = transport.calls
    completed = await adapter.complete(request)
    _require(isinstance(completed, CompletionCompleted), "transport-not-called")
    _require(transport.calls == calls + 1, "transport-not-called")
    _require(not probes.found_in(transport.received[-1]), "privacy-probe-leaked")
    _require(probes.visible in _describe(transport.received[-1]), "privacy-overblocked")
    _require(not probes.found_in(completed), "result-contains-probe")

    calls = transport.calls
    exploding = _request(fixture, {"messages": [{"role": "user", "content": _ExplodingContent()}]})
    failed = await adapter.complete(exploding)
    _require(transport.calls == calls, "transport-called-after-privacy-failure")
    _require(
        isinstance(failed, CompletionFallback)
        and failed.code == "privacy-enforcement-failed"
        and failed.retryable is False,
        "sanitizer-failure-not-fallback",
    )
    _require("privacy-enforcement-failed" in _diagnostic_codes(adapter), "privacy-failure-not-reported")
    _require(not probes.found_in(tuple(adapter.diagnostics())), "diagnostics-contain-probe")
    _require(not _holds_payload(adapter, payload), "diagnostics-contain-payload")


async def _check_fallback(
    adapter: RuntimeAdapter, fixture: ConformanceFixture, root: str, transport: ConformanceTransport
) -> None:
    before = _snapshot(adapter)
    calls = transport.calls
    invalid = CompletionRequest(provider="", model=fixture.model.id, payload={"messages": []})
    rejected = await adapter.complete(invalid)
    _require(
        isinstance(rejected, CompletionFallback)
        and rejected.code == "invalid-request"
        and rejected.retryable is False
        and transport.calls == calls,
        "invalid-request-not-rejected",
    )

    transport.fail_next()
    failed = await adapter.complete(_plain_request(fixture))
    _require(transport.calls == calls + 1, "transport-not-called")
    _require(
        isinstance(failed, CompletionFallback)
        and failed.code == "transport-failed"
        and failed.retryable is True,
        "transport-failure-not-fallback",
    )
    _require("completion-transport-failed" in _diagnostic_codes(adapter), "transport-failure-not-reported")
    _require(_snapshot(adapter) == before, "history-unavailable-after-failure")
    recovered = await adapter.complete(_plain_request(fixture))
    _require(isinstance(recovered, CompletionCompleted), "recovery-completion-failed")


async def _check_lifecycle(
    adapter: RuntimeAdapter, fixture: ConformanceFixture, root: str, transport: ConformanceTransport
) -> None:
    await adapter.shutdown()
    await adapter.shutdown()
    calls = transport.calls
    closed = await adapter.complete(_plain_request(fixture))
    _require(transport.calls == calls, "closed-transport-called")
    _require(
        isinstance(closed, CompletionFallback)
        and closed.code == "adapter-closed"
        and closed.retryable is False,
        "closed-completion-not-adapter-closed",
    )
    try:
        adapter.snapshot_history()
    except AdapterClosedError:
        pass
    else:
        raise _CheckFailedError("closed-history-readable")
    _require("adapter-closed" in _diagnostic_codes(adapter), "closed-diagnostics-missing-adapter-closed")


_Check = Callable[[RuntimeAdapter, ConformanceFixture, str, ConformanceTransport], Awaitable[None]]
_CHECKS: Final[tuple[tuple[CaseId, _Check], ...]] = (
    ("identity", _check_identity),
    ("capabilities", _check_capabilities),
    ("canonical-history", _check_canonical_history),
    ("rebuild", _check_rebuild),
    ("privacy", _check_privacy),
    ("fallback", _check_fallback),
    ("lifecycle", _check_lifecycle),
)


async def _teardown(subject: ConformanceSubject) -> None:
    # Teardown problems belong to no case; the lifecycle case tests shutdown on purpose.
    with contextlib.suppress(Exception):
        await subject.adapter.shutdown()
    if subject.cleanup is not None:
        with contextlib.suppress(Exception):
            await _maybe_await(subject.cleanup())


async def _run_case(
    case: CaseId, check: _Check, factory: ConformanceFactory, fixture: ConformanceFixture, timeout: float
) -> ConformanceCaseResult:
    transport = ConformanceTransport(dict(fixture.transport_output))
    subject: ConformanceSubject | None = None
    try:
        with anyio.fail_after(timeout):
            try:
                subject = await _maybe_await(factory.create(fixture, transport))
            except Exception:
                return ConformanceCaseResult(
                    id=case, passed=False, failure_code=f"{case}-threw", detail="adapter-create-failed"
                )
            if not isinstance(subject, ConformanceSubject):
                return ConformanceCaseResult(
                    id=case, passed=False, failure_code=f"{case}-threw", detail="adapter-create-failed"
                )
            try:
                await check(subject.adapter, fixture, subject.expected_project_root, transport)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(timeout):
                    await _teardown(subject)
    except _CheckFailedError as failure:
        return ConformanceCaseResult(
            id=case, passed=False, failure_code=f"{case}-assertion-failed", detail=failure.detail
        )
    except TimeoutError:
        return ConformanceCaseResult(id=case, passed=False, failure_code=f"{case}-threw", detail="timeout")
    except Exception:
        return ConformanceCaseResult(id=case, passed=False, failure_code=f"{case}-threw", detail="exception")
    return ConformanceCaseResult(id=case, passed=True)


def _factory_name(factory: Any) -> str:
    name = getattr(factory, "name", None)
    if not isinstance(name, str) or not name.strip():
        return "unnamed"
    cleaned = "".join(char for char in " ".join(name.split()) if char.isprintable())
    return cleaned[:_FACTORY_NAME_MAX_CHARS] or "unnamed"


def _unsupported_parts(factory: Any) -> frozenset[str]:
    """The known parts ``factory.unsupported_history_parts`` names; nothing when it has none or is odd."""
    try:
        declared = getattr(factory, "unsupported_history_parts", ())
        names = {name for name in declared if isinstance(name, str)}
    except Exception:  # a property that raises, or not iterable: the factory skips nothing
        return frozenset()
    return frozenset(names & set(CONFORMANCE_HISTORY_PARTS))


def _check_timeout(seconds: object) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < float("inf"):
        raise AdapterArgumentError(
            "conformance-timeout-invalid", "case_timeout must be a positive, finite number of seconds"
        )


async def run_runtime_adapter_conformance(
    factory: ConformanceFactory, *, case_timeout: float = _DEFAULT_CASE_TIMEOUT_SECONDS
) -> ConformanceReport:
    """Run the seven checks against fresh adapters from ``factory``; never raises for adapter faults.

    A ``case_timeout`` that is not a positive, finite number of seconds raises
    :class:`AdapterArgumentError` (``conformance-timeout-invalid``) before any case runs: 0 or less let
    every case pass without a deadline, and ``nan`` or a string failed every case as the adapter's fault.
    """
    _check_timeout(case_timeout)
    skipped = _unsupported_parts(factory)
    fixture = load_conformance_fixture().without(skipped)
    cases = [await _run_case(case, check, factory, fixture, case_timeout) for case, check in _CHECKS]
    return ConformanceReport(
        version=CONFORMANCE_REPORT_VERSION,
        contract_version=RUNTIME_ADAPTER_CONTRACT_VERSION,
        factory_name=_factory_name(factory),
        passed=len(cases) == len(CONFORMANCE_CASE_IDS) and all(case.passed for case in cases),
        cases=tuple(cases),
        fixture_version=fixture.version,
        skipped_parts=tuple(part for part in CONFORMANCE_HISTORY_PARTS if part in skipped),
    )


def run_runtime_adapter_conformance_sync(
    factory: ConformanceFactory,
    *,
    backend: Literal["asyncio", "trio"] = "asyncio",
    case_timeout: float = _DEFAULT_CASE_TIMEOUT_SECONDS,
) -> ConformanceReport:
    """:func:`run_runtime_adapter_conformance` from synchronous code, on a new event loop."""
    _check_timeout(case_timeout)  # before the loop starts: the error is raised as it is
    return anyio.run(
        partial(run_runtime_adapter_conformance, factory, case_timeout=case_timeout), backend=backend
    )


def assert_runtime_adapter_conformance(report: ConformanceReport) -> ConformanceReport:
    """Return ``report`` when it passed; raise :class:`ConformanceError` naming the failed cases otherwise."""
    expected = tuple(CONFORMANCE_CASE_IDS)
    ids = tuple(case.id for case in report.cases)
    if report.passed and ids == expected and all(case.passed for case in report.cases):
        return report
    failed = ", ".join(
        f"{case.id}: {case.failure_code} ({case.detail})" for case in report.cases if not case.passed
    )
    if ids != expected:
        failed = (failed + "; " if failed else "") + "the report does not hold exactly the seven cases"
    raise ConformanceError(
        "runtime-adapter-conformance-failed",
        f"runtime adapter {report.factory_name!r} failed conformance: {failed or 'report not passed'}",
        report=report,
    )
