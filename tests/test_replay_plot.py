"""``benchmarks/_plot.py`` and ``replay.py --plot``: a valid SVG with one point per replayed step."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
sys.path.insert(0, str(ROOT / "benchmarks"))
_plot = importlib.import_module("_plot")  # benchmarks/ is not a package
ReplayStep, replay_svg = _plot.ReplayStep, _plot.replay_svg


def _series(document: str) -> dict[str, list[tuple[float, float]]]:
    root = ElementTree.fromstring(document)
    assert root.tag == f"{SVG}svg"
    found = {}
    for line in root.iter(f"{SVG}polyline"):
        pairs = [point.split(",") for point in line.attrib["points"].split()]
        found[line.attrib["data-series"]] = [(float(x), float(y)) for x, y in pairs]
    return found


def _view_box(document: str) -> tuple[float, float]:
    root = ElementTree.fromstring(document)
    _, _, width, height = map(float, root.attrib["viewBox"].split())
    return width, height


def test_each_series_has_one_point_per_step_inside_the_picture() -> None:
    steps = [ReplayStep(1000 * n, 1500 * n, n / 10) for n in range(1, 8)]
    document = replay_svg(steps, window=12_000, hard_limit=9_000, title="a <replay> & more")
    series = _series(document)
    assert set(series) == {"planned", "native", "shared-prefix"}
    width, height = _view_box(document)
    for points in series.values():
        assert len(points) == len(steps)
        assert [x for x, _ in points] == sorted(x for x, _ in points)  # step order, left to right
        assert all(0 <= x <= width and 0 <= y <= height for x, y in points)
    # more tokens are drawn higher (smaller y); the history is above the plan it was cut to
    planned = [y for _, y in series["planned"]]
    assert planned == sorted(planned, reverse=True)
    assert all(n < p for (_, n), (_, p) in zip(series["native"], series["planned"], strict=True))
    root = ElementTree.fromstring(document)
    lines = {line.attrib["data-series"]: float(line.attrib["y1"]) for line in root.iter(f"{SVG}line")}
    assert lines["window"] < lines["hard limit"]  # the window is the larger number, so higher up
    assert root.find(f"{SVG}title").text == "a <replay> & more"  # type: ignore[union-attr]


def test_a_single_step_and_no_step() -> None:
    (points,) = {
        len(p)
        for p in _series(replay_svg([ReplayStep(5, 5, 1.0)], window=10, hard_limit=8, title="one")).values()
    }
    assert points == 1
    with pytest.raises(ValueError, match="at least one step"):
        replay_svg([], window=10, hard_limit=8, title="none")


def test_replay_writes_the_plot_of_every_step_it_planned(tmp_path: Path) -> None:
    plot = tmp_path / "replay.svg"
    result = subprocess.run(
        [
            sys.executable, str(ROOT / "benchmarks" / "replay.py"), "--generate", "120", "--window", "16000",
            "--max-tokens", "2000", "--fixed", "1000", "--plot", str(plot),
        ],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    calls = int(re.search(r"(\d+) model calls", result.stdout)[1])  # type: ignore[index]
    fallbacks = int(re.search(r"fallbacks\s+(\d+)", result.stdout)[1])  # type: ignore[index]
    series = _series(plot.read_text(encoding="utf-8"))
    assert calls - fallbacks > 10
    assert {len(points) for points in series.values()} == {calls - fallbacks}
    ratios_y = [y for _, y in series["shared-prefix"]]
    assert len(set(ratios_y)) > 1  # the ratio moves as compaction cuts the history
