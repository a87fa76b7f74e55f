"""The planning pipeline: budget, groups, mandatory items, layer 1, layer 2, cut, supplements, validate.

Cache stability comes from three sticky decisions kept in :class:`PlanState`: a *cut* (everything
before it is out, except mandatory items), trimmed results and receipts. They change only in a
*compaction*, which happens when the plan would pass the soft limit and then frees at least a batch of
tokens at once, so between compactions every plan extends the previous one byte for byte.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import heapq
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from ds4_context_core._exceptions import PlanRestoreError
from ds4_context_core._history._model import (
    CanonicalBlock,
    CanonicalMessage,
    MessageFlags,
    ModelDescriptor,
    Provenance,
    RuntimeHistorySnapshot,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ds4_context_core._tokens._estimators import fast_chars_v1
from ds4_context_core.config import Ds4ContextConfig, PruningConfig, load_config

from ._budget import BudgetError, compute_budget
from ._index import (
    HistoryIndex,
    HistoryIndexError,
    MessageSanitizer,
    TokenEstimator,
    call_path,
    sync_index,
)
from ._index import normalize_tool_name as _norm
from ._pruning import (
    DefaultJudge,
    Judge,
    JudgeCandidate,
    ReceiptCall,
    Verdict,
    build_receipt_text,
    evidence_words,
    scan_evidence,
    trim_text,
)
from ._types import (
    DEFAULT_SUPPLEMENT_PRIORITY,
    FALLBACK_MODE_BLOCKED,
    FALLBACK_MODE_NATIVE,
    PLAN_CONTRACT_VERSION,
    PRIORITY_CURRENT_REQUEST,
    PRIORITY_PERSISTENT_PIN,
    PRIORITY_PIN_LABEL,
    PRIORITY_RECENT_TURN,
    SUPPLEMENT_KINDS,
    CompactionReport,
    GateCount,
    PlanBudget,
    PlanDiagnostic,
    PlanExclusion,
    PlanFallback,
    PlanItem,
    PlanManifest,
    ReceiptRecord,
    SupplementalItem,
)
from ._validate import atomicity_problem

_FRONT_KINDS: Final = frozenset({"memory", "summary"})
_MAX_LISTED_IDS: Final = 64
_MAX_DIAGNOSTICS: Final = 32
_MAX_ID_CHARS: Final = 256
_PRE_CUT_FACTOR: Final = 1.5
_plan_encoder = msgspec.json.Encoder(order="sorted")
# Building the (frozen) default configuration is a pydantic validation; a plan without one reuses it.
_DEFAULT_CONFIG: Final = load_config(None)


class _Verdicts:
    """The judge's verdict per candidate position, in candidate order.

    With the default judge, a candidate whose evidence scan has not run yet (``pending``) holds its
    verdict without evidence. Evidence only ever raises the default judge's keep, so that verdict is a
    lower bound: layer 1 takes candidates lowest keep first and scans only those it reaches before
    freeing enough, and whatever reads every verdict asks for ``final`` first. Scanning costs more
    than the rest of judging, and the largest results are trimmed before the rest are looked at.
    """

    __slots__ = ("_cache", "_judge", "_pending", "_words", "bounds")

    def __init__(
        self,
        bounds: dict[int, Verdict],
        pending: dict[int, JudgeCandidate] | None = None,
        judge: DefaultJudge | None = None,
        cache: dict[int, bool] | None = None,
        words: tuple[str, ...] = (),
    ) -> None:
        self.bounds = bounds
        self._pending = pending or {}
        self._judge = judge
        self._cache = cache
        self._words = words

    def settled(self, position: int) -> bool:
        return position not in self._pending

    def settle(self, position: int) -> Verdict:
        candidate = self._pending.pop(position, None)
        if candidate is not None:
            # Both are given whenever anything is pending.
            assert self._judge is not None
            assert self._cache is not None
            evidence = scan_evidence(candidate.content, self._words)
            self._cache[position] = evidence
            if evidence:
                verdict = self._judge._one(msgspec.structs.replace(candidate, has_evidence=True))
                self.bounds[position] = verdict
        return self.bounds[position]

    def final(self) -> dict[int, Verdict]:
        for position in list(self._pending):
            self.settle(position)
        return self.bounds


class _NameCache:
    """``normalize_tool_name`` remembered per plan: a session uses few tool names many times."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if type(name) is not str:
            return _norm(name)  # whatever it does with an odd value, unchanged
        found = self._known.get(name)
        if found is None:
            found = self._known[name] = _norm(name)
        return found


@dataclass(frozen=True, slots=True)
class _Trim:
    position: int
    message: CanonicalMessage
    tokens: int
    score: float | None


@dataclass(frozen=True, slots=True)
class _Receipt:
    roots: tuple[int, ...]
    positions: tuple[int, ...]
    message: CanonicalMessage
    tokens: int
    original_tokens: int
    compaction_id: str


class PlanState:
    """What one plan hands to the next: sticky decisions, the previous output and a shared memo.

    Treat it as an opaque, immutable value: pass ``previous_plan.state`` to the next call. Passing an
    older state again (a retry) is safe and gives the same plan as the first time.
    """

    __slots__ = (
        "_compactions",
        "_cut",
        "_estimator",
        "_index",
        "_previous_messages",
        "_receipts",
        "_source",
        "_trims",
    )

    def __init__(
        self,
        *,
        index: HistoryIndex | None = None,
        source: tuple[CanonicalMessage, ...] = (),
        cut: int = 0,
        trims: Mapping[int, _Trim] | None = None,
        receipts: Mapping[int, _Receipt] | None = None,
        compactions: int = 0,
        previous_messages: tuple[CanonicalMessage, ...] = (),
        estimator: TokenEstimator | None = None,
    ) -> None:
        self._index = index
        self._source = source
        self._cut = cut
        self._trims: Mapping[int, _Trim] = dict(trims or {})
        self._receipts: Mapping[int, _Receipt] = dict(receipts or {})
        self._compactions = compactions
        self._previous_messages = previous_messages
        self._estimator = estimator

    @property
    def history_length(self) -> int:
        """How many canonical messages the plan that made this state saw."""
        return len(self._source)

    @property
    def cut_message_id(self) -> str | None:
        """The first message at or after the cut, or ``None`` when nothing was cut."""
        if self._cut <= 0 or self._cut >= len(self._source):
            return None
        return self._source[self._cut].id

    @property
    def dropped_messages(self) -> int:
        return self._cut

    @property
    def trimmed_message_ids(self) -> tuple[str, ...]:
        return tuple(self._source[p].id for p in sorted(self._trims))

    @property
    def receipt_ids(self) -> tuple[str, ...]:
        return tuple(self._receipts[key].message.id for key in sorted(self._receipts))

    @property
    def compactions(self) -> int:
        return self._compactions


class _ManifestCompletion:
    """Completes a manifest with the figures that need estimates of history no plan sends.

    A cold plan of a long history estimates only its newest messages; the native total, the
    before-cut exclusion and a compaction's ``tokens_before`` also count the rest. They are added on
    the first read of ``plan.manifest``, from the same estimates an eager pass would have made, so
    the manifest is the same value either way. Thread-safe; the result is kept.
    """

    __slots__ = (
        "_before_cut",
        "_cut",
        "_fixed",
        "_index",
        "_lock",
        "_partial",
        "_size",
        "_skipped",
        "_value",
    )

    def __init__(
        self,
        partial: PlanManifest,
        index: HistoryIndex,
        *,
        size: int,
        fixed: int,
        cut: int,
        skipped: tuple[int, int] | None,
        before_cut: tuple[int, int, str, str] | None,
    ) -> None:
        self._partial = partial
        self._index = index
        self._size = size
        self._fixed = fixed
        self._cut = cut
        self._skipped = skipped
        self._before_cut = before_cut
        self._lock = threading.Lock()
        self._value: PlanManifest | None = None

    def __call__(self) -> PlanManifest:
        value = self._value
        if value is not None:
            return value
        with self._lock:
            if self._value is None:
                self._value = self._complete()
            return self._value

    def _complete(self) -> PlanManifest:
        partial, index = self._partial, self._index
        native = self._fixed + index.prefix(self._size)
        exclusions = partial.exclusions
        if self._before_cut is not None:
            count, tokens, first, last = self._before_cut
            exclusion = PlanExclusion(
                reason="before-cut",
                count=count,
                tokens=index.prefix(self._cut) + tokens,
                first_message_id=first,
                last_message_id=last,
            )
            exclusions = (*exclusions, exclusion)
        compaction = partial.compaction
        if compaction is not None and self._skipped is not None:
            start, end = self._skipped
            skipped = index.prefix(end) - index.prefix(start)
            compaction = msgspec.structs.replace(compaction, tokens_before=compaction.tokens_before + skipped)
        return msgspec.structs.replace(
            partial,
            native_tokens=native,
            saved_tokens=native - partial.planned_tokens,
            exclusions=exclusions,
            compaction=compaction,
        )


