"""Where tool atomic groups are built: an append-only memo of per-message facts and tool units.

A tool call and every result answering it form one *unit* (all calls of one message share it), built
here by union-find while the history is walked once. The planner plans units; the public builder
(:func:`tool_atomic_groups`, behind ``history.build_canonical_tool_atomic_groups``) and snapshot
validation read the same units, so the structure has exactly one implementation.

The memo is keyed by position under one rule: it only ever describes a prefix of the history it was
built from, and it is extended only when the new input starts with exactly that prefix (checked with a
tuple comparison, which short-cuts on identical objects and otherwise compares content). Anything else
builds a fresh memo. So the memo is a pure cache: plans never depend on how it was reached, and
re-planning after ``k`` appended messages touches ``k`` messages.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from ds4_context_core._history._model import (
    CanonicalMessage,
    OpaqueProviderBlock,
    RuntimeToolAtomicGroup,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._tokens._estimators import _FLAT_VALUE_TYPES, fast_chars_v1

TokenEstimator = Callable[[CanonicalMessage], int]
MessageSanitizer = Callable[[CanonicalMessage], CanonicalMessage]

ORPHANED: Final = "tool-result-orphaned"
INCOMPLETE: Final = "tool-call-incomplete"
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filename")
# A first build of at least this many messages estimates tokens only where a plan needs them.
_DEFER_FROM: Final = 256
TOOL_ATOMIC_GROUP_ID_PREFIX: Final = "runtime-tool-group:"


def tool_atomic_group_id(message_ids: Iterable[str]) -> str:
    """Deterministic group id: prefix + first 16 hex chars of sha256 of the NUL-joined message ids."""
    digest = hashlib.sha256("\0".join(message_ids).encode("utf-8", "surrogatepass")).hexdigest()
    return TOOL_ATOMIC_GROUP_ID_PREFIX + digest[:16]


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
    if not isinstance(name, str):  # the compiled build rejects it at the call already, also a TypeError
        raise TypeError(f"a tool name must be a str, not {type(name).__name__[:40]}")
    return name.lower().replace("_", "").replace("-", "")


def arguments_unusual(arguments: object) -> bool:
    """Whether a call's arguments are not what the deferred estimate takes for granted (``flat_arguments``
    with ASCII keys): such a message is estimated at once, since stable JSON might reject it later."""
    if type(arguments) is not dict:
        return True
    for key, value in arguments.items():
        held = type(value)  # a str (the usual value) needs no set lookup
        if type(key) is not str or (held is not str and held not in _FLAT_VALUE_TYPES) or not key.isascii():
            return True
    return False


class HistoryIndexError(Exception):
    """Internal: the history or a caller callback cannot be indexed; carries the fallback code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class _IrregularShapeError(Exception):
    """Internal: the history has a shape only the general walk handles (see ``_first_walk``)."""


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
        # Token estimates are exact from ``known_from`` to the end; below it an entry is -1 until asked
        # for (``token``), so a cold plan estimates only the history it may send. ``cumulative`` holds
        # prefix sums up to a constant: only differences between positions >= ``known_from`` mean
        # anything (``prefix`` gives true sums).
        self.tokens: list[int] = []
        self.cumulative: list[int] = [0]
        self.known_from = 0
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
        self.repeated_calls: set[str] = set()  # call ids made by more than one call block
        # Positions of each tool unit, by root. A root with ``parent[root] == root`` missing here is a
        # run: the root and the positions right after it whose parent is the root (how the first walk
        # leaves most units, to save a list per unit); ``unit_members`` lists it on first use.
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
        found = self.members.get(root)
        if found is None:
            parent = self.parent
            if parent[root] != root:
                return [root]  # a message without tool blocks, or not a root
            # A run; ``source`` is still the indexed prefix while ``extend`` appends to it.
            end, size = root + 1, len(self.source)
            while end < size and parent[end] == root:
                end += 1
            found = self.members[root] = list(range(root, end))
        return found

    def group_id(self, root: int) -> str | None:
        if self.parent[root] != root:
            return None
        cached = self.group_ids.get(root)
        if cached is None:
            source = self.source
            cached = tool_atomic_group_id([source[p].id for p in self.unit_members(root)])
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

    # -- token estimates -------------------------------------------------------------------------

    def token(self, position: int) -> int:
        """The estimate of one message, computed on first use when it lies below ``known_from``."""
        tokens = self.tokens[position]
        if tokens < 0:
            with self.lock:
                tokens = fast_chars_v1(self.source[position])
                self.tokens[position] = tokens
        return tokens

    def ensure_known(self, position: int, over: float | None = None) -> None:
        """Lower ``known_from`` towards ``position``, newest first; with ``over``, stop as soon as the
        tokens from ``known_from`` to the end pass it (what lies further back cannot matter then)."""
        if self.known_from <= position:
            return
        with self.lock:
            tokens, cumulative, source = self.tokens, self.cumulative, self.source
            end = cumulative[len(source)]
            known = self.known_from
            running = cumulative[known]
            while known > position:
                if over is not None and end - running > over:
                    break
                known -= 1
                estimate = tokens[known]
                if estimate < 0:
                    estimate = fast_chars_v1(source[known])
                    tokens[known] = estimate
                running -= estimate
                cumulative[known] = running
            self.known_from = known

    def prefix(self, position: int) -> int:
        """True sum of the estimates of the messages before ``position`` (estimates everything)."""
        self.ensure_known(0)
        return self.cumulative[position] - self.cumulative[0]

    # -- building --------------------------------------------------------------------------------

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

    def _extend(self, messages: tuple[CanonicalMessage, ...], *, structure_only: bool = False) -> None:
        start = len(self.source)
        # Only a large first build of the default estimator defers estimates: an append is estimated
        # at once (it is what the next plan sends), and a caller's estimator must fail at index time.
        # A build for the tool units alone (``index_tool_units``) defers them whatever its size.
        deferred = start == 0 and (
            structure_only
            or (len(messages) >= _DEFER_FROM and self.estimator is fast_chars_v1 and self.sanitizer is None)
        )
        # Estimates that could fail later are made now, unless the build is for the tool units alone.
        estimate_odd = deferred and not structure_only
        first = deferred and self._first_walk(
            messages, estimate_odd=estimate_odd, structure_only=structure_only
        )
        if not first:
            self._walk(messages, deferred=deferred, estimate_odd=estimate_odd)
        if deferred:
            self.known_from = len(messages)
            # a build for the tool units alone never estimates: no prefix sums to hold
            self.cumulative = [0] if structure_only else [0] * (len(messages) + 1)

    def _first_walk(
        self, messages: tuple[CanonicalMessage, ...], *, estimate_odd: bool, structure_only: bool = False
    ) -> bool:
        """The deferred first build for the usual shape of a history, in about half the time of
        ``_walk``; returns False, having changed nothing, when the history needs the general walk.

        The usual shape: unique message and call ids, every result answers a call of one earlier
        message (or a call id the history never makes: an orphan alone in its message), and no message
        both calls and answers. Then every tool unit is one calling message plus the messages answering
        it, rooted at the calling message: parents are final at once (no union-find) and the open-call
        counts follow from the call ids never answered. Anything else (duplicates, a result before its
        call or answering two steps, a message or estimate that raises) goes to ``_walk``, which is the
        reference and reports every error exactly.
        """
        try:
            built = _first_structure(messages, estimate_odd=estimate_odd, structure_only=structure_only)
        except Exception:  # _IrregularShapeError, or a malformed message: the general walk reports it exactly
            return False
        parent, callers, answered, orphans = built.parent, built.callers, built.answered, built.orphans
        open_calls = dict.fromkeys(callers.values(), 0)  # every calling message is a root
        for positions in orphans.values():
            open_calls.update(dict.fromkeys(positions, 0))
        incomplete: dict[int, str] = {}
        if len(answered) != len(callers):  # every result answers a call: only then is one open
            for call_id in callers.keys() - answered:
                root = callers[call_id]  # a calling message is its unit's root
                open_calls[root] += 1
                incomplete[root] = INCOMPLETE
        bad: dict[int, str] = {}
        for positions in orphans.values():
            for position in positions:
                bad[position] = ORPHANED
                incomplete[position] = ORPHANED
        self.parent = parent
        self.position_of = built.position_of
        self.user_positions = built.user_positions
        self.pinned = built.pinned
        self.members = built.members
        self.callers = callers
        self.answered = answered
        self.open_calls = open_calls
        self.early_results = orphans
        self.bad = bad
        self.incomplete = incomplete
        self.tokens = built.tokens
        return True

    def _walk(  # noqa: PLR0915 - one tight loop: the only per-message work of a cold plan
        self, messages: tuple[CanonicalMessage, ...], *, deferred: bool, estimate_odd: bool
    ) -> None:
        """The general walk, the reference for every shape of history (``_first_walk`` is its fast path).

        Every message is read once; the per-block work is in ``_link_result`` and ``_link_call``.
        """
        token_list, cumulative = self.tokens, self.cumulative
        callers, parent, answered, open_calls = self.callers, self.parent, self.answered, self.open_calls
        group_ids = self.group_ids
        plain = self.estimator is fast_chars_v1
        sanitized = self._sanitized if self.sanitizer is not None else None
        position_of = self.position_of
        total = cumulative[-1]
        if deferred:  # only a first build defers: every estimate starts unknown (-1)
            token_list.extend([-1] * len(messages))
        for position in range(len(self.source), len(messages)):
            message = messages[position]
            if type(message) is not CanonicalMessage:
                raise HistoryIndexError(
                    "history-invalid", f"history item {position} is not a CanonicalMessage"
                )
            view = message if self.sanitizer is None else self._sanitize(message)
            root = -1
            has_result = False
            unusual = False
            for block in message.blocks:
                kind = type(block)
                if kind is ToolResultBlock:
                    has_result = True
                    call_id: str = block.tool_call_id  # type: ignore[union-attr]
                    caller = callers.get(call_id)
                    if root < 0 and caller is not None and parent[caller] == caller:
                        # The common case, inline: a result message joins its step's unit at the end.
                        root = caller
                        joined = self.unit_members(root)  # before the parent entry: a run ends here
                        parent.append(root)
                        joined.append(position)
                        if group_ids:
                            group_ids.pop(root, None)
                        if call_id not in answered:
                            answered.add(call_id)
                            open_calls[root] -= 1
                    else:
                        root = self._link_result(position, call_id, root)
                elif kind is ToolCallBlock:
                    if estimate_odd and not unusual:
                        unusual = arguments_unusual(block.arguments)  # type: ignore[union-attr]
                    root = self._link_call(position, block.id, root)  # type: ignore[union-attr]
                elif kind is OpaqueProviderBlock:
                    unusual = True
            if not deferred:
                tokens = fast_chars_v1(message) if plain and view is message else self._estimate(view)
                token_list.append(tokens)
                total += tokens
                cumulative.append(total)
            elif unusual and estimate_odd:
                # Deferred estimates must not fail later: estimate now what stable JSON might reject.
                token_list[position] = fast_chars_v1(message)
            if root < 0:
                parent.append(-1)
            elif open_calls[root] != 0 or root in self.bad:
                self.incomplete[root] = self.bad.get(root, INCOMPLETE)
            elif root in self.incomplete:
                del self.incomplete[root]
            if sanitized is not None:
                sanitized.append(view)
            message_id = message.id
            if position_of.setdefault(message_id, position) != position and self.duplicate_id is None:
                self.duplicate_id = message_id
            flags = message.flags
            role = message.role
            if role == "user" and not has_result and not flags.synthetic:
                self.user_positions.append(position)
            if flags.pinned or role == "system":  # system messages are pinned by default
                self.pinned.append(position)

    def _sanitize(self, message: CanonicalMessage) -> CanonicalMessage:
        sanitizer = self.sanitizer
        assert sanitizer is not None
        try:
            view = sanitizer(message)
        except Exception:
            raise HistoryIndexError("privacy-sanitizer-failed", "the privacy sanitizer raised") from None
        if type(view) is not CanonicalMessage or view.id != message.id:
            raise HistoryIndexError("privacy-sanitizer-failed", "the sanitizer must keep the message id")
        return view

    def _estimate(self, view: CanonicalMessage) -> int:
        try:
            tokens = self.estimator(view)
        except Exception:
            raise HistoryIndexError("token-estimator-failed", "the token estimator raised") from None
        if type(tokens) is not int or tokens < 0:
            raise HistoryIndexError("token-estimator-failed", "the token estimator must return an int >= 0")
        return tokens

    def _new_unit(self, position: int) -> int:
        self.parent.append(position)
        self.members[position] = [position]
        self.open_calls[position] = 0
        return position

    def _link_result(self, position: int, call_id: str, root: int) -> int:
        """Join the result of ``call_id`` at ``position`` to its call's unit; the message's unit root."""
        caller = self.callers.get(call_id)
        if caller is None:
            if root < 0:
                root = self._new_unit(position)
            self.early_results.setdefault(call_id, []).append(position)
            self.bad[root] = ORPHANED
            return root
        parent = self.parent
        caller_root = caller if parent[caller] == caller else self.find(caller)
        if root < 0:
            # The common case: a result message joins its call's unit at the end.
            root = caller_root
            joined = self.unit_members(root)  # before the parent entry: a run ends here
            parent.append(root)
            joined.append(position)
            if self.group_ids:
                self.group_ids.pop(root, None)
        elif root != caller_root:
            root = self._join(root, caller_root)
        if call_id not in self.answered:
            self.answered.add(call_id)
            self.open_calls[root] -= 1
        return root

    def _link_call(self, position: int, call_id: str, root: int) -> int:
        """Record the call ``call_id`` at ``position`` in the message's unit; the unit's root."""
        if root < 0:
            root = self._new_unit(position)
        callers = self.callers
        if call_id in callers:
            self.bad.setdefault(root, INCOMPLETE)
            self.repeated_calls.add(call_id)
            root = self._join(root, self.find(callers[call_id]))
        else:
            callers[call_id] = position
            self.open_calls[root] += 1
        early_results = self.early_results
        if early_results and call_id in early_results:
            # A result that came before its call can never be sent in order.
            for other in early_results[call_id]:
                root = self._join(root, self.find(other))
            self.bad[root] = ORPHANED
        return root

    def _join(self, left: int, right: int) -> int:
        """Union two units; the smaller position is the root. Returns the root."""
        if left == right:
            return left
        root, other = (left, right) if left < right else (right, left)
        merged = self.unit_members(other)
        mine = self.unit_members(root)
        del self.members[other]
        self.parent[other] = root
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


