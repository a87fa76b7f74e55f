"""Snapshot validation: every broken invariant of a ``runtime-history-v1`` snapshot, each with a stable code.

Validation never repairs anything: it reports. One scan of the blocks feeds both the recomputed tool
groups and the call/result checks, and every check is a dict or set lookup, so validation stays linear in
the size of the history.
"""

from __future__ import annotations

import re
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from operator import attrgetter
from pathlib import PurePosixPath, PureWindowsPath
from typing import Final

import msgspec

from ds4_context_core._exceptions import HistoryValidationError

from ._groups import CheckedGroups, ToolRelations, collect_tool_relations, group_and_check
from ._model import (
    HISTORY_MAX_IDENTIFIER_CHARS,
    HISTORY_SCHEMA_VERSION,
    CanonicalMessage,
    RuntimeHistorySnapshot,
    RuntimeToolAtomicGroup,
)
from ._shape import (
    MESSAGE_ROLES,
    MESSAGE_SHAPE_INVALID,
    SNAPSHOT_SHAPE_INVALID,
    groups_typed,
    malformed_messages,
    snapshot_fields_typed,
)

__all__ = [
    "HISTORY_MAX_IDENTIFIER_CHARS",
    "HISTORY_VALIDATION_CODES",
    "HISTORY_VALIDATION_FAILED",
    "HistoryValidationIssue",
    "all_identifiers_valid",
    "assert_valid_runtime_history_snapshot",
    "build_runtime_history_snapshot",
    "escaped_prefix",
    "has_control_characters",
    "identifier_problem",
    "validate_runtime_history_snapshot",
]

HISTORY_VALIDATION_FAILED: Final = "history-validation-failed"

# The first fifteen are the original's codes, in its order; the rest are our additions for checks the
# original did not make (caller-expected identity, the trusted root, malformed identifiers, and fields
# of the wrong type in a snapshot built in Python).
HISTORY_VALIDATION_CODES: Final = (
    "history-schema-incompatible",
    "history-identity-invalid",
    "trusted-project-root-missing",
    "history-message-id-missing",
    "history-message-id-duplicate",
    "history-provenance-invalid",
    "tool-call-identity-invalid",
    "tool-result-orphaned",
    "tool-atomic-group-invalid",
    "tool-atomic-message-missing",
    "tool-atomic-message-overlap",
    "tool-atomic-call-overlap",
    "tool-atomic-group-missing",
    "tool-atomic-group-mismatch",
    "tool-atomic-call-unknown",
    "history-identity-mismatch",
    "trusted-project-root-mismatch",
    "trusted-project-root-invalid",
    "history-message-id-invalid",
    SNAPSHOT_SHAPE_INVALID,
    MESSAGE_SHAPE_INVALID,
)

# C0 controls, DEL and C1 controls: never valid inside an identifier or a path that crosses a boundary.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PREFIX_CHARS: Final = 32