@dataclass(frozen=True, slots=True, init=False, eq=False, repr=False)
class ContextPlan:
    """The provider-facing messages of one model call and why each one is there.

    ``encode()`` gives deterministic bytes (equal inputs, equal bytes); ``state`` goes to the next call.
    """

    messages: tuple[CanonicalMessage, ...]
    items: tuple[PlanItem, ...]
    budget: PlanBudget
    # A manifest, or what completes one on first read (see ``_ManifestCompletion``).
    _manifest: PlanManifest | _ManifestCompletion
    state: PlanState
    _restore: Mapping[str, tuple[CanonicalMessage, ...]]
    _source: tuple[CanonicalMessage, ...]
    _positions: Mapping[str, int] | None
    _fallback: PlanFallback | None

    def __init__(
        self,
        messages: tuple[CanonicalMessage, ...],
        items: tuple[PlanItem, ...],
        budget: PlanBudget,
        manifest: PlanManifest | _ManifestCompletion,
        state: PlanState,
        _restore: Mapping[str, tuple[CanonicalMessage, ...]] | None = None,
        _source: tuple[CanonicalMessage, ...] = (),
        _positions: Mapping[str, int] | None = None,
    ) -> None:
        fields = {
            "messages": messages,
            "items": items,
            "budget": budget,
            "_manifest": manifest,
            "state": state,
            "_restore": {} if _restore is None else _restore,
            "_source": _source,
            "_positions": _positions,
            # A deferred manifest is never a fallback: those are always built complete.
            "_fallback": manifest.fallback if isinstance(manifest, PlanManifest) else None,
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    @property
    def manifest(self) -> PlanManifest:
        """What is in, what is out, and why (completed on first read; see ``_ManifestCompletion``)."""
        manifest = self._manifest
        return manifest if isinstance(manifest, PlanManifest) else manifest()

    def _key(self) -> tuple[object, ...]:
        return (self.messages, self.items, self.budget, self.manifest)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"ContextPlan(messages={self.messages!r}, items={self.items!r}, budget={self.budget!r}, "
            f"manifest={self.manifest!r})"
        )

    @property
    def fallback(self) -> PlanFallback | None:
        return self._fallback

    @property
    def ok(self) -> bool:
        """True when the plan was built normally (no fallback)."""
        return self._fallback is None

    def encode(self) -> bytes:
        """Stable JSON bytes of messages, items, budget and manifest (not the state)."""
        return _plan_encoder.encode(
            {"messages": self.messages, "items": self.items, "budget": self.budget, "manifest": self.manifest}
        )


def restore(plan: ContextPlan, message_id: str) -> tuple[CanonicalMessage, ...]:
    """The canonical originals behind a plan message: a receipt's steps, an untrimmed result, a message.

    Works through both layers (a receipt over trimmed results restores the untrimmed originals) and for
    messages the plan left out. Raises :class:`PlanRestoreError` (``plan-restore-unknown-id``) for an
    id the plan's history does not contain.
    """
    found = plan._restore.get(message_id)
    if found is not None:
        return found
    positions = plan._positions
    if positions is not None:
        position = positions.get(message_id)
        if position is not None and position < len(plan._source) and plan._source[position].id == message_id:
            return (plan._source[position],)
    preview = "".join(ch if ch.isprintable() else "?" for ch in str(message_id)[:32])
    raise PlanRestoreError("plan-restore-unknown-id", f"no message {preview!r} in this plan's history")


# --------------------------------------------------------------------------------------------------


class _FallbackError(Exception):
    def __init__(self, code: str, detail: str, mode: str = FALLBACK_MODE_NATIVE) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.mode = mode


def _hash16(*parts: object) -> str:
    return hashlib.sha256("\0".join(str(part) for part in parts).encode("utf-8")).hexdigest()[:16]


def _clean_id(value: object) -> bool:
    return (
        isinstance(value, str) and 0 < len(value) <= _MAX_ID_CHARS and all(ch.isprintable() for ch in value)
    )


def _as_messages(history: object) -> tuple[Any, ...]:
    if isinstance(history, RuntimeHistorySnapshot):
        return history.messages
    if isinstance(history, tuple):
        return history
    if isinstance(history, Sequence) and not isinstance(history, str | bytes | bytearray):
        return tuple(history)
    raise _FallbackError("history-invalid", "history must be a snapshot or a sequence of canonical messages")


def _empty_budget(model: object, fixed_tokens: object) -> PlanBudget:
    window = model.context_window if isinstance(model, ModelDescriptor) else 0
    fixed = fixed_tokens if type(fixed_tokens) is int else 0
    return PlanBudget(
        context_window=window if type(window) is int else 0,
        output_reserve=0,
        safety_margin=0,
        hard_limit=0,
        soft_limit=0,
        target_tokens=0,
        calibration_ratio=1.0,
        recent_tail_ceiling=0,
        retrieved_history_ceiling=0,
        project_snippet_ceiling=0,
        summary_ceiling=0,
        memory_ceiling=0,
        pin_cap=0,
        fixed_tokens=fixed,
    )


def _replace_text_blocks(
    message: CanonicalMessage, config: PruningConfig
) -> tuple[CanonicalMessage, int] | None:
    """Layer-1 copy of a tool-result message; ``None`` when trimming would not gain enough."""
    gained = 0
    blocks: list[CanonicalBlock] = []
    for block in message.blocks:
        if type(block) is ToolResultBlock and len(block.content) >= config.min_chars_to_prune:
            trimmed = trim_text(block.content, config.head_chars, config.tail_chars, message.id)
            if trimmed is not None:
                gained += len(block.content) - len(trimmed)
                blocks.append(msgspec.structs.replace(block, content=trimmed))
                continue
        blocks.append(block)
    if gained <= 0 or gained < config.min_gain_chars:
        return None
    flags = msgspec.structs.replace(message.flags, synthetic=True)
    return msgspec.structs.replace(message, blocks=tuple(blocks), flags=flags), gained