class _FirstFacts:
    """What ``_first_structure`` finds, for ``HistoryIndex._first_walk`` to keep."""

    __slots__ = (
        "answered",
        "callers",
        "members",
        "orphans",
        "parent",
        "pinned",
        "position_of",
        "tokens",
        "user_positions",
    )

    def __init__(self, size: int, *, estimates: bool = True) -> None:
        self.parent = [-1] * size
        self.tokens = [-1] * size if estimates else []
        self.position_of: dict[str, int] = {}
        self.user_positions: list[int] = []
        self.pinned: list[int] = []
        self.members: dict[int, list[int]] = {}
        self.callers: dict[str, int] = {}
        self.answered: set[str] = set()
        self.orphans: dict[str, list[int]] = {}


def _first_structure(  # noqa: PLR0915 - the cold plan's one pass over every block, kept in one loop
    messages: tuple[CanonicalMessage, ...], *, estimate_odd: bool = True, structure_only: bool = False
) -> _FirstFacts:
    """The facts ``HistoryIndex._first_walk`` keeps; raises ``_IrregularShapeError`` outside its shape.

    ``structure_only`` (the tool units alone, for a snapshot's groups) leaves out what only a plan
    reads: the position of each message id and the token estimates. Those were most of a snapshot's
    transient memory (a dict entry per message), and the units are made by position, so they do not
    depend on message ids being unique.
    """
    size = len(messages)
    flat_types = _FLAT_VALUE_TYPES
    facts = _FirstFacts(size, estimates=not structure_only)
    planning = not structure_only
    parent, position_of, callers, answered, orphans = (
        facts.parent,
        facts.position_of,
        facts.callers,
        facts.answered,
        facts.orphans,
    )
    user_positions, pinned = facts.user_positions, facts.pinned
    gapped: list[int] = []  # roots of units that are not one run of positions
    unusual: list[int] = []
    calls = 0
    for position, message in enumerate(messages):
        if type(message) is not CanonicalMessage:
            raise _IrregularShapeError
        if planning:
            position_of[message.id] = position
        elif type(message.id) is not str:  # the general walk fails on it exactly as a plan's would
            raise _IrregularShapeError
        root = -1
        has_result = False
        odd = not estimate_odd  # True: skip the argument scan, nothing will be estimated
        for block in message.blocks:
            kind = type(block)
            if kind is ToolResultBlock:
                has_result = True
                call_id: str = block.tool_call_id  # type: ignore[union-attr]
                caller = callers.get(call_id)
                if caller is None:
                    # An orphan, unless a later message makes this call (checked after the loop).
                    if root >= 0 and root != position:
                        raise _IrregularShapeError
                    root = position
                    orphans.setdefault(call_id, []).append(position)
                    continue
                # A calling message is its own unit's root (a message that also answers is irregular,
                # and so is one answering two steps).
                if caller == position or (root >= 0 and root != caller):
                    raise _IrregularShapeError
                if root < 0:
                    root = caller
                    if parent[position - 1] != caller:
                        gapped.append(caller)
                answered.add(call_id)
            elif kind is ToolCallBlock:
                if has_result or (root >= 0 and root != position):
                    raise _IrregularShapeError
                root = position
                callers[block.id] = position  # type: ignore[union-attr]
                calls += 1
                if not odd:
                    # ``arguments_unusual``, inlined: this pass runs it for every tool call of a cold
                    # plan, where the function call costs more than the check (about 3 % of the plan).
                    arguments = block.arguments  # type: ignore[union-attr]
                    if type(arguments) is dict:
                        for key, value in arguments.items():
                            held = type(value)  # a str (the usual value) needs no set lookup
                            if (
                                type(key) is not str
                                or (held is not str and held not in flat_types)
                                or not key.isascii()
                            ):
                                odd = True
                                break
                    else:
                        odd = True
            elif kind is OpaqueProviderBlock:
                odd = True
        if root >= 0:
            parent[position] = root
        if odd and estimate_odd:
            unusual.append(position)
        flags = message.flags
        role = message.role
        if role == "user" and not has_result and not flags.synthetic:
            user_positions.append(position)
        if flags.pinned or role == "system":  # system messages are pinned by default
            pinned.append(position)
    if (planning and len(position_of) != size) or len(callers) != calls:
        raise _IrregularShapeError  # a duplicate message or call id
    if orphans and not callers.keys().isdisjoint(orphans):
        raise _IrregularShapeError  # a result that came before its call
    facts.members = _gapped_members(parent, gapped)
    # Deferred estimates must not fail later: estimate now what stable JSON might reject.
    for position in unusual:
        facts.tokens[position] = fast_chars_v1(messages[position])
    return facts


