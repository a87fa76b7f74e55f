"""Shared helpers for the release-tooling tests: temporary workspace copies, built wheels, script runs."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import platform
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
BIN = Path(sys.executable).parent
_CACHES = shutil.ignore_patterns(
    "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"
)


def tool(name: str) -> str:
    """A console command of the running environment (uv, twine, pypi-server, lint-imports)."""
    candidate = BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed in the test environment")
    return found


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without Python path overrides, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.update(extra)
    return env


def run_script(
    name: str, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<name>`` with this interpreter, capturing its output."""
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env=env or clean_env(),
        timeout=600,
    )


def copy_workspace(destination: Path) -> Path:
    """A copy of the workspace's packages and root configuration to mutate freely."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "uv.lock", ".gitignore"):
        shutil.copy2(ROOT / name, destination / name)
    shutil.copytree(ROOT / "packages", destination / "packages", ignore=_CACHES)
    return destination


def replace_in(path: Path, old: str, new: str) -> None:
    """Replace one exact occurrence of ``old``; fails the test when it is not there."""
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not found in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def rewrite_wheel(
    source: Path,
    destination: Path,
    *,
    replace: dict[str, bytes] | None = None,
    add: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
) -> Path:
    """Copy a wheel, replacing, adding or dropping members (RECORD is left as is: a tampered wheel)."""
    replace = replace or {}
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as copy:
        for info in original.infolist():
            if info.filename in drop:
                continue
            copy.writestr(info, replace.get(info.filename, original.read(info.filename)))
        for name, data in (add or {}).items():
            copy.writestr(name, data)
    return destination


def repack_wheel(
    source: Path, destination: Path, *, add: dict[str, bytes] | None = None, drop: tuple[str, ...] = ()
) -> Path:
    """Copy a wheel, adding or dropping members, with a RECORD that matches (a consistent wheel)."""
    add = add or {}
    with zipfile.ZipFile(source) as original:
        members = [(info, original.read(info)) for info in original.infolist() if info.filename not in drop]
    record_name = next(info.filename for info, _ in members if info.filename.endswith(".dist-info/RECORD"))
    contents = [(info.filename, data) for info, data in members if info.filename != record_name]
    contents += sorted(add.items())
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for name, data in contents:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow([record_name, "", ""])
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as copy:
        for name, data in contents:
            copy.writestr(name, data)
        copy.writestr(record_name, rows.getvalue())
    return destination


def wheel_text(wheel: Path, member: str) -> str:
    """One text member of a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member).decode("utf-8")


@pytest.fixture(scope="session")
def built_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fresh wheels and sdists of all three members, built from a copy of the workspace."""
    base = tmp_path_factory.mktemp("built")
    source = copy_workspace(base / "source")
    out = base / "dist"
    subprocess.run(
        [tool("uv"), "build", "--all-packages", "--no-sources", "--no-config", "--out-dir", str(out)],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


# Compiled wheels are built and tagged manylinux for Linux x86_64 only (docs/contributing/release.md).
LINUX_X86_64 = sys.platform == "linux" and platform.machine() == "x86_64"
COMPILED_BUILD_ENV = {"HATCH_BUILD_HOOK_ENABLE_CUSTOM": "true"}


@pytest.fixture(scope="session")
def compiled_wheel(built_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mypyc-compiled core wheel for the running Python, built from the fresh core sdist (as released)."""
    if not LINUX_X86_64:
        pytest.skip("compiled release wheels are built on Linux x86_64 only")
    out = tmp_path_factory.mktemp("compiled")
    with (ROOT / "pyproject.toml").open("rb") as handle:
        constraints: list[str] = tomllib.load(handle)["tool"]["uv"]["build-constraint-dependencies"]
    constraints_file = out / "build-constraints.txt"
    constraints_file.write_text("\n".join(constraints) + "\n", encoding="utf-8")
    sdist = built_dist / f"ds4_context_core-{workspace_version()}.tar.gz"
    subprocess.run(
        [
            *(tool("uv"), "build", str(sdist), "--wheel", "--no-config", "--python", sys.executable),
            *("--build-constraints", str(constraints_file), "--out-dir", str(out / "wheel")),
        ],
        check=True,
        capture_output=True,
        timeout=600,
        env=clean_env(**COMPILED_BUILD_ENV),
    )
    (wheel,) = (out / "wheel").glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def manylinux_wheel(compiled_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``compiled_wheel`` verified by auditwheel and retagged by ``scripts/retag_manylinux.py``."""
    out = tmp_path_factory.mktemp("manylinux")
    result = run_script("retag_manylinux.py", compiled_wheel, "--out-dir", out)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture
def dist_copy(built_dist: Path, tmp_path: Path) -> Path:
    """A private copy of the built distributions, to tamper with."""
    return Path(shutil.copytree(built_dist, tmp_path / "dist"))


def workspace_version() -> str:
    """The version every member carries."""
    for line in (ROOT / "packages" / "ds4-context-core" / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("core declares no version")
