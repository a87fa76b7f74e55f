"""Tests of the installed wheels, run by ``nox -s artifacts`` from a fresh venv outside the source tree.

The session installs only the freshly built wheels (no index, no cache) and runs this directory from a
temporary copy with its own ``pytest.ini``, so nothing here can be satisfied by the workspace sources.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

DISTRIBUTIONS = {
    "ds4-context-core": "ds4_context_core",
    "ds4-context-reference-adapter": "ds4_context_reference_adapter",
    "ds4-context-engine": "ds4_context_engine",
}
CONFORMANCE_TARGET = "ds4_context_reference_adapter:conformance_factory"


def _setting(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through `nox -s artifacts`")
    return value


def _bin(name: str) -> Path:
    return Path(sys.executable).parent / name


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}


@pytest.mark.parametrize(("distribution", "package"), sorted(DISTRIBUTIONS.items()))
def test_package_imports_from_this_venv_site_packages(distribution: str, package: str) -> None:
    module = importlib.import_module(package)
    location = Path(str(module.__file__)).resolve()
    site_packages = Path(sysconfig.get_path("purelib")).resolve()
    assert location.is_relative_to(site_packages), f"{package} imported from {location}"
    sources = Path(_setting("DS4_ARTIFACT_SOURCE_ROOT")).resolve() / "packages"
    assert not location.is_relative_to(sources), f"{package} imported from the workspace sources"
    assert (location.parent / "py.typed").is_file(), f"{distribution} was installed without py.typed"


@pytest.mark.parametrize(("distribution", "package"), sorted(DISTRIBUTIONS.items()))
def test_installed_versions_are_the_lockstep_version(distribution: str, package: str) -> None:
    version = _setting("DS4_ARTIFACT_VERSION")
    assert importlib.metadata.version(distribution) == version
    assert importlib.import_module(package).__version__ == version


@pytest.mark.parametrize("distribution", ["ds4-context-reference-adapter", "ds4-context-engine"])
def test_adapters_pin_the_installed_core_exactly(distribution: str) -> None:
    version = _setting("DS4_ARTIFACT_VERSION")
    requires = importlib.metadata.requires(distribution) or []
    assert f"ds4-context-core=={version}" in requires


def test_golden_check_passes_against_the_installed_packages() -> None:
    scripts = Path(_setting("DS4_ARTIFACT_SCRIPTS"))
    result = subprocess.run(
        [
            sys.executable,
            str(scripts / "golden.py"),
            "check",
            "--golden-dir",
            _setting("DS4_ARTIFACT_GOLDEN_DIR"),
            "--expect-site-packages",
        ],
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_console_commands_report_the_installed_version() -> None:
    version = _setting("DS4_ARTIFACT_VERSION")
    engine = subprocess.run(
        [str(_bin("ds4-context")), "version"], capture_output=True, text=True, check=False, env=_clean_env()
    )
    assert engine.returncode == 0, engine.stderr
    assert engine.stdout.strip() == version
    reference = subprocess.run(
        [str(_bin("ds4-context-reference")), "--version"],
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
    )
    assert reference.returncode == 0, reference.stderr
    assert version in reference.stdout


def test_reference_adapter_passes_conformance_from_the_installed_wheels() -> None:
    from ds4_context_core.conformance import run_runtime_adapter_conformance_sync  # noqa: PLC0415
    from ds4_context_reference_adapter import conformance_factory  # noqa: PLC0415

    report = run_runtime_adapter_conformance_sync(conformance_factory)
    assert report.passed is True, report


def test_conformance_command_passes_for_the_reference_adapter() -> None:
    result = subprocess.run(
        [str(_bin("ds4-context-conformance")), CONFORMANCE_TARGET, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["passed"] is True


def test_conformance_command_fails_for_a_target_that_does_not_exist() -> None:
    result = subprocess.run(
        [str(_bin("ds4-context-conformance")), "ds4_context_reference_adapter:no_such_factory"],
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
    )
    assert result.returncode != 0
    assert "no_such_factory" in result.stdout + result.stderr


def test_pi_session_adapter_passes_conformance_from_the_installed_wheels() -> None:
    from ds4_context_core.conformance import run_runtime_adapter_conformance_sync  # noqa: PLC0415
    from ds4_context_engine.pi import pi_session_conformance_factory  # noqa: PLC0415

    report = run_runtime_adapter_conformance_sync(pi_session_conformance_factory())
    assert report.passed is True, report


def test_the_demo_runs_offline_from_the_installed_engine() -> None:
    result = subprocess.run(
        [str(_bin("ds4-context")), "demo"],
        capture_output=True,
        text=True,
        check=False,
        env={**_clean_env(), "COLUMNS": "120"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # The tour shows each layer and ends with a passing conformance run.
    for expected in ("receipt", "restore", "conformance"):
        assert expected in result.stdout.lower(), expected
