"""The reference adapter passes the runtime-adapter conformance kit, from source and from its commands."""

from __future__ import annotations

import glob
import subprocess
import sys
import tempfile

import pytest

from ds4_context_core.conformance import (
    CONFORMANCE_CASE_IDS,
    assert_runtime_adapter_conformance,
    run_runtime_adapter_conformance_sync,
)
from ds4_context_reference_adapter import conformance_factory


def _scratch_dirs() -> set[str]:
    return set(glob.glob(f"{tempfile.gettempdir()}/ds4-reference-conformance-*"))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_all_seven_cases_pass_and_scratch_directories_are_removed(backend, tmp_path, monkeypatch):
    # A private temporary directory: other test runs on the machine may create scratch directories too.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    created: list[str] = []
    make = tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        created.append(make(*args, **kwargs))
        return created[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    report = run_runtime_adapter_conformance_sync(conformance_factory, backend=backend)
    assert created
    assert all(path.startswith(str(tmp_path)) for path in created)
    assert_runtime_adapter_conformance(report)
    assert [case.id for case in report.cases] == list(CONFORMANCE_CASE_IDS)
    assert report.factory_name == "ds4-context-reference-adapter"
    assert report.skipped_parts == ()  # canonical records carry every part of the v2 fixture
    assert _scratch_dirs() == set()


def test_the_kit_command_and_our_command_both_pass():
    kit = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ds4_context_core.conformance import main; sys.exit(main(sys.argv[1:]))",
            "ds4_context_reference_adapter:conformance_factory",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert kit.returncode == 0, kit.stdout + kit.stderr
    ours = subprocess.run(
        [sys.executable, "-m", "ds4_context_reference_adapter", "conformance", "--backend", "trio"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ours.returncode == 0, ours.stdout + ours.stderr
    assert ours.stdout.splitlines()[-1] == "passed"