class _Run:
    """One planning call. Reads the index and the previous state; never mutates either's decisions."""

    def __init__(
        self,
        *,
        index: HistoryIndex,
        messages: tuple[CanonicalMessage, ...],
        budget: PlanBudget,
        config: Ds4ContextConfig,
        state: PlanState | None,
        pins: Iterable[str],
        supplemental: Iterable[SupplementalItem],
        estimator: TokenEstimator,
        judge: Judge | None,
        diagnostics: list[PlanDiagnostic],
    ) -> None:
        self.index = index
        self.messages = messages
        self.n = len(messages)
        self.budget = budget
        self.config = config
        self.pruning = config.pruning
        self.estimator = estimator
        self.judge = judge
        self.diagnostics = diagnostics
        self.pins = pins
        self.supplemental = supplemental
        self.previous = state
        self.cut = 0
        self.trims: dict[int, _Trim] = {}
        self.receipts: dict[int, _Receipt] = {}
        self.receipt_of: dict[int, int] = {}
        self.compactions = 0
        self.exclusions: list[PlanExclusion] = []
        self.compaction: CompactionReport | None = None
        self.tail_root = 0
        self.unit_tokens: dict[int, int] = {}
        self._dropped_supplements: list[str] = []
        # Parts of the manifest that need estimates of never-sent history, completed on first read:
        # the span skipped unestimated before a compaction, and the before-cut exclusion as
        # (count, tokens apart from the prefix sum up to the cut, first id, last id).
        self.skipped_span: tuple[int, int] | None = None
        self.before_cut: tuple[int, int, str, str] | None = None

    # -- inputs ----------------------------------------------------------------------------------

    def _adopt_state(self) -> None:
        state = self.previous
        if state is None:
            return
        size = len(state._source)
        valid = (
            size <= self.n
            and (state._estimator is None or state._estimator is self.estimator)
            and (
                size == 0
                # the index has just checked that this history extends exactly that one
                or state._source is self.index.previous_source
                or self.messages[:size] == state._source
            )
        )
        if not valid:
            self.diagnostics.append(
                PlanDiagnostic(code="state-reset", detail="history was rewritten; planning from scratch")
            )
            return
        self.cut = state._cut
        self.trims = dict(state._trims)
        self.receipts = dict(state._receipts)
        for key, receipt in self.receipts.items():
            for root in receipt.roots:
                self.receipt_of[root] = key
        self.compactions = state._compactions

    def _mandatory(self) -> dict[int, tuple[str, str, int]]:
        index = self.index
        current = index.current_request()
        if current is None:
            raise _FallbackError("current-request-missing", "the history has no user request to answer")
        chosen: dict[int, tuple[str, str, int]] = {}
        label_positions: list[int] = []
        unknown = 0
        pins = self.pins
        if isinstance(pins, str | bytes):
            pins = ()
        with contextlib.suppress(TypeError):
            for pin in pins:
                position = index.position_of.get(pin) if isinstance(pin, str) else None
                if position is None:
                    unknown += 1
                else:
                    label_positions.append(position)
        if unknown:
            self.diagnostics.append(
                PlanDiagnostic(code="pin-unknown", detail=f"{unknown} pin(s) not in history")
            )
        pin_tokens = 0
        incomplete = 0
        for positions, kind, reason, priority in (
            (label_positions, "pin", "pin-label", PRIORITY_PIN_LABEL),
            (index.pinned, "pin", "persistent-pin", PRIORITY_PERSISTENT_PIN),
        ):
            for position in positions:
                root = index.unit_of(position)
                if root in index.incomplete:
                    incomplete += 1
                    continue
                previous = chosen.get(root)
                if previous is None:
                    pin_tokens += self._unit_tokens_original(root)
                if previous is None or previous[2] < priority:
                    chosen[root] = (kind, reason, priority)
        if incomplete:
            self.diagnostics.append(
                PlanDiagnostic(
                    code="pin-incomplete-group", detail=f"{incomplete} pin(s) in incomplete tool groups"
                )
            )
        current_root = index.unit_of(current)
        current_tokens = 0 if current_root in chosen else self._unit_tokens_original(current_root)
        chosen[current_root] = ("current-request", "current-request", PRIORITY_CURRENT_REQUEST)
        fixed = self.budget.fixed_tokens
        if fixed > self.budget.hard_limit:
            raise _FallbackError(
                "fixed-overhead-exceeds-hard-limit", "system prompt and tools exceed the hard limit"
            )
        if fixed + current_tokens > self.budget.hard_limit:
            raise _FallbackError("message-exceeds-window", "the current request alone exceeds the hard limit")
        if pin_tokens > self.budget.pin_cap or fixed + current_tokens + pin_tokens > self.budget.hard_limit:
            raise _FallbackError("pins-exceed-cap", "pinned messages exceed their share of the hard limit")
        return chosen

    def _unit_tokens_original(self, root: int) -> int:
        token = self.index.token
        return sum(token(p) for p in self.index.unit_members(root))

    def _supplements(
        self, anchor: CanonicalMessage
    ) -> list[tuple[int, str, CanonicalMessage, int, SupplementalItem]]:
        ceilings = {
            "memory": self.budget.memory_ceiling,
            "summary": self.budget.summary_ceiling,
            "retrieved-history": self.budget.retrieved_history_ceiling,
            "project-snippet": self.budget.project_snippet_ceiling,
        }
        valid: list[tuple[int, str, SupplementalItem]] = []
        seen: set[str] = set()
        invalid = 0
        items = self.supplemental
        with contextlib.suppress(TypeError):
            for item in items:
                if (
                    type(item) is not SupplementalItem
                    or not _clean_id(item.id)
                    or item.kind not in SUPPLEMENT_KINDS
                    or not isinstance(item.text, str)
                    or item.id in seen
                    or (item.priority is not None and type(item.priority) is not int)
                ):
                    invalid += 1
                    continue
                seen.add(item.id)
                priority = (
                    item.priority if item.priority is not None else DEFAULT_SUPPLEMENT_PRIORITY[item.kind]
                )
                valid.append((priority, item.id, item))
        if invalid:
            self.exclusions.append(PlanExclusion(reason="supplement-invalid", count=invalid, tokens=0))
        valid.sort(key=lambda entry: (-entry[0], entry[1]))
        used: dict[str, int] = {}
        chosen = []
        provenance = anchor.provenance
        for priority, item_id, item in valid:
            message = CanonicalMessage(
                id="ds4-supplement:" + item_id,
                source_entry_id=item_id,
                role="user",
                blocks=(TextBlock(text=item.text),),
                provenance=Provenance(
                    source=provenance.source,
                    session_id=provenance.session_id,
                    entry_id=item_id,
                    runtime_id=provenance.runtime_id,
                ),
                flags=MessageFlags(synthetic=True),
            )
            tokens = self.estimator(message)
            if used.get(item.kind, 0) + tokens > ceilings[item.kind]:
                self.exclusions.append(
                    PlanExclusion(
                        reason="supplement-over-ceiling", count=1, tokens=tokens, message_ids=(message.id,)
                    )
                )
                continue
            used[item.kind] = used.get(item.kind, 0) + tokens
            chosen.append((priority, item_id, message, tokens, item))
        return chosen

    # -- the window ------------------------------------------------------------------------------

    def _window_units(self, mandatory: Mapping[int, object]) -> tuple[list[int], list[int]]:
        """Complete units rooted at or after the cut (with their tokens in ``self.unit_tokens``), and
        the positions after the cut that belong to units rooted before it."""
        index = self.index
        parent, find, incomplete = index.parent, index.find, index.incomplete
        tokens, members_of, cumulative = index.tokens, index.unit_members, index.cumulative
        cut = self.cut
        units: list[int] = []
        unit_tokens: dict[int, int] = {}
        stragglers: list[int] = []
        for position in range(cut, self.n):
            up = parent[position]
            if up >= 0:
                root = up if parent[up] == up else find(position)
                if root != position:
                    if root < cut:
                        stragglers.append(position)
                    continue
                if root in incomplete:
                    continue
                group = members_of(root)
                last = group[-1]
                if last - position + 1 == len(group):  # contiguous, the usual case
                    unit_tokens[root] = cumulative[last + 1] - cumulative[position]
                else:
                    unit_tokens[root] = sum(tokens[p] for p in group)
            else:
                unit_tokens[position] = tokens[position]
            units.append(position)
        # Mandatory units are always sent verbatim: forget layer-1/2 decisions that touch them.
        for key, receipt in list(self.receipts.items()):
            if any(root in mandatory for root in receipt.roots):
                del self.receipts[key]
                for root in receipt.roots:
                    self.receipt_of.pop(root, None)
        for position in list(self.trims):
            if index.unit_of(position) in mandatory:
                del self.trims[position]
        for position, trim in self.trims.items():
            root = index.unit_of(position)
            if root in unit_tokens and root not in self.receipt_of:
                unit_tokens[root] -= tokens[position] - trim.tokens
        for key, receipt in self.receipts.items():
            for root in receipt.roots:
                if root in unit_tokens:
                    unit_tokens[root] = receipt.tokens if root == key else 0
        self.unit_tokens = unit_tokens
        return units, stragglers

    # -- the run ---------------------------------------------------------------------------------

    def run(
        self,
    ) -> tuple[
        list[tuple[CanonicalMessage, PlanItem]], dict[str, tuple[CanonicalMessage, ...]], int, int, int, int
    ]:
        self._adopt_state()
        index = self.index
        mandatory = self._mandatory()
        current = index.current_request()
        assert current is not None  # _mandatory raised otherwise
        supplements = self._supplements(index.view[current])
        jumped = self._skip_far_history()
        units, stragglers = self._window_units(mandatory)
        window_tokens = sum(self.unit_tokens.values())
        outside_tokens = sum(self._unit_tokens_original(root) for root in mandatory if root < self.cut)
        supplement_tokens = sum(entry[3] for entry in supplements)
        fixed = self.budget.fixed_tokens
        usage = fixed + outside_tokens + supplement_tokens + window_tokens
        if usage > self.budget.soft_limit or jumped:
            usage, units, supplements = self._compact(usage, units, mandatory, supplements, jumped)
            stragglers = self._stragglers()
        if usage > self.budget.hard_limit:
            raise _FallbackError("hard-limit-exceeded", "mandatory items and fixed overhead do not fit")
        tail = self._tail_start(units)
        self.tail_root = units[tail] if tail < len(units) else self.n
        return self._emit(units, mandatory, supplements, stragglers)

    def _stragglers(self) -> list[int]:
        """Positions after the cut that belong to units rooted before it."""
        parent, find, cut = self.index.parent, self.index.find, self.cut
        found = []
        for position in range(cut, self.n):
            up = parent[position]
            if up >= 0 and (up if parent[up] == up else find(position)) < cut:
                found.append(position)
        return found

    def _goal(self) -> int:
        budget = self.budget
        batch = int(budget.hard_limit * self.config.planner.compaction_batch_ratio)
        return max(0, min(budget.target_tokens, budget.soft_limit - batch))

    def _skip_far_history(self) -> int:
        """Move the cut past history that cannot survive any compaction; return how many messages.

        Anything older than twice the compaction goal is dropped by the compaction anyway, so finding
        that point by bisection keeps a cold plan of a long history from walking all of it twice.
        """
        index = self.index
        limit = _PRE_CUT_FACTOR * max(self._goal(), 1)
        if index.known_from <= self.cut and index.cumulative[self.n] - index.cumulative[self.cut] <= limit:
            return 0  # the usual re-plan: everything since the cut is estimated and fits
        saved = sum(index.token(p) - trim.tokens for p, trim in self.trims.items())
        saved += sum(receipt.original_tokens - receipt.tokens for receipt in self.receipts.values())
        # Estimate newest first, only until the answer is certain: all the way down to the cut, or
        # until even with every earlier saving the newer messages alone pass the limit.
        index.ensure_known(self.cut, over=limit + saved)
        cumulative = index.cumulative
        known = max(self.cut, index.known_from)
        if known == self.cut:
            span = cumulative[self.n] - cumulative[self.cut]
            if span <= limit or span - saved <= limit:
                return 0
        # Earlier decisions only shrink the window, so the raw bisection point is a safe lower bound.
        # Every position below ``known`` has more than ``limit`` after it, so the search starts there.
        target = bisect.bisect_left(cumulative, cumulative[self.n] - limit, lo=known)
        parent = index.parent
        while target < self.n and parent[target] >= 0 and index.find(target) != target:
            target += 1
        while target < self.n and self.receipt_of.get(target, target) != target:
            target += 1
        if target <= self.cut:
            return 0
        jumped = target - self.cut
        self.cut = target
        self.trims = {p: t for p, t in self.trims.items() if p >= target}
        self.receipts = {k: r for k, r in self.receipts.items() if k >= target}
        self.receipt_of = {root: k for root, k in self.receipt_of.items() if k >= target}
        return jumped

    # -- compaction ------------------------------------------------------------------------------

    def _compact(  # noqa: PLR0915 - budget arithmetic of one compaction, kept together on purpose
        self,
        usage: int,
        units: list[int],
        mandatory: dict[int, tuple[str, str, int]],
        supplements: list[tuple[int, str, CanonicalMessage, int, SupplementalItem]],
        jumped: int,
    ) -> tuple[int, list[int], list[tuple[int, str, CanonicalMessage, int, SupplementalItem]]]:
        budget = self.budget
        unit_tokens = self.unit_tokens
        index = self.index
        if self.cut - jumped >= index.known_from:
            before = usage + index.cumulative[self.cut] - index.cumulative[self.cut - jumped]
        else:  # the skipped history was never estimated: the manifest adds it when it is read
            before = usage
            self.skipped_span = (self.cut - jumped, self.cut)
        goal = self._goal()
        self.compactions += 1
        compaction_id = "ds4-compaction:" + _hash16(
            self.messages[0].id if self.messages else "", self.compactions, self.cut, self.n
        )
        tail_start = self._tail_start(units)
        # Content older than twice the goal cannot survive; drop it first so pruning stays O(window).
        start = 0
        window_left = usage
        while start < tail_start and window_left > _PRE_CUT_FACTOR * max(goal, 1):
            if units[start] not in mandatory:
                window_left -= unit_tokens[units[start]]
            start += 1
        start = self._align_to_receipt(units, start)
        usage -= sum(unit_tokens[units[i]] for i in range(start) if units[i] not in mandatory)
        gates: dict[str, int] = {}
        trimmed_ids: list[str] = []
        receipt_ids: list[str] = []
        region = [
            root for root in units[start:tail_start] if root not in mandatory and root not in self.receipt_of
        ]
        need = usage - goal
        if self.pruning.enabled and need > 0 and region:
            verdicts = self._verdicts(region, units, tail_start, gates)
            saved = self._layer1(region, verdicts=verdicts, need=need, gates=gates, trimmed_ids=trimmed_ids)
            if self.pruning.receipts and need - saved > 0:
                saved += self._layer2(
                    region,
                    units=units,
                    verdicts=verdicts,
                    need=need - saved,
                    gates=gates,
                    receipt_ids=receipt_ids,
                    compaction_id=compaction_id,
                )
            usage -= saved
        # Advance the cut: oldest non-mandatory units first, whole receipts at a time. The recent tail is
        # entered only when the hard limit demands it, and only after the supplements are gone.
        position = start
        dropped = jumped + sum(
            len(self.index.unit_members(units[i])) for i in range(start) if units[i] not in mandatory
        )
        while position < len(units):
            if position >= start:
                if position < tail_start and usage <= goal:
                    break
                if position >= tail_start:
                    if usage <= budget.hard_limit:
                        break
                    if supplements:
                        usage, supplements = self._drop_supplements(usage, supplements)
                        continue
            root = units[position]
            key = self.receipt_of.get(root)
            span = len(self.receipts[key].roots) if key is not None and key == root else 1
            for member in units[position : position + span]:
                if member not in mandatory:
                    usage -= unit_tokens[member]
                    dropped += len(self.index.unit_members(member))
            position += span
        if usage > budget.hard_limit and supplements:
            usage, supplements = self._drop_supplements(usage, supplements)
        kept = units[position:]
        new_cut = kept[0] if kept else self.n
        # Mandatory units passed by the cut stay in the plan (emitted in front of the window).
        self.cut = max(self.cut, new_cut)
        self.trims = {p: t for p, t in self.trims.items() if p >= self.cut}
        self.receipts = {k: r for k, r in self.receipts.items() if k >= self.cut}
        self.receipt_of = {root: k for root, k in self.receipt_of.items() if k >= self.cut}
        self.compaction = CompactionReport(
            compaction_id=compaction_id,
            dry_run=self.pruning.dry_run,
            tokens_before=before,
            tokens_after=usage,
            goal_tokens=goal,
            trimmed_message_ids=tuple(trimmed_ids[:_MAX_LISTED_IDS]),
            receipt_ids=tuple(receipt_ids),
            dropped_messages=dropped,
            dropped_supplements=tuple(self._dropped_supplements),
            gate_exclusions=tuple(GateCount(gate=gate, count=count) for gate, count in sorted(gates.items())),
        )
        return usage, kept, supplements

    def _drop_supplements(
        self, usage: int, supplements: list[tuple[int, str, CanonicalMessage, int, SupplementalItem]]
    ) -> tuple[int, list[tuple[int, str, CanonicalMessage, int, SupplementalItem]]]:
        kept = list(supplements)
        while kept and usage > self.budget.hard_limit:
            _, _, message, tokens, _ = kept.pop()  # lowest priority is last
            usage -= tokens
            self._dropped_supplements.append(message.id)
            self.exclusions.append(
                PlanExclusion(
                    reason="supplement-over-budget", count=1, tokens=tokens, message_ids=(message.id,)
                )
            )
        return usage, kept

    def _align_to_receipt(self, units: list[int], start: int) -> int:
        # A cut never splits a receipt: move it past the receipt's last unit.
        while 0 < start < len(units):
            key = self.receipt_of.get(units[start])
            if key is None or key == units[start]:
                return start
            start += 1
        return start

    def _tail_start(self, units: list[int]) -> int:
        unit_tokens = self.unit_tokens
        ceiling = self.budget.recent_tail_ceiling
        total = 0
        start = len(units)
        while start > 0:
            tokens = unit_tokens[units[start - 1]]
            if start < len(units) and total + tokens > ceiling:
                break
            total += tokens
            start -= 1
        return self._align_to_receipt(units, start)

    def _result_positions(self, region: list[int]) -> list[int]:
        index = self.index
        view = index.view
        found = []
        for root in region:
            for position in index.unit_members(root):
                if ToolResultBlock in map(type, view[position].blocks):
                    found.append(position)
        return found

    def _path_touches(self, start: int) -> dict[str, dict[str, int]]:
        """path -> normalised tool name -> last position of a call on that path, from ``start`` on."""
        index = self.index
        parent, view = index.parent, index.view
        norm = _NameCache()
        touches: dict[str, dict[str, int]] = {}
        for position in range(max(0, start - 1), self.n):
            if parent[position] < 0:
                continue
            for block in view[position].blocks:
                if type(block) is ToolCallBlock:
                    path = call_path(block)
                    if path is not None:
                        touches.setdefault(path, {})[norm(block.name)] = position
        return touches

    def _verdicts(  # noqa: PLR0915 - one pass per candidate, the common single-result message inline
        self, region: list[int], units: list[int], tail_start: int, gates: dict[str, int]
    ) -> _Verdicts:
        index = self.index
        pruning = self.pruning
        read_only = frozenset(_norm(name) for name in pruning.read_only_tools)
        write = frozenset(_norm(name) for name in pruning.write_tools)
        positions = self._result_positions(region)
        # preserve_recent protects the newest results even when the recent tail is configured tiny.
        tail_results = len(self._result_positions(units[tail_start:]))
        protected = max(0, pruning.preserve_recent - tail_results)
        if protected:
            gates["recent"] = gates.get("recent", 0) + min(protected, len(positions))
            positions = positions[: max(0, len(positions) - protected)]
        touches = self._path_touches(positions[0] if positions else self.n)
        candidates: list[JudgeCandidate] = []
        view, callers, cache = index.view, index.callers, index.evidence
        words = evidence_words(pruning.evidence_words) if positions else ()
        last = self.n - 1
        judge = self.judge
        # The default judge is pure and evidence only raises its keep: scan on demand (see _Verdicts).
        deferring = type(judge) is DefaultJudge
        pending: dict[int, JudgeCandidate] = {}
        for position in positions:
            message = view[position]
            blocks = message.blocks
            if len(blocks) == 1:  # the usual result message: one result block
                first = blocks[0]
                content = first.content  # type: ignore[union-attr]
                if type(content) is not str:
                    content = "\n".join([content])  # what joining one block gives, or its error
                is_error = bool(first.is_error)  # type: ignore[union-attr]
            else:
                results = [block for block in blocks if type(block) is ToolResultBlock]
                first = results[0]
                content = "\n".join([block.content for block in results])
                is_error = any(block.is_error for block in results)
            call_id = first.tool_call_id  # type: ignore[union-attr]
            call_position = callers.get(call_id, position)
            call = index.call_block(call_id)
            evidence = cache.get(position)
            unknown = evidence is None and deferring
            if evidence is None and not deferring:
                evidence = scan_evidence(content, words)
                cache[position] = evidence
            later_reread = later_edited = False
            if call is not None:
                path = call_path(call)
                later = touches.get(path) if path is not None else None
                if later:
                    for name, at in later.items():
                        if at > call_position:
                            later_reread = later_reread or name in read_only
                            later_edited = later_edited or name in write
            candidates.append(
                JudgeCandidate(
                    message_id=message.id,
                    tool_call_id=call_id,
                    tool_name=first.tool_name,  # type: ignore[union-attr]
                    arguments=dict(call.arguments)
                    if call is not None and isinstance(call.arguments, dict)
                    else {},
                    content=content,
                    is_error=is_error,
                    messages_after=last - position,
                    later_reread=later_reread,
                    later_edited=later_edited,
                    has_evidence=bool(evidence),
                )
            )
            if unknown:
                pending[position] = candidates[-1]
        goal = "".join(
            block.text
            for block in index.view[index.current_request() or 0].blocks
            if type(block) is TextBlock
        )
        if pending:
            assert type(judge) is DefaultJudge  # only the default judge leaves scans pending
            bounds: list[Verdict] | None
            try:
                bounds = [judge._one(candidate) for candidate in candidates]
            except Exception:  # a candidate it cannot judge: the eager path fails as it always did
                bounds = None
            if bounds is not None:
                return _Verdicts(dict(zip(positions, bounds, strict=True)), pending, judge, cache, words)
            for number, position in enumerate(positions):
                if position in pending:
                    evidence = scan_evidence(candidates[number].content, words)
                    cache[position] = evidence
                    candidates[number] = msgspec.structs.replace(candidates[number], has_evidence=evidence)
        verdicts: Sequence[Verdict] | None = None
        if judge is not None:
            try:
                verdicts = judge.judge(candidates, goal=goal)
                if len(verdicts) != len(candidates) or not all(
                    type(v) is Verdict
                    and 0.0 <= v.keep_probability <= 1.0
                    and 0.0 <= v.side_effect_probability <= 1.0
                    for v in verdicts
                ):
                    raise ValueError("malformed verdicts")
            except Exception as error:
                self.diagnostics.append(
                    PlanDiagnostic(code="judge-failed", detail=f"{type(error).__name__}; default judge used")
                )
                verdicts = None
        if verdicts is None:
            verdicts = DefaultJudge(read_only_tools=read_only, write_tools=write).judge(candidates, goal=goal)
        return _Verdicts(dict(zip(positions, verdicts, strict=True)))

    def _layer1(  # noqa: PLR0915 - the gates and the lowest-keep-first walk read best together
        self,
        region: list[int],
        *,
        verdicts: _Verdicts,
        need: int,
        gates: dict[str, int],
        trimmed_ids: list[str],
    ) -> int:
        pruning = self.pruning
        index = self.index
        never = frozenset(_norm(name) for name in pruning.never_prune_tools)
        norm = _NameCache()
        view, trims = index.view, self.trims
        eligible: list[tuple[float, int]] = []
        for position, verdict in verdicts.bounds.items():
            if position in trims:
                continue
            blocks = view[position].blocks
            if len(blocks) == 1:  # the usual result message: one result block
                block = blocks[0]
                never_prune = norm(block.tool_name) in never  # type: ignore[union-attr]
                size = len(block.content)  # type: ignore[union-attr]
            else:
                results = [block for block in blocks if type(block) is ToolResultBlock]
                never_prune = any(norm(block.tool_name) in never for block in results)
                size = -1 if never_prune else sum(len(block.content) for block in results)
            if never_prune:
                gates["never-prune"] = gates.get("never-prune", 0) + 1
                continue
            if size < pruning.min_chars_to_prune:
                gates["too-small"] = gates.get("too-small", 0) + 1
                continue
            eligible.append((verdict.keep_probability, position))
        sparse = len(eligible) < pruning.sparse_candidate_count
        limit = pruning.sparse_keep_floor if sparse else pruning.protect_keep_probability
        saved = 0
        # Lowest keep first, as sorting would give; a pending bound is settled when it comes up and
        # goes back in if evidence raised it.
        heapq.heapify(eligible)
        while eligible:
            if saved >= need:
                break
            keep, position = eligible[0]
            if keep >= limit:  # so is every keep left: all of them are protected
                gates["protected"] = gates.get("protected", 0) + len(eligible)
                break
            heapq.heappop(eligible)
            if not verdicts.settled(position):
                settled = verdicts.settle(position).keep_probability
                if settled != keep:
                    heapq.heappush(eligible, (settled, position))
                    continue
            replaced = _replace_text_blocks(index.view[position], pruning)
            if replaced is None:
                gates["low-gain"] = gates.get("low-gain", 0) + 1
                continue
            message, _ = replaced
            tokens = self.estimator(message)
            gain = index.tokens[position] - tokens
            if gain <= 0:
                gates["low-gain"] = gates.get("low-gain", 0) + 1
                continue
            trimmed_ids.append(message.id)
            saved += gain
            if not pruning.dry_run:
                self.trims[position] = _Trim(position=position, message=message, tokens=tokens, score=keep)
                self.unit_tokens[index.unit_of(position)] -= gain
        return 0 if pruning.dry_run else saved

    def _layer2(  # noqa: PLR0915 - the gates read best in one place, in the reference's order
        self,
        region: list[int],
        *,
        units: list[int],
        verdicts: _Verdicts,
        need: int,
        gates: dict[str, int],
        receipt_ids: list[str],
        compaction_id: str,
    ) -> int:
        pruning = self.pruning
        index = self.index
        final = verdicts.final()
        read_only = frozenset(_norm(name) for name in pruning.read_only_tools)
        keeps: dict[int, float] = {}
        for root in region:
            if index.parent[root] != root:
                continue  # not a tool unit
            members = index.unit_members(root)
            calls = [b for p in members for b in index.view[p].blocks if type(b) is ToolCallBlock]
            if not calls or any(_norm(call.name) not in read_only for call in calls):
                gates["not-read-only"] = gates.get("not-read-only", 0) + 1
                continue
            text = sum(
                len(b.text)
                for p in members
                for b in index.view[p].blocks
                if type(b) is TextBlock and index.view[p].role == "assistant"
            )
            thinking = sum(
                len(b.thinking) for p in members for b in index.view[p].blocks if type(b) is ThinkingBlock
            )
            if text > pruning.receipt_max_assistant_chars:
                gates["assistant-text-too-long"] = gates.get("assistant-text-too-long", 0) + 1
                continue
            if thinking > pruning.receipt_max_reasoning_chars:
                gates["reasoning-too-long"] = gates.get("reasoning-too-long", 0) + 1
                continue
            unit_verdicts = [final[p] for p in members if p in final]
            if len(unit_verdicts) != sum(
                1 for p in members if any(type(b) is ToolResultBlock for b in index.view[p].blocks)
            ):
                gates["recent"] = gates.get("recent", 0) + 1
                continue
            if any(index.evidence.get(p, False) for p in members if p in final) or any(
                v.reason == "evidence" for v in unit_verdicts
            ):
                gates["evidence"] = gates.get("evidence", 0) + 1
                continue
            if max(v.side_effect_probability for v in unit_verdicts) > pruning.receipt_max_side_effect:
                gates["side-effect"] = gates.get("side-effect", 0) + 1
                continue
            keeps[root] = max(v.keep_probability for v in unit_verdicts)
        if not keeps:
            return 0
        ordered = sorted(keeps.values())
        threshold = ordered[int(pruning.receipt_keep_quantile * (len(ordered) - 1))]
        chosen = {root for root, keep in keeps.items() if keep <= threshold}
        gates["keep-above-quantile"] = gates.get("keep-above-quantile", 0) + len(keeps) - len(chosen)
        # Adjacent eligible units merge into one range; ranges hold whole units, so cuts are balanced.
        ranges: list[list[int]] = []
        previous_index = -2
        position_in_units = {root: i for i, root in enumerate(units)}
        for root in region:
            if root not in chosen:
                continue
            where = position_in_units[root]
            if ranges and where == previous_index + 1:
                ranges[-1].append(root)
            else:
                ranges.append([root])
            previous_index = where
        saved = 0
        made = 0
        for roots in ranges:
            if saved >= need:
                break
            if made >= pruning.receipt_max_per_pass:
                gates["max-per-pass"] = gates.get("max-per-pass", 0) + 1
                continue
            positions = tuple(p for root in roots for p in index.unit_members(root))
            chars = sum(
                len(b.content) for p in positions for b in index.view[p].blocks if type(b) is ToolResultBlock
            )
            if chars < pruning.receipt_min_range_chars:
                gates["range-too-small"] = gates.get("range-too-small", 0) + 1
                continue
            receipt = self._receipt(roots, positions, compaction_id)
            span_tokens = sum(self.unit_tokens[root] for root in roots)
            if receipt.tokens > pruning.receipt_max_ratio * span_tokens:
                gates["receipt-too-large"] = gates.get("receipt-too-large", 0) + 1
                continue
            made += 1
            saved += span_tokens - receipt.tokens
            receipt_ids.append(receipt.message.id)
            if not pruning.dry_run:
                self.receipts[roots[0]] = receipt
                for root in roots:
                    self.receipt_of[root] = roots[0]
                    self.unit_tokens[root] = receipt.tokens if root == roots[0] else 0
                for position in positions:
                    self.trims.pop(position, None)
        return 0 if pruning.dry_run else saved

    def _receipt(self, roots: list[int], positions: tuple[int, ...], compaction_id: str) -> _Receipt:
        index = self.index
        source = self.messages
        original_ids = tuple(source[p].id for p in positions)
        receipt_id = "ds4-receipt:" + _hash16(*original_ids)
        calls: list[ReceiptCall] = []
        notes: list[str] = []
        outputs: dict[str, tuple[int, bool]] = {}
        for position in positions:
            for block in index.view[position].blocks:
                if type(block) is ToolResultBlock:
                    chars, error = outputs.get(block.tool_call_id, (0, False))
                    outputs[block.tool_call_id] = (chars + len(block.content), error or block.is_error)
        for position in positions:
            message = index.view[position]
            for block in message.blocks:
                if type(block) is ToolCallBlock:
                    chars, error = outputs.get(block.id, (0, False))
                    arguments = block.arguments if isinstance(block.arguments, dict) else {}
                    calls.append(
                        ReceiptCall(
                            tool_name=block.name, arguments=arguments, output_chars=chars, is_error=error
                        )
                    )
                elif type(block) is TextBlock and message.role == "assistant":
                    notes.append(block.text)
        text = build_receipt_text(
            receipt_id=receipt_id,
            first_message_id=original_ids[0],
            last_message_id=original_ids[-1],
            message_count=len(positions),
            calls=calls,
            assistant_notes=" ".join(notes),
            note_chars=self.pruning.receipt_note_chars,
        )
        first = source[positions[0]]
        message = CanonicalMessage(
            id=receipt_id,
            source_entry_id=receipt_id,
            role="assistant",
            blocks=(TextBlock(text=text),),
            provenance=Provenance(
                source=first.provenance.source,
                session_id=first.provenance.session_id,
                entry_id=receipt_id,
                runtime_id=first.provenance.runtime_id,
            ),
            # A receipt of anything local-only stays local-only: privacy markers never downgrade.
            flags=MessageFlags(
                synthetic=True,
                local_only=True if any(source[p].flags.local_only for p in positions) else None,
            ),
        )
        return _Receipt(
            roots=tuple(roots),
            positions=positions,
            message=message,
            tokens=self.estimator(message),
            original_tokens=sum(index.tokens[p] for p in positions),
            compaction_id=compaction_id,
        )

    # -- output ----------------------------------------------------------------------------------

    def _emit(  # noqa: PLR0915 - one ordered pass over the output
        self,
        units: list[int],
        mandatory: dict[int, tuple[str, str, int]],
        supplements: list[tuple[int, str, CanonicalMessage, int, SupplementalItem]],
        stragglers: list[int],
    ) -> tuple[
        list[tuple[CanonicalMessage, PlanItem]], dict[str, tuple[CanonicalMessage, ...]], int, int, int, int
    ]:
        index = self.index
        source = self.messages
        out: list[tuple[CanonicalMessage, PlanItem]] = []
        restore_map: dict[str, tuple[CanonicalMessage, ...]] = {}
        current = index.current_request()
        front = [entry for entry in supplements if entry[4].kind in _FRONT_KINDS]
        back = [entry for entry in supplements if entry[4].kind not in _FRONT_KINDS]
        supplement_tokens = 0
        for priority, _, message, tokens, item in front:
            out.append((message, self._supplement_item(message, item, tokens, priority)))
            supplement_tokens += tokens
        mandatory_tokens = 0
        history_tokens = 0
        tail_start_root = self.tail_root
        user_positions = index.user_positions
        pointer = -2  # index into user_positions of the turn of the last position asked about

        def turn_of(position: int) -> str | None:
            # Positions arrive almost always in ascending order: walk forward, bisect otherwise.
            nonlocal pointer
            if pointer == -2 or (pointer >= 0 and user_positions[pointer] > position):
                pointer = bisect.bisect_right(user_positions, position) - 1
            else:
                while pointer + 1 < len(user_positions) and user_positions[pointer + 1] <= position:
                    pointer += 1
            return source[user_positions[pointer]].id if pointer >= 0 else None

        def emit_unit(root: int, reason_kind: tuple[str, str, int] | None) -> None:
            nonlocal mandatory_tokens, history_tokens, supplement_tokens
            if root == current:
                for priority, _, message, tokens, item in back:
                    out.append((message, self._supplement_item(message, item, tokens, priority)))
                    supplement_tokens += tokens
            key = self.receipt_of.get(root)
            if key is not None and reason_kind is None:
                if key != root:
                    return
                receipt = self.receipts[key]
                originals = tuple(source[p] for p in receipt.positions)
                restore_map[receipt.message.id] = originals
                for original in originals:
                    restore_map[original.id] = (original,)
                out.append(
                    (
                        receipt.message,
                        PlanItem(
                            message_id=receipt.message.id,
                            kind="receipt",
                            reason="layer-2-receipt",
                            tokens=receipt.tokens,
                            priority=PRIORITY_RECENT_TURN,
                            original_index=receipt.positions[0],
                            source_ids=tuple(o.id for o in originals),
                        ),
                    )
                )
                history_tokens += receipt.tokens
                return
            group_id = index.group_id(root)
            for position in index.unit_members(root):
                trim = self.trims.get(position) if reason_kind is None else None
                if trim is not None:
                    message, tokens = trim.message, trim.tokens
                    kind, reason, priority, score = (
                        "trimmed-tool-result",
                        "layer-1-trimmed",
                        PRIORITY_RECENT_TURN,
                        trim.score,
                    )
                    restore_map[message.id] = (source[position],)
                elif reason_kind is not None:
                    message, tokens = index.view[position], index.token(position)
                    kind, reason, priority = reason_kind
                    if kind == "current-request" and position != current:
                        kind = "message"
                    score = None
                else:
                    message, tokens = index.view[position], index.token(position)
                    kind, priority, score = "message", PRIORITY_RECENT_TURN, None
                    reason = "recent-tail" if root >= tail_start_root else "retained-history"
                if reason_kind is not None:
                    mandatory_tokens += tokens
                else:
                    history_tokens += tokens
                out.append(
                    (
                        message,
                        PlanItem(
                            message_id=message.id,
                            kind=kind,
                            reason=reason,
                            tokens=tokens,
                            priority=priority,
                            original_index=position,
                            group_id=group_id,
                            turn_id=turn_of(position),
                            score=score,
                        ),
                    )
                )

        for root in sorted(root for root in mandatory if root < self.cut):
            emit_unit(root, mandatory[root])
        view, token_list, parent = index.view, index.tokens, index.parent
        receipt_of, trims, members_of = self.receipt_of, self.trims, index.unit_members
        for root in units:
            if parent[root] >= 0 and root not in mandatory and root not in receipt_of:
                group = members_of(root)
                if not trims or trims.keys().isdisjoint(group):
                    # The common tool step, kept inline: a call and its results, untouched.
                    group_id = index.group_id(root)
                    for position in group:
                        message, tokens = view[position], token_list[position]
                        history_tokens += tokens
                        step = PlanItem(
                            message_id=message.id,
                            kind="message",
                            reason="recent-tail" if root >= tail_start_root else "retained-history",
                            tokens=tokens,
                            priority=PRIORITY_RECENT_TURN,
                            original_index=position,
                            group_id=group_id,
                            turn_id=turn_of(position),
                        )
                        out.append((message, step))
                    continue
            if parent[root] < 0 and root not in mandatory and root not in receipt_of:
                # The common case, kept inline: a plain message inside the window.
                message, tokens = view[root], token_list[root]
                history_tokens += tokens
                reason = "recent-tail" if root >= tail_start_root else "retained-history"
                plain = PlanItem(
                    message_id=message.id,
                    kind="message",
                    reason=reason,
                    tokens=tokens,
                    priority=PRIORITY_RECENT_TURN,
                    original_index=root,
                    turn_id=turn_of(root),
                )
                out.append((message, plain))
                continue
            emit_unit(root, mandatory.get(root))
        self._record_exclusions(mandatory, stragglers)
        return out, restore_map, mandatory_tokens, supplement_tokens, history_tokens, len(units)

    @staticmethod
    def _supplement_item(
        message: CanonicalMessage, item: SupplementalItem, tokens: int, priority: int
    ) -> PlanItem:
        return PlanItem(
            message_id=message.id,
            kind=item.kind,
            reason="supplement-priority",
            tokens=tokens,
            priority=priority,
            source_ids=item.source_ids,
        )

    def _record_exclusions(self, mandatory: dict[int, tuple[str, str, int]], stragglers: list[int]) -> None:
        index = self.index
        source = self.messages
        cut = self.cut
        by_reason: dict[str, list[int]] = {}
        for root in sorted(index.incomplete):
            by_reason.setdefault(index.incomplete[root], []).extend(index.unit_members(root))
        incomplete_before = 0
        incomplete_before_tokens = 0
        for reason in sorted(by_reason):
            positions = by_reason[reason]
            for position in positions:
                if position < cut:
                    incomplete_before += 1
                    incomplete_before_tokens += index.token(position)
            self.exclusions.append(
                PlanExclusion(
                    reason=reason,
                    count=len(positions),
                    tokens=sum(index.token(p) for p in positions),
                    message_ids=tuple(source[p].id for p in positions[:_MAX_LISTED_IDS]),
                )
            )
        if cut > 0:
            kept_before = [p for root in mandatory if root < cut for p in index.unit_members(root) if p < cut]
            incomplete_stragglers = [p for p in stragglers if index.find(p) in index.incomplete]
            count = cut - len(kept_before) - incomplete_before + len(stragglers) - len(incomplete_stragglers)
            tokens = (
                -sum(index.token(p) for p in kept_before)
                - incomplete_before_tokens
                + sum(index.token(p) for p in stragglers)
                - sum(index.token(p) for p in incomplete_stragglers)
            )
            if count > 0:
                skip = set(kept_before)
                first = next((p for p in range(cut) if p not in skip), 0)
                last = next((p for p in range(cut - 1, -1, -1) if p not in skip), cut - 1)
                # The prefix sum up to the cut is added when the manifest is read (always last).
                self.before_cut = (count, tokens, source[first].id, source[last].id)


