"""The tool lifecycle sink: durable, idempotent persistence of tool invocations and their results.

Each tool call has two phases, an ``invocation`` and exactly one ``result``. Writing the same phase twice
with identical content returns the first record (a retry after a crash or timeout is safe); writing it
with different content raises, because history is append-only and must never be overwritten.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import stat
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

import anyio
import anyio.to_thread
import msgspec

from ds4_context_core import Ds4ContextError, sha256_hex, stable_hash
from ds4_context_engine.pi import append_pi_custom_entry, pi_custom_entries, read_pi_session

from ._errors import ToolLifecycleError

__all__ = [
    "TOOL_LIFECYCLE_CUSTOM_TYPE",
    "TOOL_LIFECYCLE_ERROR_CODES",
    "TOOL_LIFECYCLE_PERSISTENCE",
    "TOOL_LIFECYCLE_RECORD_VERSION",
    "TOOL_LIFECYCLE_STATES",
    "JsonlToolLifecycleStore",
    "PiSessionToolLifecycleStore",
    "StoredToolLifecycleRecord",
    "ToolInvocationEvent",
    "ToolLifecycleEvent",
    "ToolLifecyclePersistence",
    "ToolLifecycleRecord",
    "ToolLifecycleSink",
    "ToolLifecycleStore",
    "ToolResultEvent",
]

TOOL_LIFECYCLE_RECORD_VERSION: Final = "ds4-tool-lifecycle-v1"
TOOL_LIFECYCLE_CUSTOM_TYPE: Final = "ds4-tool-lifecycle"
TOOL_LIFECYCLE_STATES: Final = (
    "cancelled",
    "error",
    "exit_nonzero",
    "interrupted",
    "rejected",
    "signal",
    "success",
    "timeout",
)
TOOL_LIFECYCLE_PERSISTENCE: Final = ("deferred", "failed", "persisted")
TOOL_LIFECYCLE_ERROR_CODES: Final = (
    "tool-lifecycle-conflict",
    "tool-lifecycle-invalid-event",
    "tool-lifecycle-result-before-invocation",
    "tool-lifecycle-store-corrupt",
    "tool-lifecycle-store-unsafe",
)

ToolLifecycleState: TypeAlias = Literal[
    "cancelled", "error", "exit_nonzero", "interrupted", "rejected", "signal", "success", "timeout"
]
ToolLifecyclePersistence: TypeAlias = Literal["deferred", "failed", "persisted"]

_MAX_ID_CHARS: Final = 256
_MAX_NAME_CHARS: Final = 128
_MAX_CODE_CHARS: Final = 64
_MAX_ARTIFACTS: Final = 64
_TRUNCATION_MARKER: Final = "\n[ds4: tool output truncated]"


class ToolInvocationEvent(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag="invocation"):
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any] | None = None


class ToolResultEvent(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag="result"):
    tool_call_id: str
    state: ToolLifecycleState
    tool_name: str | None = None
    content: str | None = None
    failure_kind: str | None = None
    detail_code: str | None = None
    execution_ms: float | None = None
    artifacts: tuple[str, ...] = ()


ToolLifecycleEvent: TypeAlias = ToolInvocationEvent | ToolResultEvent


class ToolLifecycleRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """What the sink tells the runtime: ids, persistence and sizes only, never content or host paths."""

    persistence: ToolLifecyclePersistence
    record_id: str | None = None
    sequence: int | None = None
    truncated: bool | None = None
    original_bytes: int | None = None
    retained_bytes: int | None = None
    artifact_references: tuple[str, ...] = ()


class StoredToolLifecycleRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One persisted phase as a store keeps it. ``fingerprint`` identifies the event as received."""

    version: str
    phase: Literal["invocation", "result"]
    tool_call_id: str
    fingerprint: str
    sequence: int
    event: dict[str, Any]
    record: ToolLifecycleRecord


@runtime_checkable
class ToolLifecycleStore(Protocol):
    """Where records go. Both calls are synchronous and run in a worker thread."""

    def read_records(self) -> list[StoredToolLifecycleRecord]:
        """Every record persisted so far, in order, each with its record id filled in."""
        ...

    def append_record(self, record: StoredToolLifecycleRecord) -> str:
        """Persist one record durably and return its record id."""
        ...


