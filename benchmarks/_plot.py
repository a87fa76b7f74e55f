"""An SVG of a replay: tokens per step against the window, and the shared-prefix ratio.

``replay.py --plot PATH`` calls :func:`write_replay_svg`. The SVG is written by hand (the standard
library's XML escaping only), so the benchmark needs no plotting dependency. One chart, two y axes:

- left, tokens: the plan sent at each step (solid), the full history it stands for (dashed), and two
  horizontal lines, the model's window and the planner's hard limit;
- right, 0 to 1: the shared-prefix ratio of each plan with the one before (dotted), the figure a
  provider's prompt cache pays on.

Each series is one ``<polyline>`` with one point per step, in step order; their ``data-series``
attributes (``planned``, ``native``, ``shared-prefix``) let a test or a script find them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

__all__ = ["ReplayStep", "replay_svg", "write_replay_svg"]

_WIDTH, _HEIGHT = 960, 480
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 70, 50, 60
_TICKS = 5


@dataclass(frozen=True)
class ReplayStep:
    """One model call of a replay: what the plan sent, what the whole history was, the prefix reuse."""

    planned_tokens: int
    native_tokens: int
    shared_prefix_ratio: float


def _points(values: Sequence[float], top: float, width: float, height: float) -> str:
    """``x,y`` pairs of ``values`` scaled to the plot area (``top`` is the value at its top edge)."""
    step = (width / (len(values) - 1)) if len(values) > 1 else 0.0
    return " ".join(
        f"{_LEFT + index * step:.1f},{_TOP + height - (value / top) * height:.1f}"
        for index, value in enumerate(values)
    )


def _label(x: float, y: float, text: str, anchor: str = "middle", size: int = 12) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="sans-serif">{escape(text)}</text>'
    )


def replay_svg(steps: Sequence[ReplayStep], *, window: int, hard_limit: int, title: str) -> str:
    """The SVG document for ``steps`` (at least one), as text."""
    if not steps:
        raise ValueError("a replay plot needs at least one step")
    width, height = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    largest = max(window, hard_limit, *(s.planned_tokens for s in steps), *(s.native_tokens for s in steps))
    top = float(largest) * 1.05 or 1.0

    def y(value: float) -> float:
        return _TOP + height - (value / top) * height

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{_WIDTH}" height="{_HEIGHT}" fill="white"/>',
        _label(_WIDTH / 2, 28, title, size=15),
        f'<rect x="{_LEFT}" y="{_TOP}" width="{width}" height="{height}" fill="none" stroke="#999"/>',
    ]
    for tick in range(_TICKS + 1):
        tokens = top * tick / _TICKS
        parts.append(_label(_LEFT - 8, y(tokens) + 4, f"{tokens:,.0f}", anchor="end", size=11))
        parts.append(
            _label(_LEFT + width + 8, y(tokens) + 4, f"{tick / _TICKS:.1f}", anchor="start", size=11)
        )
    for value, name, colour in ((window, "window", "#d62728"), (hard_limit, "hard limit", "#ff7f0e")):
        parts.append(
            f'<line x1="{_LEFT}" y1="{y(value):.1f}" x2="{_LEFT + width}" y2="{y(value):.1f}" '
            f'stroke="{colour}" stroke-width="1.5" data-series={quoteattr(name)}/>'
        )
        parts.append(_label(_LEFT + width - 4, y(value) - 5, f"{name} {value:,}", anchor="end", size=11))
    series = (
        ("planned", [float(s.planned_tokens) for s in steps], top, "#1f77b4", ""),
        ("native", [float(s.native_tokens) for s in steps], top, "#7f7f7f", ' stroke-dasharray="6 4"'),
        ("shared-prefix", [s.shared_prefix_ratio for s in steps], 1.0, "#2ca02c", ' stroke-dasharray="2 3"'),
    )
    for name, values, scale, colour, dash in series:
        parts.append(
            f'<polyline data-series="{name}" fill="none" stroke="{colour}" stroke-width="2"{dash} '
            f'points="{_points(values, scale, width, height)}"/>'
        )
    legend = (
        ("planned tokens sent", "#1f77b4"),
        ("full history tokens", "#7f7f7f"),
        ("shared-prefix ratio (right axis)", "#2ca02c"),
    )
    for index, (text, colour) in enumerate(legend):
        x = _LEFT + 10 + index * 260
        parts.append(f'<rect x="{x}" y="{_HEIGHT - 22}" width="14" height="4" fill="{colour}"/>')
        parts.append(_label(x + 20, _HEIGHT - 17, text, anchor="start", size=12))
    parts.append(_label(_LEFT + width / 2, _HEIGHT - 36, f"step (model call), {len(steps)} in all", size=12))
    parts.append(_label(18, _TOP + height / 2, "tokens", size=12))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_replay_svg(
    path: Path, steps: Sequence[ReplayStep], *, window: int, hard_limit: int, title: str
) -> None:
    """Write :func:`replay_svg` to ``path`` (UTF-8)."""
    path.write_text(replay_svg(steps, window=window, hard_limit=hard_limit, title=title), encoding="utf-8")