def _shared_prefix(
    previous: tuple[CanonicalMessage, ...], current: list[tuple[CanonicalMessage, PlanItem]]
) -> tuple[int, int]:
    shared = 0
    tokens = 0
    for old, (new, item) in zip(previous, current, strict=False):
        if old is not new and old != new:
            break
        shared += 1
        tokens += item.tokens
    return shared, tokens


def plan_context(
    history: RuntimeHistorySnapshot | Sequence[CanonicalMessage],
    *,
    model: ModelDescriptor,
    fixed_tokens: int = 0,
    config: Ds4ContextConfig | Mapping[str, Any] | None = None,
    state: PlanState | None = None,
    pins: Iterable[str] = (),
    supplemental: Iterable[SupplementalItem] = (),
    estimator: TokenEstimator | None = None,
    sanitizer: MessageSanitizer | None = None,
    judge: Judge | None = None,
    calibration_ratio: float | None = None,
) -> ContextPlan:
    """Plan the context of one model call. Never raises: problems give a fallback plan with a code."""
    loaded = _DEFAULT_CONFIG if config is None else load_config(config)
    resolved: Ds4ContextConfig = loaded.config
    diagnostics = [
        PlanDiagnostic(code="config-warning", detail=f"{warning.code} at {warning.path}")
        for warning in loaded.warnings
    ]
    use_estimator: TokenEstimator = estimator if estimator is not None else fast_chars_v1
    index: HistoryIndex | None = None
    messages: tuple[Any, ...] = ()
    try:
        messages = _as_messages(history)
        prior = state._index if isinstance(state, PlanState) else None
        lock = prior.lock if prior is not None else contextlib.nullcontext()
        with lock:
            try:
                index = sync_index(prior, messages, use_estimator, sanitizer)
            except HistoryIndexError as problem:
                mode = (
                    FALLBACK_MODE_BLOCKED
                    if problem.code == "privacy-sanitizer-failed"
                    else FALLBACK_MODE_NATIVE
                )
                raise _FallbackError(problem.code, problem.detail, mode) from None
            return _plan_indexed(
                index,
                messages,
                model=model,
                fixed_tokens=fixed_tokens,
                config=resolved,
                state=state,
                pins=pins,
                supplemental=supplemental,
                estimator=use_estimator,
                judge=judge,
                calibration_ratio=calibration_ratio,
                diagnostics=diagnostics,
            )
    except _FallbackError as failure:
        return _fallback_plan(
            failure,
            index,
            messages=messages,
            model=model,
            fixed_tokens=fixed_tokens,
            state=state,
            diagnostics=diagnostics,
        )
    except Exception as error:
        return _fallback_plan(
            _FallbackError("planner-error", type(error).__name__),
            index,
            messages=messages,
            model=model,
            fixed_tokens=fixed_tokens,
            state=state,
            diagnostics=diagnostics,
        )


