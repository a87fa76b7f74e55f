"""The Pi replay's goal on the shipped fixture: calibrated plans fit the window, estimates within 5 %."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "benchmarks" / "fixtures" / "pi-usage-session.jsonl"


def test_calibrated_plans_of_a_long_pi_session_fit_every_window(tmp_path: Path) -> None:
    steps = tmp_path / "steps.csv"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "replay.py"),
            str(FIXTURE),
            "--max-tokens",
            "0",
            "--windows",
            "8000,32000,128000,200000",
            "--steps",
            str(steps),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    error = re.search(r"reported after 5 calls: ([0-9.]+)%", result.stdout)
    assert error is not None, result.stdout
    assert float(error.group(1)) <= 5.0
    with steps.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {int(row["window"]) for row in rows} == {8_000, 32_000, 128_000, 200_000}
    over = [row for row in rows if row["over_window"] == "True"]
    assert over == []
    # the budget shows where its ratio came from: the prior first, then what usage taught
    sources = {row["ratio_source"] for row in rows if row["ok"] == "True"}
    assert {"prior", "usage"} <= sources
    for row in rows:
        if row["ok"] == "True":
            assert int(row["real_size"]) + int(row["reserve"]) <= int(row["window"])
