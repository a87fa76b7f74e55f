"""``scripts/release_rehearsal.py``: the release served from a real local index on 127.0.0.1, then checked.

The rehearsal writes a PEP 503 directory, serves it with ``python -m http.server`` on a free port and runs
the registry check against it, on every Python the release supports (3.11, 3.12 and 3.13, found through
pyenv as ``PYENV_VERSION`` names them), including the sdist check.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import clean_env, run_script, workspace_version

PYENV_VERSION = os.environ.get("DS4_TEST_PYENV_VERSION", "3.11.7:3.12.1:3.13.0")
OTHER_PYTHONS = ("3.12", "3.13")


def _pythons_env() -> dict[str, str]:
    found = [name for name in OTHER_PYTHONS if shutil.which(f"python{name}")]
    if len(found) != len(OTHER_PYTHONS):
        if os.environ.get("CI"):
            pytest.fail(f"the release Pythons {OTHER_PYTHONS} must be installed in CI")
        pytest.skip("CPython 3.12 and 3.13 are not installed")
    return clean_env(PYENV_VERSION=PYENV_VERSION)


def test_a_rehearsal_serves_the_release_locally_and_passes_the_check_on_three_pythons(
    built_dist: Path,
) -> None:
    version = workspace_version()
    pythons = [option for python in ("3.11", *OTHER_PYTHONS) for option in ("--python", python)]
    result = run_script("release_rehearsal.py", "--dist", built_dist, *pythons, env=_pythons_env())
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"ok: 6 files of {version} on a local PEP 503 index" in output
    assert "ok: serving it on http://127.0.0.1:" in output
    for python in ("3.11", "3.12", "3.13"):
        assert f"clean CPython {python} venv from the downloaded files only" in output
        assert f"ok: conformance passes from the installed {version} wheels (CPython {python})" in output
    assert "ok: each sdist matches its sha256 and builds a wheel identical to the released one" in output
    assert f"release rehearsal passed: {version}" in output


def _with_extra_file(sdist: Path, out: Path) -> Path:
    """``sdist`` with one more module in its package: the wheel it builds is not the released one."""
    out.mkdir(exist_ok=True)
    copy = out / sdist.name
    with tarfile.open(sdist, "r:gz") as source, tarfile.open(copy, "w:gz") as target:
        package_dir = None
        for member in source.getmembers():
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
            if member.name.endswith("/__init__.py") and package_dir is None and "/src/" in member.name:
                package_dir = member.name.rsplit("/", 1)[0]
        assert package_dir is not None
        data = b"SMUGGLED = True\n"
        extra = tarfile.TarInfo(f"{package_dir}/_smuggled.py")
        extra.size = len(data)
        extra.mtime = 0
        target.addfile(extra, io.BytesIO(data))
    return copy


def test_an_sdist_that_does_not_build_the_released_wheel_fails(built_dist: Path, tmp_path: Path) -> None:
    dist = Path(shutil.copytree(built_dist, tmp_path / "dist"))
    sdist = dist / f"ds4_context_engine-{workspace_version()}.tar.gz"
    tampered = _with_extra_file(sdist, tmp_path / "tampered")
    shutil.copy2(tampered, sdist)
    result = run_script("release_rehearsal.py", "--dist", dist)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ok: conformance passes" in result.stdout  # the wheels themselves are fine
    assert "error REG015:" in result.stderr
    assert "_smuggled.py" in result.stderr


def test_a_release_without_its_sdists_fails(built_dist: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    for wheel in built_dist.glob("*.whl"):
        shutil.copy2(wheel, dist / wheel.name)
    result = run_script("release_rehearsal.py", "--dist", dist)
    assert result.returncode == 1
    assert "error REG014:" in result.stderr
    assert "sdist with a #sha256= digest" in result.stderr


def test_a_directory_with_two_versions_is_refused(built_dist: Path, tmp_path: Path) -> None:
    dist = Path(shutil.copytree(built_dist, tmp_path / "dist"))
    wheel = next(dist.glob("ds4_context_engine-*.whl"))
    shutil.copy2(wheel, dist / wheel.name.replace(workspace_version(), "9.9.9"))
    result = run_script("release_rehearsal.py", "--dist", dist)
    assert result.returncode == 1
    assert "error REH001:" in result.stderr