def _plan_indexed(
    index: HistoryIndex,
    messages: tuple[CanonicalMessage, ...],
    *,
    model: object,
    fixed_tokens: object,
    config: Ds4ContextConfig,
    state: PlanState | None,
    pins: Iterable[str],
    supplemental: Iterable[SupplementalItem],
    estimator: TokenEstimator,
    judge: Judge | None,
    calibration_ratio: float | None,
    diagnostics: list[PlanDiagnostic],
) -> ContextPlan:
    try:
        budget = compute_budget(model, fixed_tokens, config.budget, config.planner, calibration_ratio)
    except BudgetError as problem:
        raise _FallbackError(problem.code, problem.detail) from None
    if index.duplicate_id is not None:
        raise _FallbackError("history-message-id-duplicate", "two canonical messages share one id")
    if judge is None:
        judge = DefaultJudge(
            read_only_tools=config.pruning.read_only_tools, write_tools=config.pruning.write_tools
        )
    run = _Run(
        index=index,
        messages=messages,
        budget=budget,
        config=config,
        state=state if isinstance(state, PlanState) else None,
        pins=pins,
        supplemental=supplemental,
        estimator=estimator,
        judge=judge,
        diagnostics=diagnostics,
    )
    out, restore_map, mandatory_tokens, supplement_tokens, history_tokens, _ = run.run()
    plan_messages = tuple(message for message, _ in out)
    items = tuple(item for _, item in out)
    total = budget.fixed_tokens + mandatory_tokens + supplement_tokens + history_tokens
    broken = atomicity_problem(plan_messages)
    if broken is not None:
        raise _FallbackError("plan-validation-failed", broken)
    current = index.current_request()
    if current is None or not any(
        message is index.view[current] for message in plan_messages[-len(plan_messages) :]
    ):
        raise _FallbackError("plan-validation-failed", "the current request is missing from the plan")
    if total > budget.hard_limit:
        raise _FallbackError("hard-limit-exceeded", "the plan exceeds the hard limit")
    previous_messages = run.previous._previous_messages if run.previous is not None else ()
    shared_messages, shared_tokens = _shared_prefix(previous_messages, out)
    receipts = tuple(
        ReceiptRecord(
            receipt_id=receipt.message.id,
            compaction_id=receipt.compaction_id,
            original_message_ids=tuple(messages[p].id for p in receipt.positions),
            original_tokens=receipt.original_tokens,
            receipt_tokens=receipt.tokens,
        )
        for _, receipt in sorted(run.receipts.items())
    )
    partial = PlanManifest(
        contract_version=PLAN_CONTRACT_VERSION,
        history_messages=len(messages),
        included_messages=sum(1 for item in items if item.original_index is not None),
        native_tokens=0,
        planned_tokens=total,
        saved_tokens=0,
        shared_prefix_messages=shared_messages,
        shared_prefix_tokens=shared_tokens,
        exclusions=tuple(run.exclusions),
        receipts=receipts,
        compaction=run.compaction,
        diagnostics=tuple(diagnostics[:_MAX_DIAGNOSTICS]),
    )
    finish = _ManifestCompletion(
        partial,
        index,
        size=len(messages),
        fixed=budget.fixed_tokens,
        cut=run.cut,
        skipped=run.skipped_span,
        before_cut=run.before_cut,
    )
    # With every estimate already known the manifest costs nothing more: complete it now.
    manifest: PlanManifest | _ManifestCompletion = finish() if index.known_from == 0 else finish
    budget = msgspec.structs.replace(
        budget,
        mandatory_tokens=mandatory_tokens,
        supplemental_tokens=supplement_tokens,
        history_tokens=history_tokens,
        total_tokens=total,
    )
    new_state = PlanState(
        index=index,
        source=messages,
        cut=run.cut,
        trims=run.trims,
        receipts=run.receipts,
        compactions=run.compactions,
        previous_messages=plan_messages,
        estimator=estimator,
    )
    return ContextPlan(
        messages=plan_messages,
        items=items,
        budget=budget,
        manifest=manifest,
        state=new_state,
        _restore=restore_map,
        _source=messages,
        _positions=index.position_of,
    )


