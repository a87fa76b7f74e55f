"""Fixtures: a project root and a freshly created history file."""

from __future__ import annotations

from pathlib import Path

import pytest
from reference_helpers import SESSION

from ds4_context_reference_adapter import create_reference_history


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
def history(tmp_path: Path, project: Path) -> Path:
    path = tmp_path / "state" / "session.jsonl"
    create_reference_history(path, session_id=SESSION, project_root=project)
    return path