class HistoryValidationIssue(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One broken invariant. ``message`` is fixed text: it never holds content, only the code's meaning."""

    code: str
    message: str
    message_id: str | None = None
    tool_call_id: str | None = None
    group_id: str | None = None


def has_control_characters(text: str) -> bool:
    """True when ``text`` holds a C0 control, DEL or a C1 control.

    For ASCII text ``isprintable`` is exactly "no C0 control and no DEL" and runs several times faster
    than a regex scan, which matters when the text is every identifier of a 100,000-message history.
    """
    if text.isascii():
        return not text.isprintable()
    return _CONTROL.search(text) is not None


def escaped_prefix(value: str, limit: int = _PREFIX_CHARS) -> str:
    """A short, escaped prefix of an untrusted string, safe to echo in a message."""
    head = value[:limit].encode("unicode_escape", "backslashreplace").decode("ascii")
    return head + ("..." if len(value) > limit else "")


def identifier_problem(value: str, limit: int = HISTORY_MAX_IDENTIFIER_CHARS) -> str | None:
    """``"not-text"``, ``"blank"``, ``"control"``, ``"too-long"`` or ``None`` when acceptable."""
    if type(value) is not str:
        return "not-text"
    if not value or value.isspace():
        return "blank"
    if len(value) > limit:
        return "too-long"
    if _CONTROL.search(value):
        return "control"
    return None


def _echo(value: object) -> str | None:
    """Valid identifiers are echoed exactly (callers look them up); other text as an escaped prefix."""
    if type(value) is not str:
        return None
    return value if identifier_problem(value) is None else escaped_prefix(value)


def _message_shape_issue(message: object) -> HistoryValidationIssue:
    return HistoryValidationIssue(
        code=MESSAGE_SHAPE_INVALID,
        message="canonical message fields do not have the types runtime-history-v1 declares",
        message_id=_echo(getattr(message, "id", None)),
    )


def _is_absolute(path: str) -> bool:
    return PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()


def _identity_issues(
    snapshot: RuntimeHistorySnapshot,
    expected_runtime_id: str | None,
    expected_session_id: str | None,
    trusted_project_root: str | None,
) -> list[HistoryValidationIssue]:
    issues: list[HistoryValidationIssue] = []
    if snapshot.schema_version != HISTORY_SCHEMA_VERSION:
        issues.append(
            HistoryValidationIssue(
                code="history-schema-incompatible",
                message=f"history schema version is not {HISTORY_SCHEMA_VERSION}",
            )
        )
    if any(identifier_problem(v) for v in (snapshot.runtime_id, snapshot.session_id, snapshot.revision)):
        issues.append(
            HistoryValidationIssue(
                code="history-identity-invalid",
                message="runtime id, session id and revision must be non-blank identifiers without control "
                "characters",
            )
        )
    if (expected_runtime_id is not None and snapshot.runtime_id != expected_runtime_id) or (
        expected_session_id is not None and snapshot.session_id != expected_session_id
    ):
        issues.append(
            HistoryValidationIssue(
                code="history-identity-mismatch",
                message="snapshot runtime id or session id differs from the expected identity",
            )
        )
    root = snapshot.project_root
    if type(root) is not str:
        issues.append(
            HistoryValidationIssue(
                code="trusted-project-root-invalid",
                message="project root must be an absolute path without control characters",
            )
        )
    elif not root or root.isspace():
        issues.append(
            HistoryValidationIssue(
                code="trusted-project-root-missing", message="trusted project root must be non-empty"
            )
        )
    elif _CONTROL.search(root) or not _is_absolute(root):
        issues.append(
            HistoryValidationIssue(
                code="trusted-project-root-invalid",
                message="project root must be an absolute path without control characters",
            )
        )
    if trusted_project_root is not None and root != trusted_project_root:
        issues.append(
            HistoryValidationIssue(
                code="trusted-project-root-mismatch",
                message="project root is not exactly the trusted project root",
            )
        )
    return issues


def all_identifiers_valid(values: Sequence[str], limit: int = HISTORY_MAX_IDENTIFIER_CHARS) -> bool:
    """``identifier_problem(v) is None`` for every value, checked with a few C-level passes."""
    if not values:
        return True
    return (
        min(map(len, values)) > 0
        and max(map(len, values)) <= limit
        and not any(map(str.isspace, values))
        and not has_control_characters("".join(values))
    )


_id_of = attrgetter("id")
_role_of = attrgetter("role")
_blocks_of = attrgetter("blocks")
_provenance_of = attrgetter("provenance")
_source_entry_of = attrgetter("source_entry_id")
_session_of = attrgetter("session_id")
_entry_of = attrgetter("entry_id")
_source_of = attrgetter("source")
_runtime_of = attrgetter("runtime_id")


def _messages_look_valid(
    ids: list[str], messages: Sequence[CanonicalMessage], runtime_id: str, session_id: str
) -> bool:
    """The common case, decided without a Python-level loop per message; False sends us to the slow path."""
    if len(set(ids)) != len(ids) or not all_identifiers_valid(ids):
        return False
    if not set(map(_role_of, messages)) <= MESSAGE_ROLES:
        return False
    if set(map(type, map(_blocks_of, messages))) - {tuple}:
        return False
    provenances = list(map(_provenance_of, messages))
    if provenances and set(map(_session_of, provenances)) != {session_id}:
        return False
    entries = list(map(_entry_of, provenances))
    if list(map(_source_entry_of, messages)) != entries or not all_identifiers_valid(entries):
        return False
    origins = set(zip(map(_source_of, provenances), map(_runtime_of, provenances), strict=True))
    return all(source != "runtime-session" or runtime == runtime_id for source, runtime in origins)


def _message_issues(
    messages: Sequence[CanonicalMessage], runtime_id: str, session_id: str
) -> tuple[list[HistoryValidationIssue], set[str]]:
    ids = list(map(_id_of, messages))
    if _messages_look_valid(ids, messages, runtime_id, session_id):
        return [], set(ids)
    issues: list[HistoryValidationIssue] = []
    seen: set[str] = set()
    for message in messages:
        message_id = message.id
        problem = identifier_problem(message_id)
        if problem == "blank":
            issues.append(
                HistoryValidationIssue(
                    code="history-message-id-missing",
                    message="canonical message ids must be non-blank",
                    message_id=escaped_prefix(message_id) if message_id else None,
                )
            )
        elif problem is not None:
            issues.append(
                HistoryValidationIssue(
                    code="history-message-id-invalid",
                    message="canonical message id is too long or holds control characters",
                    message_id=escaped_prefix(message_id),
                )
            )
        if message_id in seen:
            issues.append(
                HistoryValidationIssue(
                    code="history-message-id-duplicate",
                    message="canonical message ids must be unique",
                    message_id=_echo(message_id),
                )
            )
        else:
            seen.add(message_id)
        if message.role not in MESSAGE_ROLES or type(message.blocks) is not tuple:
            issues.append(_message_shape_issue(message))
        provenance = message.provenance
        entry_id = provenance.entry_id
        if (
            provenance.session_id != session_id
            or message.source_entry_id != entry_id
            or identifier_problem(entry_id) is not None
            or (provenance.source == "runtime-session" and provenance.runtime_id != runtime_id)
        ):
            issues.append(
                HistoryValidationIssue(
                    code="history-provenance-invalid",
                    message="message provenance does not match the snapshot's session, runtime or entry id",
                    message_id=_echo(message_id),
                )
            )
    return issues, seen


def _tool_issues(relations: ToolRelations) -> list[HistoryValidationIssue]:
    issues: list[HistoryValidationIssue] = []
    calls = relations.calls
    results = relations.results
    call_ids = list(calls)
    if (
        max(map(len, calls.values()), default=1) == 1
        and results.keys() <= calls.keys()
        and all_identifiers_valid(call_ids)
    ):
        return issues
    for call_id, positions in calls.items():
        if len(positions) != 1 or identifier_problem(call_id) is not None:
            issues.append(
                HistoryValidationIssue(
                    code="tool-call-identity-invalid",
                    message="tool call ids must be unique, non-blank and free of control characters",
                    tool_call_id=_echo(call_id) if call_id else None,
                )
            )
    for call_id in relations.results:
        if call_id not in calls or identifier_problem(call_id) is not None:
            issues.append(
                HistoryValidationIssue(
                    code="tool-result-orphaned",
                    message="tool result does not answer a known tool call",
                    tool_call_id=_echo(call_id) if call_id else None,
                )
            )
    return issues


def _group_issues(
    declared: Sequence[RuntimeToolAtomicGroup],
    expected: Sequence[RuntimeToolAtomicGroup],
    message_ids: set[str],
    unique_message_ids: bool,
) -> list[HistoryValidationIssue]:
    issues: list[HistoryValidationIssue] = []
    if unique_message_ids and tuple(declared) == tuple(expected):
        # Groups equal to the recomputed ones over unique message ids cannot miss, overlap or mismatch.
        return issues
    declared_by_call: dict[str, RuntimeToolAtomicGroup] = {}
    grouped_messages: set[str] = set()
    for group in declared:
        group_id = _echo(group.id) if group.id else None
        if identifier_problem(group.id) is not None or not group.message_ids or not group.tool_call_ids:
            issues.append(
                HistoryValidationIssue(
                    code="tool-atomic-group-invalid",
                    message="tool atomic groups need an id, member messages and tool call ids",
                    group_id=group_id,
                )
            )
        for message_id in group.message_ids:
            if message_id not in message_ids:
                issues.append(
                    HistoryValidationIssue(
                        code="tool-atomic-message-missing",
                        message="tool atomic group names a message that is not in the history",
                        message_id=_echo(message_id),
                        group_id=group_id,
                    )
                )
            elif message_id in grouped_messages:
                issues.append(
                    HistoryValidationIssue(
                        code="tool-atomic-message-overlap",
                        message="a message belongs to more than one tool atomic group",
                        message_id=_echo(message_id),
                        group_id=group_id,
                    )
                )
            grouped_messages.add(message_id)
        for call_id in group.tool_call_ids:
            if call_id in declared_by_call:
                issues.append(
                    HistoryValidationIssue(
                        code="tool-atomic-call-overlap",
                        message="a tool call belongs to more than one tool atomic group",
                        tool_call_id=_echo(call_id),
                        group_id=group_id,
                    )
                )
            declared_by_call[call_id] = group

    expected_calls: set[str] = set()
    for group in expected:
        expected_members = sorted(group.message_ids)
        for call_id in group.tool_call_ids:
            expected_calls.add(call_id)
            actual = declared_by_call.get(call_id)
            if actual is None:
                issues.append(
                    HistoryValidationIssue(
                        code="tool-atomic-group-missing",
                        message="a tool exchange in the history has no tool atomic group",
                        tool_call_id=_echo(call_id),
                    )
                )
            elif (
                actual.complete != group.complete
                or actual.id != group.id
                or sorted(actual.message_ids) != expected_members
                or sorted(set(actual.tool_call_ids)) != list(group.tool_call_ids)
            ):
                issues.append(
                    HistoryValidationIssue(
                        code="tool-atomic-group-mismatch",
                        message="tool atomic group does not match the history's call/result relations",
                        tool_call_id=_echo(call_id),
                        group_id=_echo(actual.id) if actual.id else None,
                    )
                )
    for call_id, group in declared_by_call.items():
        if call_id not in expected_calls:
            issues.append(
                HistoryValidationIssue(
                    code="tool-atomic-call-unknown",
                    message="tool atomic group names a tool call that is not in the history",
                    tool_call_id=_echo(call_id),
                    group_id=_echo(group.id) if group.id else None,
                )
            )
    return issues


def _shape_issues(snapshot: RuntimeHistorySnapshot) -> list[HistoryValidationIssue]:
    if not snapshot_fields_typed(snapshot):
        return [
            HistoryValidationIssue(
                code=SNAPSHOT_SHAPE_INVALID,
                message="snapshot fields do not have the types runtime-history-v1 declares",
            )
        ]
    issues = [_message_shape_issue(message) for _, message in malformed_messages(snapshot.messages)]
    if not groups_typed(snapshot.tool_atomic_groups):
        issues.append(
            HistoryValidationIssue(
                code="tool-atomic-group-invalid",
                message="tool atomic groups need an id, member messages and tool call ids",
            )
        )
    return issues


def validate_runtime_history_snapshot(
    snapshot: RuntimeHistorySnapshot,
    *,
    expected_runtime_id: str | None = None,
    expected_session_id: str | None = None,
    trusted_project_root: str | None = None,
) -> tuple[HistoryValidationIssue, ...]:
    """Every broken invariant of ``snapshot``, in a deterministic order; empty when it is valid.

    ``expected_runtime_id``/``expected_session_id`` reject a snapshot of another runtime or session;
    ``trusted_project_root`` must equal the snapshot's root exactly (a root is never broadened).
    """
    try:
        return _invariant_issues(snapshot, expected_runtime_id, expected_session_id, trusted_project_root)
    except (TypeError, AttributeError):
        # A field of another type (a snapshot built in Python: msgspec checks types only when decoding).
        # Screening every field up front would cost as much as the checks, so it runs only now.
        shape = _shape_issues(snapshot)
        if not shape:
            raise
    identity = _identity_issues(snapshot, expected_runtime_id, expected_session_id, trusted_project_root)
    return (*identity, *shape)


def _invariant_issues(
    snapshot: RuntimeHistorySnapshot,
    expected_runtime_id: str | None,
    expected_session_id: str | None,
    trusted_project_root: str | None,
) -> tuple[HistoryValidationIssue, ...]:
    issues = _identity_issues(snapshot, expected_runtime_id, expected_session_id, trusted_project_root)
    message_issues, message_ids = _message_issues(snapshot.messages, snapshot.runtime_id, snapshot.session_id)
    issues.extend(message_issues)
    ids_clean = _recall_built(snapshot)
    if ids_clean is None:
        checked = group_and_check(snapshot.messages)
        expected = checked.groups
        ids_clean = _ids_clean(checked)
    else:
        expected = snapshot.tool_atomic_groups
    if not ids_clean:  # only then can the relations hold an issue: list them to say which
        issues.extend(_tool_issues(collect_tool_relations(snapshot.messages)))
    unique = len(message_ids) == len(snapshot.messages)
    issues.extend(_group_issues(snapshot.tool_atomic_groups, expected, message_ids, unique))
    return tuple(issues)


def summarize_issues(issues: Iterable[HistoryValidationIssue]) -> str:
    """``"3 issues: tool-result-orphaned x2, history-message-id-duplicate x1"``: codes only, no content."""
    counts = Counter(issue.code for issue in issues)
    total = sum(counts.values())
    parts = ", ".join(f"{code} x{count}" for code, count in sorted(counts.items()))
    return f"{total} issue{'s' if total != 1 else ''}: {parts}"


def assert_valid_runtime_history_snapshot(
    snapshot: RuntimeHistorySnapshot,
    *,
    expected_runtime_id: str | None = None,
    expected_session_id: str | None = None,
    trusted_project_root: str | None = None,
) -> RuntimeHistorySnapshot:
    """Return ``snapshot`` unchanged when valid, else raise ``HistoryValidationError`` with every issue."""
    issues = validate_runtime_history_snapshot(
        snapshot,
        expected_runtime_id=expected_runtime_id,
        expected_session_id=expected_session_id,
        trusted_project_root=trusted_project_root,
    )
    if issues:
        summary = summarize_issues(issues)
        raise HistoryValidationError(
            HISTORY_VALIDATION_FAILED, f"invalid runtime history snapshot ({summary})", issues
        )
    return snapshot


def build_runtime_history_snapshot(
    *,
    runtime_id: str,
    session_id: str,
    revision: str,
    project_root: str,
    messages: Iterable[CanonicalMessage],
) -> RuntimeHistorySnapshot:
    """A snapshot with its tool atomic groups computed from ``messages``. It is not validated here."""
    history = tuple(messages)
    try:
        checked = group_and_check(history)
    except (TypeError, AttributeError):
        malformed = malformed_messages(history)
        if not malformed:
            raise
        issues = tuple(_message_shape_issue(message) for _, message in malformed)
        raise HistoryValidationError(
            HISTORY_VALIDATION_FAILED, f"cannot build a snapshot ({summarize_issues(issues)})", issues
        ) from None
    snapshot = RuntimeHistorySnapshot(
        runtime_id=runtime_id,
        session_id=session_id,
        revision=revision,
        project_root=project_root,
        messages=history,
        tool_atomic_groups=checked.groups,
    )
    _remember_built(snapshot, _ids_clean(checked))
    return snapshot


def _ids_clean(checked: CheckedGroups) -> bool:
    """Whether the call-id checks of validation can find nothing (what ``_tool_issues`` checks first)."""
    return checked.ids_regular and all_identifiers_valid(checked.call_ids)


# Snapshots made by build_runtime_history_snapshot, with whether their call ids are clean.
# A snapshot is frozen and its messages are an immutable tuple of frozen records, so for exactly that
# object the groups are known to be the recomputed ones and validation can skip grouping a second time.
# Entries are weak: they vanish with their snapshot, and a replaced copy is a new object that misses.
_built: dict[int, tuple[weakref.ref[RuntimeHistorySnapshot], bool]] = {}


def _remember_built(snapshot: RuntimeHistorySnapshot, ids_clean: bool) -> None:
    key = id(snapshot)

    def forget(_dead: weakref.ref[RuntimeHistorySnapshot]) -> None:
        entry = _built.get(key)
        if entry is not None and entry[0] is _dead:
            del _built[key]

    _built[key] = (weakref.ref(snapshot, forget), ids_clean)


def _recall_built(snapshot: RuntimeHistorySnapshot) -> bool | None:
    """For a snapshot ``build_runtime_history_snapshot`` made, whether its call ids are clean."""
    entry = _built.get(id(snapshot))
    if entry is None or entry[0]() is not snapshot:
        return None
    return entry[1]