def _safe_as_is(messages: tuple[Any, ...]) -> bool:
    """Whether the history may go to the provider as it is: canonical messages, no split tool group."""
    try:
        return all(type(m) is CanonicalMessage for m in messages) and atomicity_problem(messages) is None
    except Exception:  # a message whose fields are not what its type says: not safe as it is
        return False


def _fallback_plan(
    failure: _FallbackError,
    index: HistoryIndex | None,
    *,
    messages: tuple[Any, ...],
    model: object,
    fixed_tokens: object,
    state: PlanState | None,
    diagnostics: list[PlanDiagnostic],
) -> ContextPlan:
    """Fail open to the native context (complete tool groups only), or closed when privacy failed."""
    out: list[CanonicalMessage] = []
    items: list[PlanItem] = []
    if index is not None and failure.mode == FALLBACK_MODE_NATIVE and index.duplicate_id is None:
        try:
            index.ensure_known(0)
        except Exception:  # an estimate that fails: as if indexing had failed, as it would have eagerly
            index = None
    if failure.mode == FALLBACK_MODE_NATIVE and index is not None and index.duplicate_id is None:
        for position, message in enumerate(index.view):
            root = index.unit_of(position)
            if root in index.incomplete:
                continue
            out.append(message)
            items.append(
                PlanItem(
                    message_id=message.id,
                    kind="message",
                    reason="native-fallback",
                    tokens=index.token(position),
                    priority=PRIORITY_RECENT_TURN,
                    original_index=position,
                    group_id=index.group_id(root),
                    turn_id=index.turn_id(position),
                )
            )
    elif failure.mode == FALLBACK_MODE_NATIVE and _safe_as_is(messages):
        for position, message in enumerate(messages):
            out.append(message)
            items.append(
                PlanItem(
                    message_id=message.id,
                    kind="message",
                    reason="native-fallback",
                    tokens=0,
                    priority=PRIORITY_RECENT_TURN,
                    original_index=position,
                )
            )
    history_tokens = sum(item.tokens for item in items)
    fixed = fixed_tokens if type(fixed_tokens) is int and fixed_tokens >= 0 else 0
    budget = msgspec.structs.replace(
        _empty_budget(model, fixed_tokens), history_tokens=history_tokens, total_tokens=fixed + history_tokens
    )
    source = tuple(m for m in messages if type(m) is CanonicalMessage) if index is None else index.source
    manifest = PlanManifest(
        contract_version=PLAN_CONTRACT_VERSION,
        history_messages=len(messages),
        included_messages=len(out),
        native_tokens=fixed + history_tokens,
        planned_tokens=fixed + history_tokens,
        saved_tokens=0,
        shared_prefix_messages=0,
        shared_prefix_tokens=0,
        diagnostics=tuple(diagnostics[:_MAX_DIAGNOSTICS]),
        fallback=PlanFallback(mode=failure.mode, code=failure.code, detail=failure.detail[:200]),
    )
    kept_state = state if isinstance(state, PlanState) else PlanState(index=index)
    return ContextPlan(
        messages=tuple(out),
        items=tuple(items),
        budget=budget,
        manifest=manifest,
        state=kept_state,
        _source=source,
        _positions=index.position_of
        if index is not None
        else {m.id: i for i, m in enumerate(source) if type(m.id) is str},  # restore looks up str ids
    )


