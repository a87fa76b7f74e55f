"""Developer and release sessions. ``nox`` with no arguments runs what CI runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

ROOT = Path(__file__).parent.resolve()
PACKAGES = ("ds4-context-core", "ds4-context-reference-adapter", "ds4-context-engine")
# Which siblings each package needs installed beside it (from the workspace, never an index).
LOCAL_DEPENDENCIES = {
    "ds4-context-core": ("ds4-context-core",),
    "ds4-context-reference-adapter": ("ds4-context-core", "ds4-context-reference-adapter"),
    "ds4-context-engine": ("ds4-context-core", "ds4-context-engine"),
}
TEST_REQUIREMENTS = ("pytest>=8", "hypothesis>=6.100", "trio>=0.25", "pytest-timeout>=2.3")
# Peers used only by a package's tests (never by the package itself).
EXTRA_TEST_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "ds4-context-engine": ("openai>=1.40", "anthropic>=0.34"),
}

# pyenv hides 3.12/3.13 unless PYENV_VERSION lists them; there is no interpreter download here.
if shutil.which("pyenv") and ":" not in os.environ.get("PYENV_VERSION", ""):
    os.environ["PYENV_VERSION"] = "3.11.7:3.12.1:3.13.0"


def _available_pythons() -> list[str]:
    found = []
    for version in ("3.11", "3.12", "3.13"):
        executable = shutil.which(f"python{version}")
        if (
            executable
            and subprocess.run([executable, "-c", "pass"], check=False, capture_output=True).returncode == 0
        ):
            found.append(version)
    return found or ["3.11"]


PYTHONS = _available_pythons()

nox.options.default_venv_backend = "uv"
nox.options.download_python = "never"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "typecheck", "tests"]


def _sync(session: nox.Session, *groups: str) -> None:
    """Install the locked workspace (all members, editable) into the session venv."""
    args = ["uv", "sync", "--frozen", "--all-packages", "--no-config", "--inexact"]
    for group in groups:
        args += ["--group", group]
    session.run_install(*args, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


@nox.session(python=PYTHONS[0])
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and the import-linter contracts."""
    _sync(session, "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")


@nox.session(python=PYTHONS[0])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's sources and the scripts."""
    _sync(session, "dev")
    session.run("mypy")


@nox.session(python=PYTHONS)
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """A package's tests in an environment holding only that package and what it declares."""
    editable: list[str] = []
    for name in LOCAL_DEPENDENCIES[package]:
        editable += ["-e", str(ROOT / "packages" / name)]
    session.install("--no-config", *editable, *TEST_REQUIREMENTS, *EXTRA_TEST_REQUIREMENTS.get(package, ()))
    session.run(
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        str(ROOT / "packages" / package / "tests"),
        *session.posargs,
    )
