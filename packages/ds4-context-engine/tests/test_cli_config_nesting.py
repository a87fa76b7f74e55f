"""``--config`` with JSON nested past the interpreter's limit is a coded error, not a traceback (issue 22)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "pi"


def test_a_deeply_nested_config_file_exits_with_config_too_deep(tmp_path):
    session = tmp_path / "coding.jsonl"
    shutil.copy(FIXTURES / "v3-coding.jsonl", session)
    config = tmp_path / "deep.json"
    config.write_text('{"budget":' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ds4_context_engine",
            "config",
            str(session),
            "--no-store",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr
    assert "error [config-too-deep]" in done.stderr
    assert done.returncode not in (0, 1)