class ContextPlanner:
    """A reusable planner that carries its own :class:`PlanState` from one call to the next.

    Use one planner per conversation (branch). Calls on one planner are meant to be sequential, as the
    turns of a conversation are; the state it hands from call to call is safe to share across threads.
    """

    def __init__(
        self,
        *,
        config: Ds4ContextConfig | Mapping[str, Any] | None = None,
        estimator: TokenEstimator | None = None,
        sanitizer: MessageSanitizer | None = None,
        judge: Judge | None = None,
    ) -> None:
        loaded = load_config(config)
        self._config: Ds4ContextConfig = loaded.config
        self.config_warnings = loaded.warnings
        self._estimator = estimator
        self._sanitizer = sanitizer
        self._judge = judge
        self._state: PlanState | None = None

    @property
    def config(self) -> Ds4ContextConfig:
        return self._config

    @property
    def state(self) -> PlanState | None:
        return self._state

    def reset(self) -> None:
        """Forget sticky decisions (for example after the host switched branches)."""
        self._state = None

    def plan(
        self,
        history: RuntimeHistorySnapshot | Sequence[CanonicalMessage],
        *,
        model: ModelDescriptor,
        fixed_tokens: int = 0,
        pins: Iterable[str] = (),
        supplemental: Iterable[SupplementalItem] = (),
        calibration_ratio: float | None = None,
    ) -> ContextPlan:
        plan = plan_context(
            history,
            model=model,
            fixed_tokens=fixed_tokens,
            config=self._config,
            state=self._state,
            pins=pins,
            supplemental=supplemental,
            estimator=self._estimator,
            sanitizer=self._sanitizer,
            judge=self._judge,
            calibration_ratio=calibration_ratio,
        )
        self._state = plan.state
        return plan
