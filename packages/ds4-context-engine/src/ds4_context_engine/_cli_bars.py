"""The composition bar of a plan: its tokens by kind, drawn against the context window.

One row of cells stands for the window (or for the plan, when a fallback made it larger); each part gets
cells in proportion to its tokens, rounded so that the cells add up to the width exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from rich.text import Text

__all__ = ["Part", "bar_cells", "composition", "render_bar"]

# plan item kind (ds4_context_core.planner.PLAN_ITEM_KINDS) -> the part of the bar it counts in. History
# messages are verbatim, trimmed or receipted; anything else (summary, memory, retrieved history, project
# snippets) is a supplement, as in plan's "N messages + S supplements" line.
_PART_OF_KIND: Final = {
    "message": "verbatim",
    "current-request": "verbatim",
    "pin": "verbatim",
    "interrupted-tool-call": "verbatim",
    "trimmed-tool-result": "trimmed",
    "receipt": "receipts",
}
_ORDER: Final = ("fixed", "verbatim", "trimmed", "receipts", "supplements", "output reserve", "free")
_STYLE: Final = {
    "fixed": "white",
    "verbatim": "green",
    "trimmed": "yellow",
    "receipts": "magenta",
    "supplements": "cyan",
    "output reserve": "blue",
    "free": "grey50",
}
_CELL: Final = "█"
_FREE_CELL: Final = "░"


class Part(NamedTuple):
    label: str
    tokens: int


def composition(
    items: Iterable[Any], *, window: int, output_reserve: int, fixed_tokens: int = 0
) -> list[Part]:
    """The plan's tokens by part, then the output reserve and what is left free of ``window``.

    ``fixed_tokens`` (the system prompt and tool schemas a request also carries, ``budget.fixed_tokens``)
    is a part of its own: the planned tokens count it, so the free part must not.
    """
    totals = dict.fromkeys(_ORDER, 0)
    totals["fixed"] = fixed_tokens
    for item in items:
        totals[_PART_OF_KIND.get(item.kind, "supplements")] += item.tokens
    totals["output reserve"] = output_reserve
    used = sum(totals.values())
    totals["free"] = max(0, window - used)
    return [Part(label, totals[label]) for label in _ORDER if totals[label] > 0]


def bar_cells(parts: list[Part], width: int) -> list[int]:
    """Cells per part, proportional to tokens, summing to ``width`` (largest remainders round up)."""
    total = sum(part.tokens for part in parts)
    if total <= 0 or width <= 0:
        return [0] * len(parts)
    exact = [part.tokens * width / total for part in parts]
    cells = [int(value) for value in exact]
    by_remainder = sorted(range(len(parts)), key=lambda index: exact[index] - cells[index], reverse=True)
    for index in by_remainder[: width - sum(cells)]:
        cells[index] += 1
    return cells


def render_bar(parts: list[Part], width: int, *, window: int) -> Text:
    """The bar, then one legend line per part with its tokens and share of the window."""
    text = Text()
    for part, cells in zip(parts, bar_cells(parts, width), strict=True):
        text.append((_FREE_CELL if part.label == "free" else _CELL) * cells, style=_STYLE[part.label])
    for part in parts:
        share = f"{part.tokens / window:.0%}" if window > 0 else "-"
        text.append(f"\n{_CELL} ", style=_STYLE[part.label])
        text.append(f"{part.label}: {part.tokens:,} tokens ({share} of the window)")
    return text
