"""Stage 2: an append-only memo of per-message facts and tool atomic groups.

The memo is keyed by position under one rule: it only ever describes a prefix of the history it was
built from, and it is extended only when the new input starts with exactly that prefix (checked with a
tuple comparison, which short-cuts on identical objects and otherwise compares content). Anything else
builds a fresh memo. So the memo is a pure cache: plans never depend on how it was reached, and
re-planning after ``k`` appended messages touches ``k`` messages.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from typing import Final

import msgspec

from ds4_context_core._groups import tool_atomic_group_id
from ds4_context_core._model import (
    ArtifactReferenceBlock,
    CanonicalMessage,
    FileReferenceBlock,
    ImageBlock,
    OpaqueProviderBlock,
    SummaryReferenceBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._stable_json import stable_json

TokenEstimator = Callable[[CanonicalMessage], int]
MessageSanitizer = Callable[[CanonicalMessage], CanonicalMessage]

ORPHANED: Final = "tool-result-orphaned"
INCOMPLETE: Final = "tool-call-incomplete"
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filename")

_sorted_encoder = msgspec.json.Encoder(order="sorted")
_FLAT_VALUE_TYPES: Final = frozenset({str, int, bool})
_STRING_TYPE: Final = frozenset({str})


def _is_flat(arguments: object) -> bool:
    # String keys and string/int/bool values (the usual shape of tool arguments): msgspec's sorted
    # encoding is then exactly the stable JSON, at a fraction of the cost.
    return (
        type(arguments) is dict
        and set(map(type, arguments.values())) <= _FLAT_VALUE_TYPES
        and set(map(type, arguments)) <= _STRING_TYPE
    )


def _argument_chars(arguments: object) -> int:
    if _is_flat(arguments):
        try:
            encoded = _sorted_encoder.encode(arguments)
        except (TypeError, ValueError, OverflowError):  # an int beyond 64 bits
            return len(stable_json(arguments))
        return len(encoded) if encoded.isascii() else len(encoded.decode("utf-8"))
    return len(stable_json(arguments))


def fast_chars_v1(message: CanonicalMessage) -> int:
    """The ``chars-v1`` estimate, computed without a generic stable-JSON walk for plain arguments."""
    chars = 0
    images = 0
    for block in message.blocks:
        kind = type(block)
        if kind is TextBlock:
            chars += len(block.text)  # type: ignore[union-attr]
        elif kind is ToolResultBlock:
            chars += len(block.content) + len(block.tool_name)  # type: ignore[union-attr]
        elif kind is ToolCallBlock:
            chars += len(block.name) + _argument_chars(block.arguments)  # type: ignore[union-attr]
        elif kind is ThinkingBlock:
            chars += len(block.thinking)  # type: ignore[union-attr]
        elif kind is ImageBlock:
            images += 1
        elif kind is FileReferenceBlock:
            chars += len(block.path)  # type: ignore[union-attr]
        elif kind is ArtifactReferenceBlock:
            chars += len(block.artifact_id)  # type: ignore[union-attr]
        elif kind is SummaryReferenceBlock:
            chars += len(block.summary_id)  # type: ignore[union-attr]
        elif kind is OpaqueProviderBlock:
            chars += len(stable_json(block.value))  # type: ignore[union-attr]
    return -(-chars // 4) + 8 + 4 * len(message.blocks) + 1024 * images


def call_path(call: ToolCallBlock) -> str | None:
    """The file a call works on, when its arguments name one."""
    arguments = call.arguments
    if isinstance(arguments, dict):
        for key in _PATH_KEYS:
            value = arguments.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def normalize_tool_name(name: str) -> str:
    """Lower case with ``_`` and ``-`` removed, so ``Str_Replace-Editor`` matches ``strreplaceeditor``."""
    return name.lower().replace("_", "").replace("-", "")


class HistoryIndexError(Exception):
    """Internal: the history or a caller callback cannot be indexed; carries the fallback code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class HistoryIndex:
    """Per-position facts of one history prefix. Mutated only under ``lock`` by ``extend``."""

    def __init__(self, estimator: TokenEstimator, sanitizer: MessageSanitizer | None) -> None:
        self.estimator = estimator
        self.sanitizer = sanitizer
        self.lock = threading.RLock()
        self.broken = False
        self.source: tuple[CanonicalMessage, ...] = ()
        # The history this index described before its last extension (checked to be a prefix).
        self.previous_source: tuple[CanonicalMessage, ...] | None = None
        # What the provider would see: the sanitized copies, or the messages themselves.
        self.view: Sequence[CanonicalMessage] = ()
        self._sanitized: list[CanonicalMessage] = []
        self.tokens: list[int] = []
        self.cumulative: list[int] = [0]
        self.position_of: dict[str, int] = {}
        self.duplicate_id: str | None = None
        self.user_positions: list[int] = []
        self.pinned: list[int] = []
        self.parent: list[int] = []  # union-find parent; -1 for a message without tool blocks
        self.callers: dict[str, int] = {}  # call id -> position of its (first) call
        self.answered: set[str] = set()
        self.open_calls: dict[int, int] = {}  # unit root -> calls still without a result
        self.early_results: dict[str, list[int]] = {}  # call id -> results seen before any call
        self.bad: dict[int, str] = {}  # unit root -> why it can never be complete
        self.members: dict[int, list[int]] = {}
        self.incomplete: dict[int, str] = {}
        self.group_ids: dict[int, str] = {}
        self.evidence: dict[int, bool] = {}

    def __len__(self) -> int:
        return len(self.source)

    def matches(self, estimator: TokenEstimator, sanitizer: MessageSanitizer | None) -> bool:
        return not self.broken and self.estimator is estimator and self.sanitizer is sanitizer

    def find(self, position: int) -> int:
        parent = self.parent
        root = position
        while parent[root] != root:
            root = parent[root]
        while parent[position] != root:
            parent[position], position = root, parent[position]
        return root

    def unit_of(self, position: int) -> int:
        return position if self.parent[position] < 0 else self.find(position)

    def unit_members(self, root: int) -> list[int]:
        return self.members.get(root) or [root]

    def group_id(self, root: int) -> str | None:
        if root not in self.members:
            return None
        cached = self.group_ids.get(root)
        if cached is None:
            cached = tool_atomic_group_id(self.source[p].id for p in self.members[root])
            self.group_ids[root] = cached
        return cached

    def turn_id(self, position: int) -> str | None:
        found = bisect.bisect_right(self.user_positions, position) - 1
        return self.source[self.user_positions[found]].id if found >= 0 else None

    def call_block(self, call_id: str) -> ToolCallBlock | None:
        """The (sanitized) call block with ``call_id``, if the history has one."""
        position = self.callers.get(call_id)
        if position is None:
            return None
        for block in self.view[position].blocks:
            if type(block) is ToolCallBlock and block.id == call_id:
                return block
        return None

    def current_request(self) -> int | None:
        return self.user_positions[-1] if self.user_positions else None

    def extend(self, messages: tuple[CanonicalMessage, ...]) -> None:
        """Index ``messages[len(self):]``; ``messages`` must start with the indexed prefix."""
        try:
            self._extend(messages)
        except HistoryIndexError:
            self.broken = True
            raise
        except Exception as error:  # a caller's estimator or sanitizer raised: never leak its text
            self.broken = True
            raise HistoryIndexError("planner-error", type(error).__name__) from None
        self.source = messages
        self.view = messages if self.sanitizer is None else self._sanitized

    def _extend(self, messages: tuple[CanonicalMessage, ...]) -> None:  # noqa: PLR0915 - one hot loop
        # One tight loop on purpose: this is the only per-message work of a cold plan.
        sanitizer = self.sanitizer
        estimator = self.estimator
        inline_estimate = estimator is fast_chars_v1
        sanitized, token_list, cumulative = self._sanitized, self.tokens, self.cumulative
        position_of, user_positions = self.position_of, self.user_positions
        parent, members = self.parent, self.members
        callers, answered, open_calls = self.callers, self.answered, self.open_calls
        early_results, bad, incomplete = self.early_results, self.bad, self.incomplete
        group_ids = self.group_ids
        find = self.find
        total = cumulative[-1]
        for position in range(len(self.source), len(messages)):
            message = messages[position]
            if type(message) is not CanonicalMessage:
                raise HistoryIndexError(
                    "history-invalid", f"history item {position} is not a CanonicalMessage"
                )
            view = message
            if sanitizer is not None:
                try:
                    view = sanitizer(message)
                except Exception:
                    raise HistoryIndexError(
                        "privacy-sanitizer-failed", "the privacy sanitizer raised"
                    ) from None
                if type(view) is not CanonicalMessage or view.id != message.id:
                    raise HistoryIndexError(
                        "privacy-sanitizer-failed", "the sanitizer must keep the message id"
                    )
            blocks = message.blocks
            chars = 0
            images = 0
            root = -1
            has_result = False
            for block in blocks:
                kind = type(block)
                if kind is TextBlock:
                    chars += len(block.text)  # type: ignore[union-attr]
                elif kind is ToolResultBlock:
                    has_result = True
                    content: str = block.content  # type: ignore[union-attr]
                    name: str = block.tool_name  # type: ignore[union-attr]
                    chars += len(content) + len(name)
                    call_id: str = block.tool_call_id  # type: ignore[union-attr]
                    caller = callers.get(call_id)
                    if caller is None:
                        if root < 0:
                            root = position
                            parent.append(position)
                            members[position] = [position]
                            open_calls[position] = 0
                        early_results.setdefault(call_id, []).append(position)
                        bad[root] = ORPHANED
                        continue
                    caller_root = caller if parent[caller] == caller else find(caller)
                    if root < 0:
                        # The common case: a result message joins its call's unit at the end.
                        root = caller_root
                        parent.append(root)
                        members[root].append(position)
                        if group_ids:
                            group_ids.pop(root, None)
                    elif root != caller_root:
                        root = self._join(root, caller_root)
                    if call_id not in answered:
                        answered.add(call_id)
                        open_calls[root] -= 1
                elif kind is ToolCallBlock:
                    call: ToolCallBlock = block  # type: ignore[assignment]
                    if inline_estimate:
                        chars += len(call.name) + _argument_chars(call.arguments)
                    if root < 0:
                        root = position
                        parent.append(position)
                        members[position] = [position]
                        open_calls[position] = 0
                    if call.id in callers:
                        bad.setdefault(root, INCOMPLETE)
                        root = self._join(root, find(callers[call.id]))
                    else:
                        callers[call.id] = position
                        open_calls[root] += 1
                    if early_results and call.id in early_results:
                        # A result that came before its call can never be sent in order.
                        for other in early_results[call.id]:
                            root = self._join(root, find(other))
                        bad[root] = ORPHANED
                elif inline_estimate:
                    if kind is ThinkingBlock:
                        chars += len(block.thinking)  # type: ignore[union-attr]
                    elif kind is ImageBlock:
                        images += 1
                    elif kind is FileReferenceBlock:
                        chars += len(block.path)  # type: ignore[union-attr]
                    elif kind is ArtifactReferenceBlock:
                        chars += len(block.artifact_id)  # type: ignore[union-attr]
                    elif kind is SummaryReferenceBlock:
                        chars += len(block.summary_id)  # type: ignore[union-attr]
                    elif kind is OpaqueProviderBlock:
                        chars += len(stable_json(block.value))  # type: ignore[union-attr]
            if inline_estimate and view is message:
                tokens = -(-chars // 4) + 8 + 4 * len(blocks) + 1024 * images
            else:
                try:
                    tokens = estimator(view)
                except Exception:
                    raise HistoryIndexError("token-estimator-failed", "the token estimator raised") from None
                if type(tokens) is not int or tokens < 0:
                    raise HistoryIndexError(
                        "token-estimator-failed", "the token estimator must return an int >= 0"
                    )
            if root < 0:
                parent.append(-1)
            elif open_calls[root] != 0 or root in bad:
                incomplete[root] = bad.get(root, INCOMPLETE)
            elif root in incomplete:
                del incomplete[root]
            if sanitizer is not None:
                sanitized.append(view)
            token_list.append(tokens)
            total += tokens
            cumulative.append(total)
            message_id = message.id
            if position_of.setdefault(message_id, position) != position and self.duplicate_id is None:
                self.duplicate_id = message_id
            flags = message.flags
            if message.role == "user" and not has_result and not flags.synthetic:
                user_positions.append(position)
            if flags.pinned:
                self.pinned.append(position)

    def _join(self, left: int, right: int) -> int:
        """Union two units; the smaller position is the root. Returns the root."""
        if left == right:
            return left
        root, other = (left, right) if left < right else (right, left)
        self.parent[other] = root
        merged = self.members.pop(other)
        mine = self.members[root]
        if merged[0] > mine[-1]:
            mine.extend(merged)
        else:
            mine[:] = sorted(set(mine).union(merged))
        self.open_calls[root] += self.open_calls.pop(other)
        other_bad = self.bad.pop(other, None)
        if other_bad is not None and self.bad.get(root) != ORPHANED:
            self.bad[root] = other_bad
        self.incomplete.pop(other, None)
        self.group_ids.pop(other, None)
        self.group_ids.pop(root, None)
        return root


def sync_index(
    index: HistoryIndex | None,
    messages: tuple[CanonicalMessage, ...],
    estimator: TokenEstimator,
    sanitizer: MessageSanitizer | None,
) -> HistoryIndex:
    """Return an index describing exactly ``messages``: extended in place when possible, else fresh."""
    if index is not None and index.matches(estimator, sanitizer):
        with index.lock:
            size = len(index.source)
            if size <= len(messages) and (size == 0 or messages[:size] == index.source):
                index.previous_source = index.source
                index.extend(messages)
                return index
    fresh = HistoryIndex(estimator, sanitizer)
    fresh.extend(messages)
    return fresh
