"""Small helpers more than one planner stage uses."""

from __future__ import annotations

import hashlib

from ._decisions import PlanInputs
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
    """The tokens a compaction aims for: the target, and at least a batch below the soft limit."""
    budget = inputs.budget
    batch = int(budget.hard_limit * inputs.config.planner.compaction_batch_ratio)
    return max(0, min(budget.target_tokens, budget.soft_limit - batch))


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
