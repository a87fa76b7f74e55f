"""Decoding and encoding canonical messages and snapshots, with a stable code for every bad input.

The happy path is one typed msgspec decode (JSONL via ``Decoder.decode_lines``) followed by a few
C-level passes that look for control characters in identifiers. Only when that fails do we go line by
line to locate and classify the problem, so a valid 50 MiB history pays for no diagnostics it does not
need. Error messages hold codes, JSON paths, line numbers and at most a short escaped prefix of a bad
value: never content.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import add, attrgetter, is_, lt
from typing import Any, Final, Literal, TypeAlias

import msgspec

from ds4_context_core._exceptions import HistoryRecordError

from ._model import (
    ArtifactReferenceBlock,
    CanonicalMessage,
    ImageBlock,
    OpaqueProviderBlock,
    RuntimeHistorySnapshot,
    SummaryReferenceBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ._validation import escaped_prefix, has_control_characters

__all__ = [
    "CANONICAL_BLOCK_TYPES",
    "HISTORY_DECODE_CODES",
    "HISTORY_MAX_BYTES",
    "HISTORY_MAX_MESSAGES",
    "HISTORY_MAX_NESTING_DEPTH",
    "UNKNOWN_BLOCK_POLICIES",
    "UnknownBlockPolicy",
    "check_message_identifiers",
    "check_message_nesting",
    "decode_canonical_message",
    "decode_canonical_messages_jsonl",
    "decode_runtime_history_snapshot",
    "encode_canonical_message",
    "encode_canonical_messages_jsonl",
    "encode_runtime_history_snapshot",
]

HISTORY_MAX_BYTES: Final = 64 * 1024 * 1024
HISTORY_MAX_MESSAGES: Final = 100_000
# Arrays and objects nested deeper than this in one message (the message object is level 1) are refused.
# Far below what the decoders and the stable JSON hash can recurse into (Python's recursion limit),
# so a message accepted anywhere is accepted everywhere, whatever the caller's stack depth.
HISTORY_MAX_NESTING_DEPTH: Final = 128
# The message object, its blocks array and the block object hold a tool call's arguments (level 4).
_BLOCK_VALUE_LEVEL: Final = 4

HISTORY_DECODE_CODES: Final = (
    "history-input-too-large",
    "history-too-many-messages",
    "history-record-unterminated",
    "history-json-malformed",
    "history-field-invalid",
    "history-block-type-unknown",
    "history-string-too-long",
    "history-identifier-invalid",
    "history-nesting-too-deep",
)

CANONICAL_BLOCK_TYPES: Final = (
    "text",
    "thinking",
    "toolCall",
    "toolResult",
    "image",
    "fileReference",
    "artifactReference",
    "summaryReference",
    "opaqueProvider",
)

UnknownBlockPolicy: TypeAlias = Literal["reject", "opaque"]
UNKNOWN_BLOCK_POLICIES: Final = ("reject", "opaque")

_AT_PATH = re.compile(r" - at `(?P<path>[^`]*)`$")
_QUOTED = re.compile(r"'(?P<value>[^']*)'")
_PATH_CHARS: Final = 160
_KNOWN_BLOCK_TYPES = frozenset(CANONICAL_BLOCK_TYPES)

_message_decoder = msgspec.json.Decoder(CanonicalMessage)
_snapshot_decoder = msgspec.json.Decoder(RuntimeHistorySnapshot)
_encoder = msgspec.json.Encoder()
_any_decoder = msgspec.json.Decoder()

Data: TypeAlias = bytes | bytearray | memoryview | str


def _as_bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    return bytes(data) if not isinstance(data, bytes) else data


def _where(line: int | None, path: str | None) -> str:
    parts = []
    if line is not None:
        parts.append(f"line {line}")
    if path:
        parts.append(f"at {path}")
    return (" (" + ", ".join(parts) + ")") if parts else ""


def _fail(code: str, detail: str, *, line: int | None = None, path: str | None = None) -> HistoryRecordError:
    safe_path = escaped_prefix(path, _PATH_CHARS) if path else None
    return HistoryRecordError(code, detail + _where(line, safe_path), line=line, path=safe_path)


def _check_size(data: bytes, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise HistoryRecordError(
            "history-input-too-large", f"input is {len(data)} bytes; the limit is {max_bytes} bytes"
        )


def _check_policy(unknown_blocks: str) -> None:
    if unknown_blocks not in UNKNOWN_BLOCK_POLICIES:
        raise ValueError(f"unknown_blocks must be one of {UNKNOWN_BLOCK_POLICIES}")


def _validation_failure(
    error: msgspec.ValidationError, line: int | None, prefix: str = ""
) -> HistoryRecordError:
    text = str(error)
    match = _AT_PATH.search(text)
    path = prefix + match.group("path")[1:] if match else (prefix or "$")
    path = "$" + path if not path.startswith("$") else path
    reason = text[: match.start()] if match else text
    if "length <=" in reason:
        return _fail("history-string-too-long", "a string is longer than its limit", line=line, path=path)
    if path.endswith(".type") and ".blocks[" in path and reason.startswith("Invalid value"):
        value = _QUOTED.search(reason)
        shown = escaped_prefix(value.group("value"), 24) if value else "?"
        return _fail("history-block-type-unknown", f"unknown block type '{shown}'", line=line, path=path)
    # msgspec quotes offending values in some messages; keep at most a short escaped prefix of them.
    reason = _QUOTED.sub(lambda m: "'" + escaped_prefix(m.group("value"), 16) + "'", reason)
    return _fail("history-field-invalid", reason.strip() or "invalid value", line=line, path=path)


def _opaque_blocks(message: Any) -> Any:
    """Wrap blocks of unknown type as ``opaqueProvider`` so nothing is lost; leave everything else alone."""
    if not isinstance(message, dict):
        return message
    blocks = message.get("blocks")
    if not isinstance(blocks, list):
        return message
    wrapped = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(block, dict) and "type" in block and kind not in _KNOWN_BLOCK_TYPES:
            opaque: dict[str, Any] = {"type": "opaqueProvider", "value": block}
            if isinstance(kind, str):
                opaque["originalType"] = kind
            wrapped.append(opaque)
        else:
            wrapped.append(block)
    return {**message, "blocks": wrapped}


def _too_deep(line: int | None, path: str = "$") -> HistoryRecordError:
    return _fail(
        "history-nesting-too-deep",
        f"arrays and objects nest deeper than {HISTORY_MAX_NESTING_DEPTH} levels",
        line=line,
        path=path,
    )


def nesting_exceeds(value: object, limit: int, level: int = 1) -> bool:
    """Whether lists, tuples and mappings in ``value`` (at nesting ``level``) go deeper than ``limit``.

    Iterative, so it never recurses itself; a container met again (shared or cyclic) is walked again
    only from a deeper level, so a cycle ends at the limit and shared parts cost no more than ``limit``
    walks each.
    """
    seen: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(value, level)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple)):
            children: Iterable[object] = item
        elif isinstance(item, Mapping):
            children = item.values()
        else:
            continue
        if depth > limit:
            return True
        if seen.get(id(item), 0) >= depth:
            continue
        seen[id(item)] = depth
        deeper = depth + 1
        stack.extend((child, deeper) for child in children if isinstance(child, (list, tuple, Mapping)))
    return False


_NESTED_KINDS: Final = frozenset({ToolCallBlock, OpaqueProviderBlock})
# A value at _BLOCK_VALUE_LEVEL can only nest past the limit if it holds more openers than this.
_OPENERS_ALLOWED: Final = HISTORY_MAX_NESTING_DEPTH - _BLOCK_VALUE_LEVEL + 1


def _openers(value: object) -> int:
    """An upper bound of the arrays and objects nested in ``value``: the ``[`` and ``{`` of its JSON
    (brackets inside strings count too). A value that is not JSON gets no bound and is walked."""
    try:
        encoded = _encoder.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        return _OPENERS_ALLOWED + 1
    return encoded.count(b"[") + encoded.count(b"{")


def _first_too_deep(messages: Sequence[CanonicalMessage]) -> int | None:
    """Index of the first message nested deeper than ``HISTORY_MAX_NESTING_DEPTH``, if any.

    Only tool call arguments and opaque values can be. Each is encoded (in C) and its brackets counted;
    only a value with more than ``_OPENERS_ALLOWED`` of them can be too deep, and only those are walked.
    """
    blocks = list(chain.from_iterable(map(attrgetter("blocks"), messages)))
    kinds = list(map(type, blocks))
    if not (ToolCallBlock in kinds or OpaqueProviderBlock in kinds):
        return None
    nested = list(compress(blocks, map(_NESTED_KINDS.__contains__, kinds)))
    if OpaqueProviderBlock in kinds:
        values = [block.arguments if type(block) is ToolCallBlock else block.value for block in nested]
    else:
        values = list(map(attrgetter("arguments"), nested))
    try:
        encoded = list(map(_encoder.encode, values))
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        counts = list(map(_openers, values))  # some value is no JSON: bound them one by one
    else:
        counts = list(
            map(add, map(bytes.count, encoded, repeat(b"[")), map(bytes.count, encoded, repeat(b"{")))
        )
    for position in compress(range(len(values)), map(lt, repeat(_OPENERS_ALLOWED), counts)):
        if nesting_exceeds(values[position], HISTORY_MAX_NESTING_DEPTH, _BLOCK_VALUE_LEVEL):
            block = nested[position]
            return next(
                index
                for index, message in enumerate(messages)
                if any(item is block for item in message.blocks)
            )
    return None


def check_message_nesting(messages: Sequence[CanonicalMessage], *, first_line: int | None = None) -> None:
    """Raise ``history-nesting-too-deep`` when a message of ``messages`` nests deeper than
    ``HISTORY_MAX_NESTING_DEPTH`` levels (only tool call arguments and opaque values can).

    Every decoder of this module applies it, so a writer that applies it too never writes a message
    its readers refuse. ``first_line`` is the JSONL line of ``messages[0]``, used in the error when given.
    """
    for before, part in _slices((messages,)):
        index = _first_too_deep(part)
        if index is not None:
            raise _too_deep(None if first_line is None else first_line + before + index)


def _decode_one(raw: bytes, line: int | None, unknown_blocks: str) -> CanonicalMessage:
    try:
        return _message_decoder.decode(raw)
    except msgspec.ValidationError as error:  # a subclass of DecodeError: it must come first
        failure = _validation_failure(error, line)
        if failure.code != "history-block-type-unknown" or unknown_blocks != "opaque":
            raise failure from None
    except msgspec.DecodeError:
        raise _fail("history-json-malformed", "record is not valid JSON", line=line) from None
    except RecursionError:
        raise _too_deep(line) from None
    try:
        return msgspec.convert(_opaque_blocks(_any_decoder.decode(raw)), CanonicalMessage)
    except msgspec.ValidationError as error:  # a subclass of DecodeError: it must come first
        raise _validation_failure(error, line) from None
    except msgspec.DecodeError:
        # The typed pass stopped at the unknown block before it reached the broken JSON behind it.
        raise _fail("history-json-malformed", "record is not valid JSON", line=line) from None
    except RecursionError:
        raise _too_deep(line) from None


def _of_kind(kind: type, kinds: list[type], blocks: list[Any]) -> list[Any]:
    return list(compress(blocks, map(is_, kinds, repeat(kind))))


def _identifier_fields(messages: Sequence[CanonicalMessage]) -> Iterable[tuple[str, Iterable[str]]]:
    """(JSON path, values) pairs of every identifier-typed field, gathered with C-level iteration only:
    this runs over every message of every decoded history."""
    provenances = list(map(attrgetter("provenance"), messages))
    blocks = list(chain.from_iterable(map(attrgetter("blocks"), messages)))
    kinds = list(map(type, blocks))
    calls = _of_kind(ToolCallBlock, kinds, blocks)
    results = _of_kind(ToolResultBlock, kinds, blocks)
    return (
        ("$.id", map(attrgetter("id"), messages)),
        ("$.sourceEntryId", map(attrgetter("source_entry_id"), messages)),
        ("$.provider", filter(None, map(attrgetter("provider"), messages))),
        ("$.model", filter(None, map(attrgetter("model"), messages))),
        ("$.provenance.sessionId", map(attrgetter("session_id"), provenances)),
        ("$.provenance.entryId", map(attrgetter("entry_id"), provenances)),
        ("$.provenance.runtimeId", filter(None, map(attrgetter("runtime_id"), provenances))),
        ("$.provenance.originalRole", filter(None, map(attrgetter("original_role"), provenances))),
        ("$.blocks[].id", map(attrgetter("id"), calls)),
        ("$.blocks[].name", map(attrgetter("name"), calls)),
        ("$.blocks[].toolCallId", map(attrgetter("tool_call_id"), results)),
        ("$.blocks[].toolName", map(attrgetter("tool_name"), results)),
        (
            "$.blocks[].artifactId",
            map(attrgetter("artifact_id"), _of_kind(ArtifactReferenceBlock, kinds, blocks)),
        ),
        (
            "$.blocks[].summaryId",
            map(attrgetter("summary_id"), _of_kind(SummaryReferenceBlock, kinds, blocks)),
        ),
        # Optional identifiers: unset (None) ones are filtered out like provider and model above.
        (
            "$.blocks[].mimeType",
            filter(None, map(attrgetter("mime_type"), _of_kind(ImageBlock, kinds, blocks))),
        ),
        (
            "$.blocks[].originalType",
            filter(None, map(attrgetter("original_type"), _of_kind(OpaqueProviderBlock, kinds, blocks))),
        ),
    )


def _has_control(values: Iterable[str]) -> bool:
    # One regex scan over the concatenation (unset optional fields were filtered out as falsy).
    return has_control_characters("".join(values))


def _first_bad_identifier(messages: Sequence[CanonicalMessage]) -> tuple[int, str] | None:
    """Index and field path of the first identifier holding a control character, if any."""
    if not _has_control(chain.from_iterable(values for _path, values in _identifier_fields(messages))):
        return None
    # Slow path, taken only for a bad history: find the message and the field.
    for index, message in enumerate(messages):
        for path, values in _identifier_fields((message,)):
            if _has_control(values):
                return index, path
    return None  # pragma: no cover - the fast scan and the slow scan look at the same fields


def _identifier_failure(line: int | None, path: str) -> HistoryRecordError:
    return _fail(
        "history-identifier-invalid", "an identifier contains control characters", line=line, path=path
    )


def check_message_identifiers(messages: Sequence[CanonicalMessage], *, first_line: int | None = None) -> None:
    """Raise ``history-identifier-invalid`` when an identifier of ``messages`` holds a control character.

    Decoding already enforces lengths through the model's types; this is the check msgspec cannot make
    cheaply. ``first_line`` is the JSONL line of ``messages[0]``, used in the error when given.
    """
    for before, part in _slices((messages,)):
        found = _first_bad_identifier(part)
        if found is not None:
            index, path = found
            raise _identifier_failure(None if first_line is None else first_line + before + index, path)


def _decode_lines_one_by_one(data: bytes, unknown_blocks: str, first_line: int = 1) -> list[CanonicalMessage]:
    return [
        _decode_one(raw, number, unknown_blocks)
        for number, raw in enumerate(data.split(b"\n"), start=first_line)
        if raw.strip()
    ]


def decode_canonical_message(
    data: Data, *, unknown_blocks: UnknownBlockPolicy = "reject"
) -> CanonicalMessage:
    """Decode one canonical message from JSON. Blocks of unknown type are rejected, or wrapped as
    ``opaqueProvider`` (``originalType`` + the whole block as ``value``) with ``unknown_blocks="opaque"``.
    """
    _check_policy(unknown_blocks)
    raw = _as_bytes(data)
    _check_size(raw, HISTORY_MAX_BYTES)
    message = _decode_one(raw, None, unknown_blocks)
    check_message_identifiers((message,))
    check_message_nesting((message,))
    return message


def decode_canonical_messages_jsonl(
    data: Data,
    *,
    max_bytes: int = HISTORY_MAX_BYTES,
    max_messages: int = HISTORY_MAX_MESSAGES,
    unknown_blocks: UnknownBlockPolicy = "reject",
) -> tuple[CanonicalMessage, ...]:
    """Decode JSONL, one canonical message per line. Blank lines are skipped; the last record must end
    with a newline (an unterminated record is what a torn write looks like, so it is rejected).
    """
    _check_policy(unknown_blocks)
    raw = _as_bytes(data)
    _check_size(raw, max_bytes)
    tail = raw[raw.rfind(b"\n") + 1 :]
    if tail.strip():
        line = raw.count(b"\n") + 1
        raise _fail("history-record-unterminated", "the last record does not end with a newline", line=line)
    # Decoded a chunk of lines and checked a slice of messages at a time, so what the checks gather
    # (lists of fields, the JSON of tool arguments) is bounded by a slice, not by the history. Errors
    # come out in the order a whole-input pass gives them: the first bad line, then too many messages,
    # then identifiers, then nesting.
    parts = [_decode_chunk(raw, start, end, unknown_blocks) for start, end in _chunks(raw)]
    count = sum(map(len, parts))
    if count > max_messages:
        raise _fail("history-too-many-messages", f"more than {max_messages} messages")
    for before, messages in _slices(parts):
        found = _first_bad_identifier(messages)
        if found is not None:
            index, path = found
            raise _identifier_failure(_line_of(raw, before + index), path)
    for before, messages in _slices(parts):
        deep = _first_too_deep(messages)
        if deep is not None:
            raise _too_deep(_line_of(raw, before + deep))
    if len(parts) == 1:
        return tuple(parts[0])
    return tuple(chain.from_iterable(parts))


# Lines are decoded about this many bytes at a time (a chunk ends at the first newline past it), and
# checked this many messages at a time: what a check gathers is bounded by that, not by the history.
_CHUNK_BYTES: Final = 1 << 20
_CHECK_MESSAGES: Final = 1024


def _slices(parts: Iterable[Sequence[CanonicalMessage]]) -> Iterable[tuple[int, Sequence[CanonicalMessage]]]:
    """(index of the first, messages) for runs of at most ``_CHECK_MESSAGES`` messages of ``parts``."""
    before = 0
    for part in parts:
        for offset in range(0, len(part), _CHECK_MESSAGES):
            yield before + offset, part[offset : offset + _CHECK_MESSAGES]
        before += len(part)


def _chunks(raw: bytes) -> Iterable[tuple[int, int]]:
    """(start, end) byte ranges of whole lines (newline included) covering ``raw``, which ends with a
    newline or whitespace; each about ``_CHUNK_BYTES`` long."""
    start, size = 0, len(raw)
    while start < size:
        newline = raw.find(b"\n", min(start + _CHUNK_BYTES, size) - 1)
        end = size if newline < 0 else newline + 1
        yield start, end
        start = end


def _decode_chunk(raw: bytes, start: int, end: int, unknown_blocks: str) -> list[CanonicalMessage]:
    chunk = memoryview(raw)[start:end]
    try:
        messages: list[CanonicalMessage] = _message_decoder.decode_lines(chunk)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        first_line = raw.count(b"\n", 0, start) + 1
        messages = _decode_lines_one_by_one(bytes(chunk), unknown_blocks, first_line)
    return messages


def _line_of(raw: bytes, index: int) -> int:
    """The 1-based line of the ``index``-th non-blank line of ``raw`` (on the error path only)."""
    numbers = [number for number, line in enumerate(raw.split(b"\n"), start=1) if line.strip()]
    return numbers[index]


def decode_runtime_history_snapshot(
    data: Data,
    *,
    max_bytes: int = HISTORY_MAX_BYTES,
    max_messages: int = HISTORY_MAX_MESSAGES,
    unknown_blocks: UnknownBlockPolicy = "reject",
) -> RuntimeHistorySnapshot:
    """Decode a ``runtime-history-v1`` snapshot document. Decoding does not validate invariants: call
    ``validate_runtime_history_snapshot`` (groups, provenance, identity) on the result.
    """
    _check_policy(unknown_blocks)
    raw = _as_bytes(data)
    _check_size(raw, max_bytes)
    try:
        snapshot: RuntimeHistorySnapshot = _snapshot_decoder.decode(raw)
    except msgspec.ValidationError as error:  # a subclass of DecodeError: it must come first
        failure = _validation_failure(error, None)
        if failure.code != "history-block-type-unknown" or unknown_blocks != "opaque":
            raise failure from None
        try:
            document = _any_decoder.decode(raw)
        except msgspec.DecodeError:
            # The typed pass stopped at the unknown block before it reached the broken JSON behind it.
            raise _fail("history-json-malformed", "snapshot is not valid JSON") from None
        except RecursionError:
            raise _too_deep(None) from None
        if isinstance(document, dict) and isinstance(document.get("messages"), list):
            document = {**document, "messages": [_opaque_blocks(m) for m in document["messages"]]}
        try:
            snapshot = msgspec.convert(document, RuntimeHistorySnapshot)
        except msgspec.ValidationError as again:
            raise _validation_failure(again, None) from None
        except RecursionError:
            raise _too_deep(None) from None
    except msgspec.DecodeError:
        raise _fail("history-json-malformed", "snapshot is not valid JSON") from None
    except RecursionError:
        raise _too_deep(None) from None
    if len(snapshot.messages) > max_messages:
        raise _fail("history-too-many-messages", f"more than {max_messages} messages")
    identity = (snapshot.schema_version, snapshot.runtime_id, snapshot.session_id, snapshot.revision)
    groups = snapshot.tool_atomic_groups
    group_ids = chain(
        map(attrgetter("id"), groups),
        chain.from_iterable(map(attrgetter("message_ids"), groups)),
        chain.from_iterable(map(attrgetter("tool_call_ids"), groups)),
    )
    if _has_control(identity) or _has_control((snapshot.project_root,)):
        raise _fail(
            "history-identifier-invalid", "a snapshot identifier contains control characters", path="$"
        )
    if _has_control(group_ids):
        raise _fail(
            "history-identifier-invalid",
            "a tool atomic group identifier contains control characters",
            path="$.toolAtomicGroups",
        )
    found = _first_bad_identifier(snapshot.messages)
    if found is not None:
        index, path = found
        raise _identifier_failure(None, f"$.messages[{index}]{path[1:]}")
    deep = _first_too_deep(snapshot.messages)
    if deep is not None:
        raise _too_deep(None, f"$.messages[{deep}]")
    return snapshot


def encode_canonical_message(message: CanonicalMessage) -> bytes:
    """Canonical JSON of one message: camelCase names, unset optional fields omitted, deterministic."""
    return _encoder.encode(message)


def encode_canonical_messages_jsonl(messages: Iterable[CanonicalMessage]) -> bytes:
    """JSONL: one message per line, every line (the last too) terminated by a newline."""
    buffer = bytearray()
    for message in messages:
        _encoder.encode_into(message, buffer, -1)
        buffer.extend(b"\n")
    return bytes(buffer)


def encode_runtime_history_snapshot(snapshot: RuntimeHistorySnapshot) -> bytes:
    """Canonical JSON of a snapshot; decoding it gives an equal snapshot."""
    return _encoder.encode(snapshot)
