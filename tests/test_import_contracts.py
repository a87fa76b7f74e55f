"""The import-linter contracts in the root ``pyproject.toml`` catch a forbidden import.

Each case copies the workspace, injects one forbidden import into a new module and runs ``lint-imports``
against the copy (its sources first on ``PYTHONPATH``), never touching the real tree.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import clean_env, copy_workspace, tool

SOURCES = {
    "core": "packages/ds4-context-core/src/ds4_context_core",
    "reference": "packages/ds4-context-reference-adapter/src/ds4_context_reference_adapter",
    "engine": "packages/ds4-context-engine/src/ds4_context_engine",
}


def _lint_imports(workspace: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(str(workspace / source).rsplit("/", 1)[0] for source in SOURCES.values())
    return subprocess.run(
        [tool("lint-imports"), "--no-cache"],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(PYTHONPATH=path),
        timeout=300,
    )


CASES = {
    "core-imports-engine": ("core", "import ds4_context_engine", "ds4_context_engine"),
    "core-imports-reference": (
        "core",
        "from ds4_context_reference_adapter import __version__",
        "ds4_context_reference_adapter",
    ),
    "core-imports-httpx": ("core", "import httpx", "httpx"),
    "core-imports-typer": ("core", "import typer", "typer"),
    "reference-imports-engine": ("reference", "import ds4_context_engine", "ds4_context_engine"),
    "engine-imports-reference": (
        "engine",
        "import ds4_context_reference_adapter",
        "ds4_context_reference_adapter",
    ),
}


@pytest.mark.parametrize(("package", "statement", "imported"), list(CASES.values()), ids=list(CASES))
def test_a_forbidden_import_breaks_a_contract(
    tmp_path: Path, package: str, statement: str, imported: str
) -> None:
    workspace = copy_workspace(tmp_path / "ws")
    probe = workspace / SOURCES[package] / "_probe.py"
    probe.write_text(f'"""Injected by the test."""\n\n{statement}\n', encoding="utf-8")
    result = _lint_imports(workspace)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout
    importer = SOURCES[package].rsplit("/", 1)[1] + "._probe"
    assert f"{importer} -> {imported}" in result.stdout


def test_without_the_injection_the_probe_is_not_reported(tmp_path: Path) -> None:
    workspace = copy_workspace(tmp_path / "ws")
    (workspace / SOURCES["core"] / "_probe.py").write_text('"""A harmless module."""\n\nimport json\n')
    result = _lint_imports(workspace)
    assert "Contracts:" in result.stdout, result.stdout + result.stderr
    assert "_probe" not in result.stdout
