"""The decisions record: what the stages of one plan decide, handed from stage to stage.

A plan runs as a pipeline over one :class:`Decisions` value (see ``_engine.plan_indexed``):

- the *sticky* decisions a plan hands to the next through :class:`~._state.PlanState`: the cut (every
  message before it is out, except mandatory items), the layer-1 trims and the layer-2 receipts;
- what this plan derives from them: the token cost of every unit in the window, where the recent tail
  starts, the exclusions and the compaction report that end up in the manifest.

The inputs every stage reads are in :class:`PlanInputs`; the window the compaction works on is a
:class:`Window`. All are structs with named fields: no stage hands another a tuple to unpack. They are
msgspec structs, not slots dataclasses: creating the nine dataclasses cost 7 ms of every command line's
start (each one runs exec for its generated methods), the structs a few microseconds each.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from ds4_context_core._history._model import CanonicalMessage

from ._digest import TaskDigestBuilder
from ._index import HistoryIndex, TokenEstimator
from ._pruning import Judge
from ._types import (
    FALLBACK_MODE_NATIVE,
    CompactionReport,
    PlanBudget,
    PlanDiagnostic,
    PlanExclusion,
    SupplementalItem,
)

if TYPE_CHECKING:
    # the defaults of a plan without a configuration are plain structs of the same shape (_config_defaults)
    from ds4_context_core.config import Ds4ContextConfig, PruningConfig


class FallbackError(Exception):
    """Internal: a stage cannot build a normal plan; carries the fallback code and mode."""

    def __init__(self, code: str, detail: str, mode: str = FALLBACK_MODE_NATIVE) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.mode = mode


class Trim(msgspec.Struct, frozen=True):
    """A layer-1 decision: the tool-result message at ``position`` is sent as ``message`` instead."""

    position: int
    message: CanonicalMessage
    tokens: int
    score: float | None


class DigestState(msgspec.Struct, frozen=True):
    """The task digest at ``cut``: the builder that read the history before it (never fed again: a
    later cut feeds a copy) and the supplement it renders, or ``None`` when it has nothing to say."""

    cut: int
    builder: TaskDigestBuilder | None
    supplement: Supplement | None


class Receipt(msgspec.Struct, frozen=True):
    """A layer-2 decision: the units rooted at ``roots`` are sent as one receipt ``message``."""

    roots: tuple[int, ...]
    positions: tuple[int, ...]
    message: CanonicalMessage
    tokens: int
    original_tokens: int
    compaction_id: str


class MandatoryReason(msgspec.Struct, frozen=True):
    """Why a unit is always sent verbatim: its plan item kind, reason and priority."""

    kind: str
    reason: str
    priority: int


class Supplement(msgspec.Struct, frozen=True):
    """A host-supplied item that passed validation and its kind's ceiling, as the message it becomes."""

    priority: int
    item_id: str
    message: CanonicalMessage
    tokens: int
    item: SupplementalItem


class BeforeCut(msgspec.Struct, frozen=True):
    """The before-cut exclusion, apart from the prefix sum up to the cut (added when it is read)."""

    count: int
    tokens: int
    first_message_id: str
    last_message_id: str


class PlanInputs(msgspec.Struct, frozen=True):
    """What every stage of one plan reads; none of it changes while the plan runs."""

    index: HistoryIndex
    messages: tuple[CanonicalMessage, ...]
    size: int
    budget: PlanBudget
    config: Ds4ContextConfig
    pruning: PruningConfig
    estimator: TokenEstimator
    judge: Judge | None
    pins: Iterable[str]
    supplemental: Iterable[SupplementalItem]
    # Appended to by the stages (a list shared with the caller, which also holds the config warnings).
    diagnostics: list[PlanDiagnostic]
    # The wire format the host sends the plan in (``_structure.DESTINATIONS``), or None for no rules.
    destination: str | None = None
    # Tokens the host's supplements count as at least when the plan decides whether and how far to
    # compact (``plan_context(supplement_reserve=)``): a host that rebuilds them for a new cut.
    supplement_reserve: int = 0


