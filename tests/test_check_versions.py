"""``scripts/check_versions.py``: any lockstep mismatch fails, with a stable code naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, copy_workspace, replace_in, run_script, workspace_version

ENGINE = Path("packages/ds4-context-engine/pyproject.toml")
REFERENCE = Path("packages/ds4-context-reference-adapter/pyproject.toml")
CORE = Path("packages/ds4-context-core/pyproject.toml")
REFERENCE_VERSION_FILE = Path(
    "packages/ds4-context-reference-adapter/src/ds4_context_reference_adapter/_version.py"
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_workspace(tmp_path / "ws")


def test_the_real_workspace_is_in_lockstep() -> None:
    result = run_script("check_versions.py", "--root", ROOT)
    assert result.returncode == 0, result.stderr
    assert f"lockstep version {workspace_version()}" in result.stdout


def test_a_faithful_copy_passes(workspace: Path) -> None:
    result = run_script("check_versions.py", "--root", workspace)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("path", "old", "new", "code"),
    [
        (ENGINE, '"ds4-context-core==0.1.0"', '"ds4-context-core==0.0.9"', "VER005"),
        (ENGINE, '"ds4-context-core[tiktoken]==0.1.0"', '"ds4-context-core[tiktoken]==0.0.9"', "VER005"),
        (REFERENCE, '"ds4-context-core==0.1.0"', '"ds4-context-core>=0.1.0"', "VER004"),
        (REFERENCE, '"ds4-context-core==0.1.0"', '"ds4-context-core"', "VER004"),
        (REFERENCE, 'version = "0.1.0"', 'version = "0.1.1"', "VER002"),
        (REFERENCE_VERSION_FILE, '__version__ = "0.1.0"', '__version__ = "0.1.1"', "VER003"),
        (CORE, 'version = "0.1.0"', 'version = "0.1"', "VER001"),
        (
            Path("uv.lock"),
            'name = "ds4-context-engine"\nversion = "0.1.0"',
            'name = "ds4-context-engine"\nversion = "0.0.9"',
            "VER006",
        ),
    ],
    ids=[
        "wrong-core-pin",
        "wrong-extras-pin",
        "range-instead-of-pin",
        "unpinned-sibling",
        "member-version",
        "dunder-version",
        "non-release-version",
        "stale-lock",
    ],
)
def test_a_mismatch_fails_with_its_code(workspace: Path, path: Path, old: str, new: str, code: str) -> None:
    if workspace_version() != "0.1.0":
        pytest.skip("the cases are written against 0.1.0")
    replace_in(workspace / path, old, new)
    result = run_script("check_versions.py", "--root", workspace)
    assert result.returncode == 1
    assert f"error {code}:" in result.stderr
    assert path.name in result.stderr


def test_every_problem_is_reported_not_only_the_first(workspace: Path) -> None:
    replace_in(workspace / ENGINE, "ds4-context-core==", "ds4-context-core~=")
    replace_in(workspace / REFERENCE_VERSION_FILE, "__version__ = ", "__version__ = '9' or ")
    result = run_script("check_versions.py", "--root", workspace)
    assert result.returncode == 1
    assert "error VER004:" in result.stderr
    assert "error VER003:" in result.stderr