def _check_text(value: object, field: str, limit: int, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ToolLifecycleError(
            "tool-lifecycle-invalid-event", f"{field} must be 1-{limit} characters of text"
        )
    if value.strip() != value or any(unicodedata.category(char)[0] == "C" for char in value):
        raise ToolLifecycleError(
            "tool-lifecycle-invalid-event",
            f"{field} may not contain control characters or surrounding spaces",
        )


def _validate(event: object) -> ToolLifecycleEvent:
    if isinstance(event, ToolInvocationEvent):
        _check_text(event.tool_call_id, "toolCallId", _MAX_ID_CHARS)
        _check_text(event.tool_name, "toolName", _MAX_NAME_CHARS)
        if event.arguments is not None and not isinstance(event.arguments, dict):
            raise ToolLifecycleError("tool-lifecycle-invalid-event", "arguments must be an object")
        return event
    if isinstance(event, ToolResultEvent):
        _check_text(event.tool_call_id, "toolCallId", _MAX_ID_CHARS)
        _check_text(event.tool_name, "toolName", _MAX_NAME_CHARS, optional=True)
        if event.state not in TOOL_LIFECYCLE_STATES:
            raise ToolLifecycleError(
                "tool-lifecycle-invalid-event", f"state must be one of {TOOL_LIFECYCLE_STATES}"
            )
        _check_text(event.failure_kind, "failureKind", _MAX_CODE_CHARS, optional=True)
        _check_text(event.detail_code, "detailCode", _MAX_CODE_CHARS, optional=True)
        if event.content is not None and not isinstance(event.content, str):
            raise ToolLifecycleError("tool-lifecycle-invalid-event", "content must be text")
        if event.execution_ms is not None and (
            isinstance(event.execution_ms, bool)
            or not isinstance(event.execution_ms, int | float)
            or not math.isfinite(event.execution_ms)
            or event.execution_ms < 0
        ):
            raise ToolLifecycleError(
                "tool-lifecycle-invalid-event", "executionMs must be a finite number >= 0"
            )
        if len(event.artifacts) > _MAX_ARTIFACTS:
            raise ToolLifecycleError("tool-lifecycle-invalid-event", f"at most {_MAX_ARTIFACTS} artifacts")
        for artifact in event.artifacts:
            _check_text(artifact, "artifacts entries", 4096)
        return event
    raise ToolLifecycleError(
        "tool-lifecycle-invalid-event", "expected a ToolInvocationEvent or ToolResultEvent"
    )


def _bounded(content: str, max_bytes: int) -> tuple[str, int, int, bool]:
    encoded = content.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes:
        return content, len(encoded), len(encoded), False
    marker = _TRUNCATION_MARKER.encode()
    head = encoded[: max(0, max_bytes - len(marker))].decode("utf-8", "ignore")
    kept = head + _TRUNCATION_MARKER
    return kept, len(encoded), len(kept.encode("utf-8", "surrogatepass")), True


def _artifact_reference(path: str) -> str:
    return "artifact-" + sha256_hex(path)[:24]


class ToolLifecycleSink:
    """Idempotent lifecycle persistence over a :class:`ToolLifecycleStore`.

    ``max_content_bytes`` bounds the stored result content (the head is kept, with a marker). The sink
    serializes its own writes; one store must be written by one sink at a time.
    """

    def __init__(self, store: ToolLifecycleStore, *, max_content_bytes: int = 64 * 1024) -> None:
        if max_content_bytes < 256:
            raise ToolLifecycleError("tool-lifecycle-invalid-event", "max_content_bytes must be >= 256")
        self._store = store
        self._max_content_bytes = max_content_bytes
        self._lock = anyio.Lock()
        self._index: dict[tuple[str, str], StoredToolLifecycleRecord] | None = None
        self._tool_names: dict[str, str] = {}

    async def _load(self) -> dict[tuple[str, str], StoredToolLifecycleRecord]:
        if self._index is None:
            records = await anyio.to_thread.run_sync(self._store.read_records)
            index: dict[tuple[str, str], StoredToolLifecycleRecord] = {}
            for stored in records:
                index.setdefault((stored.tool_call_id, stored.phase), stored)
                if stored.phase == "invocation":
                    self._tool_names.setdefault(stored.tool_call_id, str(stored.event.get("toolName", "")))
            self._index = index
        return self._index

    async def record(self, event: ToolLifecycleEvent) -> ToolLifecycleRecord:
        """Persist one phase; identical retries return the first record, conflicting ones raise."""
        checked = _validate(event)
        phase: Literal["invocation", "result"] = (
            "invocation" if isinstance(checked, ToolInvocationEvent) else "result"
        )
        try:
            wire = msgspec.to_builtins(checked)
            fingerprint = stable_hash(wire)
        except (TypeError, Ds4ContextError) as error:
            raise ToolLifecycleError(
                "tool-lifecycle-invalid-event", "arguments are not JSON values"
            ) from error
        async with self._lock:
            index = await self._load()
            existing = index.get((checked.tool_call_id, phase))
            if existing is not None:
                if existing.fingerprint != fingerprint:
                    raise ToolLifecycleError(
                        "tool-lifecycle-conflict",
                        f"another {phase} is is already recorded for this call; history is never overwritten",
                    )
                return existing.record
            if isinstance(checked, ToolResultEvent):
                invoked_as = self._tool_names.get(checked.tool_call_id)
                if invoked_as is None:
                    raise ToolLifecycleError(
                        "tool-lifecycle-result-before-invocation",
                        "a result arrived for an unrecorded tool call",
                    )
                if checked.tool_name is not None and checked.tool_name != invoked_as:
                    raise ToolLifecycleError(
                        "tool-lifecycle-conflict", "the result names a different tool than the invocation"
                    )
            stored, record = self._prepare(checked, phase, wire, fingerprint, len(index) + 1)
            try:
                record_id = await anyio.to_thread.run_sync(self._store.append_record, stored)
            except (OSError, Ds4ContextError):
                # Not indexed: the runtime may retry the same event and it will be written then.
                return ToolLifecycleRecord(persistence="failed")
            record = msgspec.structs.replace(record, record_id=record_id)
            stored = msgspec.structs.replace(stored, record=record)
            index[(checked.tool_call_id, phase)] = stored
            if isinstance(checked, ToolInvocationEvent):
                self._tool_names[checked.tool_call_id] = checked.tool_name
            return record

    def _prepare(
        self,
        event: ToolLifecycleEvent,
        phase: Literal["invocation", "result"],
        wire: dict[str, Any],
        fingerprint: str,
        sequence: int,
    ) -> tuple[StoredToolLifecycleRecord, ToolLifecycleRecord]:
        record = ToolLifecycleRecord(persistence="persisted", sequence=sequence)
        stored_event = dict(wire)
        if isinstance(event, ToolResultEvent):
            references = tuple(_artifact_reference(path) for path in event.artifacts)
            record = msgspec.structs.replace(record, artifact_references=references)
            if event.content is not None:
                kept, original, retained, truncated = _bounded(event.content, self._max_content_bytes)
                stored_event["content"] = kept
                record = msgspec.structs.replace(
                    record, truncated=truncated, original_bytes=original, retained_bytes=retained
                )
        stored = StoredToolLifecycleRecord(
            version=TOOL_LIFECYCLE_RECORD_VERSION,
            phase=phase,
            tool_call_id=event.tool_call_id,
            fingerprint=fingerprint,
            sequence=sequence,
            event=stored_event,
            record=record,
        )
        return stored, record


def _with_record_id(stored: StoredToolLifecycleRecord, record_id: str) -> StoredToolLifecycleRecord:
    return msgspec.structs.replace(stored, record=msgspec.structs.replace(stored.record, record_id=record_id))


def _decode_records(values: Iterable[Any]) -> list[StoredToolLifecycleRecord]:
    records: list[StoredToolLifecycleRecord] = []
    for value in values:
        try:
            records.append(msgspec.convert(value, StoredToolLifecycleRecord))
        except msgspec.ValidationError as error:
            raise ToolLifecycleError(
                "tool-lifecycle-store-corrupt", "a stored lifecycle record does not match the record format"
            ) from error
    return records


def _open_store_file(path: Path, flags: int) -> int:
    """A descriptor of ``path``, never through a symlink and only for a regular file.

    ``O_NONBLOCK`` keeps a FIFO planted at the path from blocking the open; it changes nothing for a
    regular file.
    """
    extra = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags | extra, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ToolLifecycleError(
                "tool-lifecycle-store-unsafe", "the lifecycle store path is a symlink"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ToolLifecycleError(
            "tool-lifecycle-store-unsafe", "the lifecycle store path is not a regular file"
        )
    return descriptor


class JsonlToolLifecycleStore:
    """One JSON object per line in a file of its own (0600, appended under ``flock`` with fsync).

    The path must name a regular file (or nothing yet): a symlink or anything else is refused with
    ``tool-lifecycle-store-unsafe``. Lines are split on a newline alone, so text holding other line
    separators (U+2028, U+0085) stays inside its record.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read_records(self) -> list[StoredToolLifecycleRecord]:
        try:
            descriptor = _open_store_file(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        with os.fdopen(descriptor, "rb") as handle:
            data = handle.read()
        values: list[Any] = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except ValueError:
                # A torn line is a write that never completed, so it was never acknowledged.
                continue
        return [
            _with_record_id(record, f"{record.tool_call_id}:{record.phase}")
            for record in _decode_records(values)
        ]

    def append_record(self, record: StoredToolLifecycleRecord) -> str:
        record_id = f"{record.tool_call_id}:{record.phase}"
        line = msgspec.json.encode(record) + b"\n"
        descriptor = _open_store_file(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # one appender at a time: the newline check below
            os.fchmod(descriptor, 0o600)
            size = os.fstat(descriptor).st_size
            if size and os.pread(descriptor, 1, size - 1) != b"\n":
                line = b"\n" + line
            written = 0
            while written < len(line):
                written += os.write(descriptor, line[written:])
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        return record_id


class PiSessionToolLifecycleStore:
    """Records as ``custom`` entries (``customType: ds4-tool-lifecycle``) in a Pi session file.

    Custom entries are extension state: Pi does not send them to the model, so the lifecycle trail lives
    next to the conversation without changing it. Record ids are the Pi entry ids.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read_records(self) -> list[StoredToolLifecycleRecord]:
        customs = pi_custom_entries(read_pi_session(self.path), TOOL_LIFECYCLE_CUSTOM_TYPE)
        records = _decode_records(custom.value for custom in customs)
        return [
            _with_record_id(record, custom.entry.id) for record, custom in zip(records, customs, strict=True)
        ]

    def append_record(self, record: StoredToolLifecycleRecord) -> str:
        entry = append_pi_custom_entry(self.path, TOOL_LIFECYCLE_CUSTOM_TYPE, msgspec.to_builtins(record))
        return entry.id