class Window(msgspec.Struct):
    """The units the plan may send (roots at or after the cut, in history order) and their company."""

    units: list[int]
    # Positions after the cut that belong to units rooted before it.
    stragglers: list[int]
    supplements: list[Supplement]
    usage: int = 0
    # Of ``usage``: room held for the host's supplements beyond what they take (``supplement_reserve``).
    # It counts against the soft limit and the compaction's goal only; the hard limit takes it first.
    reserve: int = 0


class Decisions(msgspec.Struct):
    """Every decision of one plan; the stages read and extend it in pipeline order."""

    cut: int = 0
    trims: dict[int, Trim] = msgspec.field(default_factory=dict)
    receipts: dict[int, Receipt] = msgspec.field(default_factory=dict)
    # unit root -> the key (first root) of the receipt that covers it
    receipt_of: dict[int, int] = msgspec.field(default_factory=dict)
    compactions: int = 0
    # The current request as sent when it alone passes the hard limit: a head-and-tail copy.
    oversized: Trim | None = None
    # unit root -> tokens the unit costs as planned (trims and receipts applied)
    unit_tokens: dict[int, int] = msgspec.field(default_factory=dict)
    # The root of the first unit of the recent tail (the history length when the tail is empty).
    tail_root: int = 0
    exclusions: list[PlanExclusion] = msgspec.field(default_factory=list)
    compaction: CompactionReport | None = None
    dropped_supplements: list[str] = msgspec.field(default_factory=list)
    # Parts of the manifest that need estimates of never-sent history, completed on first read: the span
    # skipped unestimated before a compaction, and the before-cut exclusion.
    skipped_span: tuple[int, int] | None = None
    before_cut: BeforeCut | None = None
    # The task digest of the history before the cut (``_digest_stage``), sticky between compactions.
    digest: DigestState | None = None
    # The digest builder this plan made or copied (no earlier state holds it, so it may be fed on).
    fresh_builder: TaskDigestBuilder | None = None
    # Roots of the units the previous plan sent in front of the window (mandatory units the cut has
    # passed: a request of a long turn, pins). They stay in front until the cut moves again, so the
    # next turn's plan still starts with the same messages (``_mandatory.retain_front``).
    front: tuple[int, ...] = ()
    # Roots of the fixed head: the oldest kept units, sent first (before the digest) and byte for byte
    # at every compaction, which moves the cut after them (``_mandatory.retain_head``).
    head: tuple[int, ...] = ()
    head_tokens: int = 0  # of all its units as the history holds them (the estimates never change)
    # Whether a previous plan's state was adopted: a head is chosen only to keep a prefix already sent.
    adopted: bool = False
    # Position -> the copy sent of a message whose calls were interrupted (a call without a result
    # before a later user turn), and the roots of the units holding one (``_interrupted``).
    interrupted: dict[int, Trim] = msgspec.field(default_factory=dict)
    interrupted_roots: set[int] = msgspec.field(default_factory=set)

    def forget_before(self, cut: int) -> None:
        """Drop trims and receipts of units the cut has passed."""
        self.trims = {p: t for p, t in self.trims.items() if p >= cut}
        self.receipts = {k: r for k, r in self.receipts.items() if k >= cut}
        self.receipt_of = {root: k for root, k in self.receipt_of.items() if k >= cut}

    def align_to_receipt(self, units: list[int], start: int) -> int:
        """``start`` moved past the last unit of a receipt it would split (a cut never splits one)."""
        receipt_of = self.receipt_of
        while 0 < start < len(units):
            key = receipt_of.get(units[start])
            if key is None or key == units[start]:
                return start
            start += 1
        return start

    def tail_start(self, units: list[int], ceiling: int) -> int:
        """Where in ``units`` the recent tail starts: the newest units within ``ceiling`` tokens (at
        least one), aligned to receipts."""
        unit_tokens = self.unit_tokens
        total = 0
        start = len(units)
        while start > 0:
            tokens = unit_tokens[units[start - 1]]
            if start < len(units) and total + tokens > ceiling:
                break
            total += tokens
            start -= 1
        return self.align_to_receipt(units, start)
