"""The plan's composition bar: parts that add up to the window, cells that add up to the width."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ds4_context_engine._cli_bars import Part, bar_cells, composition
from ds4_context_engine.cli import app
from ds4_context_engine.commands import write_demo_session


def _item(kind, tokens):
    return SimpleNamespace(kind=kind, tokens=tokens)


def test_composition_groups_kinds_and_leaves_the_rest_free():
    items = [_item("message", 500), _item("current-request", 20), _item("trimmed-tool-result", 80)]
    items += [_item("receipt", 40), _item("summary", 60), _item("retrieved-history", 30)]
    parts = composition(items, window=2000, output_reserve=250)
    assert parts == [
        Part("verbatim", 520),
        Part("trimmed", 80),
        Part("receipts", 40),
        Part("supplements", 90),
        Part("output reserve", 250),
        Part("free", 1020),
    ]
    assert sum(part.tokens for part in parts) == 2000
    # a plan larger than the window (a fallback) has no free part and is drawn against itself
    over = composition([_item("message", 5000)], window=2000, output_reserve=250)
    assert [part.label for part in over] == ["verbatim", "output reserve"]


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=8), st.integers(1, 120))
def test_cells_add_up_to_the_width_and_stay_within_one_cell_of_the_exact_share(tokens, width):
    parts = [Part(str(index), value) for index, value in enumerate(tokens)]
    cells = bar_cells(parts, width)
    total = sum(tokens)
    if total == 0:
        assert cells == [0] * len(tokens)
        return
    assert sum(cells) == width
    for value, count in zip(tokens, cells, strict=True):
        assert abs(count - value * width / total) < 1


def test_the_plan_table_draws_the_bar_with_a_legend_that_adds_up(tmp_path):
    session = write_demo_session(tmp_path / "demo.jsonl", cwd=str(tmp_path))
    args = ["plan", str(session), "--window", "20000", "--no-store"]
    runner = CliRunner()
    table = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout
    legend = dict(re.findall(r"█ ([a-z ]+): ([\d,]+) tokens", table))
    assert set(legend) >= {"verbatim", "output reserve", "free"}
    assert sum(int(value.replace(",", "")) for value in legend.values()) == 20_000
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert int(legend["output reserve"].replace(",", "")) == plan["budget"]["output_reserve"]
    bar = next(
        line for line in table.splitlines() if set(line.strip()) <= {"█", "░"} and len(line.strip()) > 10
    )
    assert len(bar.strip()) == 60


def test_planning_into_a_pipe_shows_no_spinner(tmp_path):
    session = write_demo_session(tmp_path / "demo.jsonl", cwd=str(tmp_path))
    result = CliRunner().invoke(app, ["plan", str(session), "--window", "20000", "--no-store", "--json"])
    assert (result.exit_code, result.stderr) == (0, "")


def test_status_draws_the_bar_when_there_is_a_window_to_plan_for(tmp_path):
    session = write_demo_session(tmp_path / "demo.jsonl", cwd=str(tmp_path))
    runner = CliRunner()
    planned = runner.invoke(app, ["status", str(session), "--no-store", "--window", "20000"]).stdout
    assert "window (20,000 tokens)" in planned
    assert "█ free: " in planned
    plain = runner.invoke(app, ["status", str(session), "--no-store"]).stdout
    assert "window (" not in plain


def test_the_bars_supplements_are_the_plan_lines_supplements_and_a_pin_is_verbatim(tmp_path):
    # a pinned message is history kept as it is: counting it as a supplement made the bar disagree with
    # "planned N messages + S supplements" above it
    session = write_demo_session(tmp_path / "demo.jsonl", cwd=str(tmp_path))
    runner = CliRunner()
    entry = next(  # the first user entry, pinned as the demo does
        json.loads(line)["id"]
        for line in session.read_text(encoding="utf-8").splitlines()[1:]
        if json.loads(line).get("message", {}).get("role") == "user"
    )
    assert runner.invoke(app, ["pin", str(session), entry, "--no-store"]).exit_code == 0
    args = ["plan", str(session), "--window", "20000", "--no-store"]
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    kinds = {item["kind"] for item in plan["items"]}
    assert "pin" in kinds
    supplements = [item for item in plan["items"] if item["original_index"] is None]
    assert len(supplements) == len(plan["items"]) - plan["manifest"]["included_messages"]
    table = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout
    legend = dict(re.findall(r"█ ([a-z ]+): ([\d,]+) tokens", table))
    shown = int(legend.get("supplements", "0").replace(",", ""))
    assert shown == sum(item["tokens"] for item in supplements)
    assert composition([_item("pin", 34), _item("summary", 278)], window=1000, output_reserve=0)[:2] == [
        Part("verbatim", 34),
        Part("supplements", 278),
    ]
