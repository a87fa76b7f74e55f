"""The shell-heavy Pi fixture holds the Pi compaction its generator promises, and is what it generates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "benchmarks" / "fixtures"
FIXTURE = FIXTURES / "pi-shell-session.jsonl"


def _entries(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _check_one_compaction(entries: list[dict[str, object]]) -> None:
    compactions = [n for n, entry in enumerate(entries) if entry["type"] == "compaction"]
    assert len(compactions) == 1
    at = compactions[0]
    kept = entries[at]["firstKeptEntryId"]
    before = {str(entry["id"]): entry for entry in entries[1:at]}
    assert kept in before, "the first kept entry must be an earlier entry of the branch"
    message = before[str(kept)].get("message")
    assert isinstance(message, dict)
    assert message["role"] != "toolResult", "Pi never keeps a tool result without its call"
    summary = str(entries[at]["summary"])
    assert "<modified-files>" in summary
    assert "## Goal" in summary


def test_the_shipped_fixture_has_one_pi_compaction() -> None:
    _check_one_compaction(_entries(FIXTURE))


def test_the_shipped_fixture_is_what_its_generator_makes(tmp_path: Path) -> None:
    out = tmp_path / "session.jsonl"
    subprocess.run(
        [sys.executable, str(FIXTURES / "make_pi_shell_session.py"), str(out), "120", "5"],
        check=True,
        timeout=120,
    )
    assert out.read_bytes() == FIXTURE.read_bytes()


def test_the_compaction_is_written_whatever_kind_of_turn_it_follows(tmp_path: Path) -> None:
    # 120 turns compact after turn 60, a slash-command turn (60 % 11 == 5); 40 after turn 20, a work turn.
    for turns in (120, 40, 11):
        out = tmp_path / f"session-{turns}.jsonl"
        subprocess.run(
            [sys.executable, str(FIXTURES / "make_pi_shell_session.py"), str(out), str(turns), "3"],
            check=True,
            timeout=120,
        )
        _check_one_compaction(_entries(out))