def _gapped_members(parent: list[int], gapped: list[int]) -> dict[int, list[int]]:
    """Members of the units that are not one run of positions (see ``HistoryIndex.members``)."""
    members: dict[int, list[int]] = {root: [] for root in gapped}
    if members:
        for position in range(min(members), len(parent)):
            unit = parent[position]
            if unit in members:
                members[unit].append(position)
    return members


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


def index_tool_units(messages: Sequence[CanonicalMessage]) -> HistoryIndex:
    """An index of ``messages`` for its tool units alone: token estimates are left for later."""
    history = tuple(messages)
    for position, message in enumerate(history):
        if type(message) is not CanonicalMessage:
            raise TypeError(f"history item {position} is not a CanonicalMessage")
    index = HistoryIndex(fast_chars_v1, None)
    index._extend(history, structure_only=True)
    index.source = index.view = history
    return index


def tool_ids_regular(index: HistoryIndex) -> bool:
    """Whether every call id is made by exactly one call block and every result answers a call the
    history makes (anywhere: order is the planner's concern, not the groups')."""
    callers = index.callers
    return not index.repeated_calls and all(call_id in callers for call_id in index.early_results)


def _merge_orphans(index: HistoryIndex, members: dict[int, list[int]], ids: dict[int, list[str]]) -> None:
    """Merge units that share the id of a call the history never makes (each id lands in one group)."""
    callers, find = index.callers, index.find
    into: dict[int, int] = {}  # unit root -> the root of the unit it merged into

    def target(root: int) -> int:
        while root in into:
            root = into[root]
        return root

    for call_id, positions in index.early_results.items():
        if call_id in callers:
            continue
        roots = sorted({target(find(position)) for position in positions})
        for other in roots[1:]:
            into[other] = roots[0]
            members[roots[0]] = sorted(members[roots[0]] + members.pop(other))
            known = ids[roots[0]]
            known.extend(i for i in ids.pop(other) if i not in known)


