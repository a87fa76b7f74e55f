"""What one plan hands to the next (:class:`PlanState`), and how the next plan adopts it."""

from __future__ import annotations

from collections.abc import Mapping

from ds4_context_core._history._model import CanonicalMessage

from ._decisions import Decisions, DigestState, PlanInputs, Receipt, Trim
from ._index import HistoryIndex, TokenEstimator
from ._types import PlanDiagnostic


class PlanState:
    """What one plan hands to the next: sticky decisions, the previous output and a shared memo.

    Treat it as an opaque, immutable value: pass ``previous_plan.state`` to the next call. Passing an
    older state again (a retry) is safe and gives the same plan as the first time.
    """

    __slots__ = (
        "_compactions",
        "_cut",
        "_digest",
        "_estimator",
        "_front",
        "_head",
        "_head_tokens",
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
        trims: Mapping[int, Trim] | None = None,
        receipts: Mapping[int, Receipt] | None = None,
        compactions: int = 0,
        previous_messages: tuple[CanonicalMessage, ...] = (),
        estimator: TokenEstimator | None = None,
        digest: DigestState | None = None,
        front: tuple[int, ...] = (),
        head: tuple[int, ...] = (),
        head_tokens: int = 0,
    ) -> None:
        self._digest = digest
        self._front = front
        self._head = head
        self._head_tokens = head_tokens
        self._index = index
        self._source = source
        self._cut = cut
        self._trims: Mapping[int, Trim] = dict(trims or {})
        self._receipts: Mapping[int, Receipt] = dict(receipts or {})
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

    @property
    def index(self) -> HistoryIndex | None:
        """The history memo the next plan extends (internal)."""
        return self._index

    @property
    def previous_messages(self) -> tuple[CanonicalMessage, ...]:
        """The messages of the plan that made this state (internal: the shared-prefix figures)."""
        return self._previous_messages


def adopt_state(state: PlanState | None, inputs: PlanInputs) -> Decisions:
    """The sticky decisions of ``state`` when it describes a prefix of this history, else none."""
    decisions = Decisions()
    if state is None:
        return decisions
    size = len(state._source)
    valid = (
        size <= inputs.size
        and (state._estimator is None or state._estimator is inputs.estimator)
        and (
            size == 0
            # the index has just checked that this history extends exactly that one
            or state._source is inputs.index.previous_source
            or inputs.messages[:size] == state._source
        )
    )
    if not valid:
        inputs.diagnostics.append(
            PlanDiagnostic(code="state-reset", detail="history was rewritten; planning from scratch")
        )
        return decisions
    decisions.cut = state._cut
    decisions.trims = dict(state._trims)
    decisions.receipts = dict(state._receipts)
    for key, receipt in decisions.receipts.items():
        for root in receipt.roots:
            decisions.receipt_of[root] = key
    decisions.compactions = state._compactions
    decisions.digest = state._digest
    decisions.front = state._front
    decisions.head = state._head
    decisions.head_tokens = state._head_tokens
    decisions.adopted = bool(state._previous_messages)
    return decisions
