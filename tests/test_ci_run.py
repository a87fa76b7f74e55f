"""``.ci/run`` on the machines CI meets: a plain virtualenv, the user site turned off, a user install.

The script is run for real, from a copy of ``.ci`` in a temporary directory, with two shims in front of
PATH: ``python -m pip`` and ``nox`` only record that they were called (nothing is installed, nox never
runs); every other ``python`` call (``-m site``) goes to the interpreter under test.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the CI entry point is a bash script")

_SEPARATOR = "\x1f"


def _readme_command() -> list[list[str]]:
    """The test command of README.md ("Run the full test suite"), as the argument lists it chains."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Run the full test suite", 1)[1]
    block = section.split("```console", 1)[1].split("```", 1)[0].strip()
    return [shlex.split(part) for part in block.split("&&")]


def _executable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run_ci(tmp_path: Path, python: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run a copy of ``.ci/run`` with ``python`` as the interpreter; return the result and the calls."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / ".ci", repo / ".ci")
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "calls.log"
    record = f'(IFS="{_SEPARATOR}"; printf "%s\\n" "$*") >> "{log}"'
    _executable(
        shims / "python",
        f'#!/usr/bin/env bash\nif [ "${{1:-}}" = -m ] && [ "${{2:-}}" = pip ]; then\n'
        f'    {record.replace("$*", "python$IFS$*")}\n    exit 0\nfi\nexec "{python}" "$@"\n',
    )
    _executable(
        shims / "nox",
        f"#!/usr/bin/env bash\n{record.replace('$*', 'nox$IFS$*')}\n"
        f'printf "%s\\n" "$PATH" > "{tmp_path}/path"\n',
    )
    base = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    environment = {**base, "PATH": f"{shims}{os.pathsep}{python.parent}{os.pathsep}/usr/bin:/bin", **env}
    result = subprocess.run(
        ["bash", str(repo / ".ci" / "run")],
        check=False,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return result, calls


def _base_python() -> Path:
    """The interpreter the test environment was made from (a virtualenv's user site is always off)."""
    return Path(getattr(sys, "_base_executable", sys.executable))


def _expected_calls() -> list[str]:
    return [_SEPARATOR.join(arguments).rstrip(_SEPARATOR) for arguments in _readme_command()]


def _nox_path(tmp_path: Path) -> list[str]:
    return (tmp_path / "path").read_text(encoding="utf-8").strip().split(os.pathsep)


def test_with_the_user_site_turned_off_it_still_runs_the_readme_command(tmp_path: Path) -> None:
    user_base = tmp_path / "userbase"
    result, calls = _run_ci(tmp_path, _base_python(), PYTHONNOUSERSITE="1", PYTHONUSERBASE=str(user_base))
    assert result.returncode == 0, result.stderr
    assert [call.rstrip(_SEPARATOR) for call in calls] == _expected_calls()
    assert str(user_base / "bin") not in _nox_path(tmp_path)


def test_inside_a_fresh_virtualenv_it_still_runs_the_readme_command(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([str(_base_python()), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    user_base = tmp_path / "userbase"
    result, calls = _run_ci(
        tmp_path, venv / "bin" / "python", VIRTUAL_ENV=str(venv), PYTHONUSERBASE=str(user_base)
    )
    assert result.returncode == 0, result.stderr
    assert [call.rstrip(_SEPARATOR) for call in calls] == _expected_calls()
    assert str(user_base / "bin") not in _nox_path(tmp_path)


def test_with_a_user_site_its_bin_comes_first_on_path(tmp_path: Path) -> None:
    user_base = tmp_path / "userbase"
    probe = subprocess.run(
        [_base_python(), "-m", "site", "--user-base"],
        env={**os.environ, "PYTHONUSERBASE": str(user_base), "PYTHONNOUSERSITE": ""},
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("this interpreter has no user site (another user id, or turned off by its build)")
    result, calls = _run_ci(tmp_path, _base_python(), PYTHONUSERBASE=str(user_base))
    assert result.returncode == 0, result.stderr
    assert [call.rstrip(_SEPARATOR) for call in calls] == _expected_calls()
    assert _nox_path(tmp_path)[0] == str(user_base / "bin")
