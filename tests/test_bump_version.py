"""``scripts/bump_version.py``: one command moves all three distributions to a new version consistently."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from conftest import copy_workspace, replace_in, run_script, workspace_version

REWRITTEN = [
    "packages/ds4-context-core/pyproject.toml",
    "packages/ds4-context-core/src/ds4_context_core/_version.py",
    "packages/ds4-context-reference-adapter/pyproject.toml",
    "packages/ds4-context-reference-adapter/src/ds4_context_reference_adapter/_version.py",
    "packages/ds4-context-engine/pyproject.toml",
    "packages/ds4-context-engine/src/ds4_context_engine/_version.py",
    "uv.lock",
]


def _snapshot(root: Path) -> dict[str, str]:
    return {name: (root / name).read_text(encoding="utf-8") for name in REWRITTEN}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return copy_workspace(tmp_path / "ws")


@pytest.mark.parametrize("new", ["0.2.0", "1.0.0rc1", "0.1.1.post2", "2.0.0.dev3"])
def test_bump_rewrites_every_version_and_pin_and_nothing_else(workspace: Path, new: str) -> None:
    old = workspace_version()
    before = _snapshot(workspace)
    result = run_script("bump_version.py", new, "--root", workspace)
    assert result.returncode == 0, result.stderr
    assert f"now at {new}" in result.stdout
    after = _snapshot(workspace)
    for name in REWRITTEN:
        changed = [
            line
            for line in difflib.ndiff(before[name].splitlines(), after[name].splitlines())
            if line.startswith(("- ", "+ "))
        ]
        assert changed, f"{name} was not rewritten"
        for line in changed:
            assert (old if line.startswith("-") else new) in line, f"{name}: unexpected change {line!r}"
    engine = after["packages/ds4-context-engine/pyproject.toml"]
    assert f'"ds4-context-core=={new}"' in engine
    assert f'"ds4-context-core[tiktoken]=={new}"' in engine
    assert f'__version__ = "{new}"' in after["packages/ds4-context-core/src/ds4_context_core/_version.py"]
    check = run_script("check_versions.py", "--root", workspace)
    assert check.returncode == 0, check.stderr


def test_bump_repairs_a_wrong_sibling_pin(workspace: Path) -> None:
    pyproject = workspace / "packages/ds4-context-reference-adapter/pyproject.toml"
    replace_in(pyproject, f"ds4-context-core=={workspace_version()}", "ds4-context-core==0.0.9")
    assert run_script("check_versions.py", "--root", workspace).returncode == 1
    result = run_script("bump_version.py", "0.3.0", "--root", workspace)
    assert result.returncode == 0, result.stderr
    assert '"ds4-context-core==0.3.0"' in pyproject.read_text()


def test_bumping_to_the_current_version_changes_nothing(workspace: Path) -> None:
    before = _snapshot(workspace)
    result = run_script("bump_version.py", workspace_version(), "--root", workspace)
    assert result.returncode == 0, result.stderr
    assert "rewrote" not in result.stdout
    assert _snapshot(workspace) == before


@pytest.mark.parametrize(
    "bad", ["0.2", "v0.2.0", "latest", ">=0.2.0", "0.2.0+local", "1!0.2.0", "0.02.0", ""]
)
def test_bump_refuses_anything_but_an_exact_release_version(workspace: Path, bad: str) -> None:
    before = _snapshot(workspace)
    result = run_script("bump_version.py", bad, "--root", workspace)
    assert result.returncode == 1
    assert "error BMP001:" in result.stderr
    assert _snapshot(workspace) == before


def test_bump_fails_loudly_when_a_version_file_has_no_version(workspace: Path) -> None:
    version_file = workspace / "packages/ds4-context-engine/src/ds4_context_engine/_version.py"
    version_file.write_text('"""No version here."""\n')
    before = _snapshot(workspace)
    result = run_script("bump_version.py", "0.2.0", "--root", workspace)
    assert result.returncode == 1
    assert "error BMP002:" in result.stderr
    assert "_version.py" in result.stderr
    assert _snapshot(workspace) == before, "a failed bump must not leave a half-bumped workspace"
