"""The CI workflow runs exactly the sessions that ``nox`` with no arguments runs, so the two cannot drift."""

from __future__ import annotations

import ast
import re

from conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
NOXFILE = ROOT / "noxfile.py"
# The one list-valued matrix key of the nox job, in YAML flow style: ``session: [lint, ...]``.
_MATRIX = re.compile(r"^\s+session:\s*\[(?P<names>[^\]]*)\]\s*$", re.MULTILINE)


def _workflow_sessions(text: str) -> list[str]:
    found = _MATRIX.findall(text)
    assert len(found) == 1, f"expected one `session: [...]` matrix in {WORKFLOW.name}, found {len(found)}"
    return [name.strip() for name in found[0].split(",") if name.strip()]


def _nox_default_sessions(source: str) -> list[str]:
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and ast.unparse(node.targets[0]) == "nox.options.sessions"
        ):
            sessions: list[str] = ast.literal_eval(node.value)
            return sessions
    raise AssertionError(f"{NOXFILE.name} sets no nox.options.sessions")


def _nox_session_functions(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and any(
            "nox.session" in ast.unparse(decorator) for decorator in node.decorator_list
        ):
            names.add(node.name)
    return names


def test_the_workflow_runs_exactly_noxs_default_sessions_in_order() -> None:
    source = NOXFILE.read_text(encoding="utf-8")
    workflow = _workflow_sessions(WORKFLOW.read_text(encoding="utf-8"))
    assert workflow == _nox_default_sessions(source)
    assert "compiled" in workflow, "the compiled core wheels are part of what CI proves"
    assert set(workflow) <= _nox_session_functions(source)


def test_each_matrix_entry_is_run_as_that_nox_session() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "run: nox --download-python never -s ${{ matrix.session }}" in text
    assert "needs: nox" in text, "the single required check waits for every session's job"


def test_a_session_left_out_of_the_workflow_is_noticed() -> None:
    # The reader must see the difference the first test guards against, not a constant.
    text = WORKFLOW.read_text(encoding="utf-8")
    trimmed = text.replace(", compiled,", ",")
    assert trimmed != text
    assert _workflow_sessions(trimmed) != _nox_default_sessions(NOXFILE.read_text(encoding="utf-8"))
