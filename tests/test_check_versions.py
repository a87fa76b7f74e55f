"""``scripts/check_versions.py``: any lockstep mismatch fails, with a stable code naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, copy_workspace, replace_in, run_script, workspace_version

ENGINE = Path("packages/ds4-context-engine/pyproject.toml")
REFERENCE = Path("packages/ds4-context-reference-adapter/pyproject.toml")
CORE = Path("packages/ds4-context-core/pyproject.toml")
V = workspace_version()
REFERENCE_VERSION_FILE = Path(
    "packages/ds4-context-reference-adapter/src/ds4_context_reference_adapter/_version.py"
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_workspace(tmp_path / "ws")


def test_the_real_workspace_is_in_lockstep() -> None:
    result = run_script("check_versions.py", "--root", ROOT)
    assert result.returncode == 0, result.stderr
    assert f"lockstep version {V}" in result.stdout


def test_a_faithful_copy_passes(workspace: Path) -> None:
    result = run_script("check_versions.py", "--root", workspace)
    assert result.returncode == 0, result.stderr


LOCK_ENTRY = 'name = "ds4-context-engine"\nversion = "{}"'
MISMATCHES = {
    "wrong-core-pin": (ENGINE, f'"ds4-context-core=={V}"', '"ds4-context-core==0.0.9"', "VER005"),
    "wrong-extras-pin": (
        ENGINE,
        f'"ds4-context-core[tiktoken]=={V}"',
        '"ds4-context-core[tiktoken]==0.0.9"',
        "VER005",
    ),
    "range-instead-of-pin": (REFERENCE, f'"ds4-context-core=={V}"', f'"ds4-context-core>={V}"', "VER004"),
    "unpinned-sibling": (REFERENCE, f'"ds4-context-core=={V}"', '"ds4-context-core"', "VER004"),
    "member-version": (REFERENCE, f'version = "{V}"', 'version = "0.0.9"', "VER002"),
    "dunder-version": (REFERENCE_VERSION_FILE, f'__version__ = "{V}"', '__version__ = "0.0.9"', "VER003"),
    "non-release-version": (CORE, f'version = "{V}"', 'version = "1.0"', "VER001"),
    "stale-lock": (Path("uv.lock"), LOCK_ENTRY.format(V), LOCK_ENTRY.format("0.0.9"), "VER006"),
}


@pytest.mark.parametrize(("path", "old", "new", "code"), list(MISMATCHES.values()), ids=list(MISMATCHES))
def test_a_mismatch_fails_with_its_code(workspace: Path, path: Path, old: str, new: str, code: str) -> None:
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
