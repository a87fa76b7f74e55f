"""Small helpers more than one planner stage uses."""

from __future__ import annotations

import hashlib

from ._decisions import PlanInputs
from ._digest_stage import digest_reserve
from ._index import HistoryIndex
from ._index import normalize_tool_name as _norm


def hash16(*parts: object) -> str:
    """16 hex characters of the sha256 of the NUL-joined parts: ids of synthetic messages and passes."""
    return hashlib.sha256("\0".join(str(part) for part in parts).encode("utf-8")).hexdigest()[:16]


def original_unit_tokens(index: HistoryIndex, root: int) -> int:
    """Tokens of the unit rooted at ``root`` as the history holds it (no trim, no receipt)."""
    token = index.token
    return sum(token(p) for p in index.unit_members(root))


def compaction_goal(inputs: PlanInputs) -> int:
    """The tokens a compaction aims for: the target, at least a batch below the soft limit, and at most
    the low-water mark (``planner.compaction_low_water_ratio`` of the room above the fixed overhead
    and the digest), so that the steps after it append for a long while before the cut moves again."""
    budget = inputs.budget
    planner = inputs.config.planner
    batch = int(budget.hard_limit * planner.compaction_batch_ratio)
    base = min(budget.hard_limit, budget.fixed_tokens + digest_reserve(inputs))
    low_water = base + int((budget.hard_limit - base) * planner.compaction_low_water_ratio)
    return max(0, min(budget.target_tokens, budget.soft_limit - batch, low_water))


def head_budget(inputs: PlanInputs) -> int:
    """The most tokens the fixed head may take: ``planner.fixed_head_ratio`` of the room for history
    (the hard limit less the fixed overhead and the digest), 0 without core's own task digest.

    The head keeps messages in front of a cut that moved past them; only the digest can stand for what
    the cut then leaves out between the head and the window. A host that builds its own digest from the
    messages before the first one kept would miss that span, so without core's digest there is no head.
    """
    planner = inputs.config.planner
    if not planner.task_digest or planner.fixed_head_ratio <= 0:
        return 0
    budget = inputs.budget
    base = min(budget.hard_limit, budget.fixed_tokens + digest_reserve(inputs))
    return int((budget.hard_limit - base) * planner.fixed_head_ratio)


class NameCache:
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