def tool_atomic_groups(index: HistoryIndex) -> tuple[RuntimeToolAtomicGroup, ...]:
    """The public tool atomic groups of the indexed history, sorted by their first message id.

    ``complete`` is true when every call id of the group has exactly one call block and at least one
    result (in any order: a unit the planner cannot send because a result precedes its call is still
    complete as a group).
    """
    parent, find, callers = index.parent, index.find, index.callers
    members = {root: index.unit_members(root) for root, up in enumerate(parent) if up == root}
    if not members:
        return ()
    ids: dict[int, list[str]] = {root: [] for root in members}
    for call_id, position in callers.items():
        ids[find(position)].append(call_id)
    orphan_ids = [call_id for call_id in index.early_results if call_id not in callers]
    for call_id in orphan_ids:
        ids[find(index.early_results[call_id][0])].append(call_id)
    if any(len(index.early_results[call_id]) > 1 for call_id in orphan_ids):
        _merge_orphans(index, members, ids)
    answered, early, repeated = index.answered, index.early_results, index.repeated_calls
    source = index.source
    groups: list[RuntimeToolAtomicGroup] = []
    for root, positions in members.items():
        message_ids = tuple([source[position].id for position in positions])
        group_ids = ids[root]
        complete = all(
            call_id in callers and call_id not in repeated and (call_id in answered or call_id in early)
            for call_id in group_ids
        )
        groups.append(
            RuntimeToolAtomicGroup(
                id=tool_atomic_group_id(message_ids),
                message_ids=message_ids,
                tool_call_ids=tuple(sorted(group_ids)) if len(group_ids) > 1 else tuple(group_ids),
                complete=complete,
            )
        )
    # Groups already run by first position; the contract orders them by first message id, which
    # differs only when ids are not in history order.
    groups.sort(key=_first_message_id)
    return tuple(groups)


def _first_message_id(group: RuntimeToolAtomicGroup) -> str:
    return group.message_ids[0]
