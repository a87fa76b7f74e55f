"""The plan a host sends (:class:`ContextPlan`) and :func:`restore`, which gives its originals back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from ds4_context_core._exceptions import PlanRestoreError
from ds4_context_core._history._model import CanonicalMessage

from ._manifest import ManifestCompletion
from ._state import PlanState
from ._types import PlanBudget, PlanFallback, PlanItem, PlanManifest

_plan_encoder = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True, slots=True, init=False, eq=False, repr=False)
class ContextPlan:
    """The provider-facing messages of one model call and why each one is there.

    ``encode()`` gives deterministic bytes (equal inputs, equal bytes); ``state`` goes to the next call.
    """

    messages: tuple[CanonicalMessage, ...]
    items: tuple[PlanItem, ...]
    budget: PlanBudget
    # A manifest, or what completes one on first read (see ``ManifestCompletion``).
    _manifest: PlanManifest | ManifestCompletion
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
        manifest: PlanManifest | ManifestCompletion,
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
        """What is in, what is out, and why (completed on first read; see ``ManifestCompletion``)."""
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
