"""``scripts/registry_check.py`` end to end against a real pypiserver on 127.0.0.1.

Fresh wheels are built from a copy of the workspace, uploaded with ``twine upload`` to a pypiserver
started on a free port with a temporary package directory, and checked exactly as a release is checked
after publication. Every server is stopped by its pid.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from conftest import (
    SCRIPTS,
    clean_env,
    repack_wheel,
    rewrite_wheel,
    run_script,
    tool,
    wheel_text,
    workspace_version,
)

Server = Callable[[list[Path]], str]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_until_serving(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"pypiserver exited early with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"pypiserver did not answer on {url}")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Server]:
    """Start a pypiserver per call, upload ``files`` with twine, return its simple index URL."""
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []

    def start(files: list[Path]) -> str:
        packages = tmp_path / f"index-{len(processes)}"
        packages.mkdir()
        port = _free_port()
        command = [tool("pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port), "-a", ".", "-P", "."]
        command += ["--disable-fallback", str(packages)]
        logs.append((tmp_path / f"server-{len(processes)}.log").open("wb"))
        process = subprocess.Popen(command, stdout=logs[-1], stderr=subprocess.STDOUT)
        processes.append(process)
        _wait_until_serving(f"http://127.0.0.1:{port}/simple/", process)
        upload = subprocess.run(
            [
                *(
                    tool("twine"),
                    "upload",
                    "--repository-url",
                    f"http://127.0.0.1:{port}/",
                    "-u",
                    "ci",
                    "-p",
                    "ci",
                ),
                *("--non-interactive", "--disable-progress-bar", *map(str, files)),
            ],
            capture_output=True,
            text=True,
            check=False,
            env=clean_env(),
            timeout=120,
        )
        assert upload.returncode == 0, upload.stdout + upload.stderr
        assert sorted(p.name for p in packages.iterdir()) == sorted(f.name for f in files)
        return f"http://127.0.0.1:{port}/simple/"

    try:
        yield start
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in logs:
            log.close()


def _wheels(dist: Path) -> list[Path]:
    return sorted(dist.glob("*.whl"))


def _sdists(dist: Path) -> list[Path]:
    return sorted(dist.glob("*.tar.gz"))


def _release(dist: Path) -> list[Path]:
    """What a release uploads: the wheels and the sdists."""
    return [*_wheels(dist), *_sdists(dist)]


def test_a_published_release_passes_the_registry_check(built_dist: Path, serve: Server) -> None:
    index = serve(_release(built_dist))
    result = run_script("registry_check.py", workspace_version(), "--index-url", index)
    output = result.stdout + result.stderr
    assert "ok: the index lists one pure wheel with a sha256 for each of the three" in output
    assert "compiled core wheel" not in output
    assert "ok: downloaded wheels match the index's sha256" in output
    assert "ok: installed" in output, output
    assert "ok: the clean venv imports the privacy hot path from the pure _privacy/_walk.py" in output
    assert "ok: conformance passes" in output
    assert result.returncode == 0, output
    assert "registry check passed" in output


def _for_another_python(wheel: Path, directory: Path) -> Path:
    """A copy of the compiled wheel named for a CPython that does not exist: no installer may pick it."""
    ours = f"cp{sys.version_info.major}{sys.version_info.minor}"
    directory.mkdir(exist_ok=True)
    return Path(shutil.copy2(wheel, directory / wheel.name.replace(f"{ours}-{ours}", "cp399-cp399")))


def test_this_platform_gets_the_compiled_core_wheel_and_others_the_pure_one(
    built_dist: Path, manylinux_wheel: Path, serve: Server, tmp_path: Path
) -> None:
    version = workspace_version()
    other = _for_another_python(manylinux_wheel, tmp_path / "other")
    index = serve([*_release(built_dist), manylinux_wheel, other])
    result = run_script("registry_check.py", version, "--index-url", index)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"at {version}, and 2 compiled core wheel(s)" in output
    assert f"ok: pip chose the compiled {manylinux_wheel.name} for this platform and Python" in output
    assert f"ok: for other platforms pip gets the pure ds4_context_core-{version}-py3-none-any.whl" in output
    assert "ok: the clean venv imports the privacy hot path from the compiled extension module" in output
    assert "ok: conformance passes" in output


def test_compiled_core_wheels_without_the_pure_fallback_fail(
    built_dist: Path, manylinux_wheel: Path, serve: Server
) -> None:
    files = [w for w in _release(built_dist) if not w.name.startswith("ds4_context_core-")]
    result = run_script(
        "registry_check.py", workspace_version(), "--index-url", serve([*files, manylinux_wheel])
    )
    assert result.returncode == 1
    assert "error REG003:" in result.stderr
    expected = f"expected one pure ds4-context-core {workspace_version()} wheel beside its compiled ones"
    assert expected in result.stderr


def test_a_compiled_wheel_that_imports_the_pure_module_fails(
    built_dist: Path, manylinux_wheel: Path, serve: Server, tmp_path: Path
) -> None:
    with zipfile.ZipFile(manylinux_wheel) as archive:
        extensions = tuple(name for name in archive.namelist() if name.endswith(".so"))
    assert extensions
    (tmp_path / "hollow").mkdir()
    hollow = repack_wheel(manylinux_wheel, tmp_path / "hollow" / manylinux_wheel.name, drop=extensions)
    result = run_script(
        "registry_check.py", workspace_version(), "--index-url", serve([*_release(built_dist), hollow])
    )
    assert result.returncode == 1
    assert f"ok: pip chose the compiled {hollow.name}" in result.stdout
    assert "error REG013:" in result.stderr
    assert "_privacy/_walk.py, expected the compiled extension module" in result.stderr


def test_which_compiled_wheels_fit_this_interpreter() -> None:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from registry_check import matches_this_interpreter  # noqa: PLC0415
    finally:
        sys.path.remove(str(SCRIPTS))
    ours = f"cp{sys.version_info.major}{sys.version_info.minor}"
    machine = platform.machine().lower()
    fits = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
    assert (
        matches_this_interpreter(f"x-1.0-{ours}-{ours}-manylinux_2_17_{machine}.manylinux2014_{machine}.whl")
        is fits
    )
    assert matches_this_interpreter(f"x-1.0-{ours}-{ours}-manylinux2014_{machine}.whl") is fits
    assert not matches_this_interpreter(f"x-1.0-{ours}-{ours}-manylinux_2_999_{machine}.whl")
    assert not matches_this_interpreter(f"x-1.0-{ours}-{ours}-manylinux_2_17_not{machine}.whl")
    assert not matches_this_interpreter(f"x-1.0-cp399-cp399-manylinux_2_17_{machine}.whl")
    assert not matches_this_interpreter("x-1.0-py3-none-any.whl")


@pytest.mark.parametrize("version", ["0.1", "latest", ">=0.1.0", "==0.1.0", "0.1.0+local", "0.1.*", "v0.1.0"])
def test_anything_but_an_exact_version_is_refused(version: str) -> None:
    result = run_script("registry_check.py", version, "--index-url", "http://127.0.0.1:9/simple/")
    assert result.returncode == 1
    assert "error REG001:" in result.stderr


def test_a_wrong_core_pin_on_the_index_fails(built_dist: Path, serve: Server, tmp_path: Path) -> None:
    version = workspace_version()
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    files = []
    for wheel in _wheels(built_dist):
        if wheel.name.startswith("ds4_context_reference_adapter-"):
            member = f"ds4_context_reference_adapter-{version}.dist-info/METADATA"
            metadata = wheel_text(wheel, member).replace(
                f"ds4-context-core=={version}", "ds4-context-core==0.0.9"
            )
            files.append(rewrite_wheel(wheel, tampered / wheel.name, replace={member: metadata.encode()}))
        else:
            files.append(wheel)
    result = run_script("registry_check.py", version, "--index-url", serve([*files, *_sdists(built_dist)]))
    assert result.returncode == 1
    assert "error REG007:" in result.stderr
    assert "ds4-context-core==0.0.9" in result.stderr


def test_a_wheel_whose_metadata_disagrees_with_its_name_fails(
    built_dist: Path, serve: Server, tmp_path: Path
) -> None:
    version = workspace_version()
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    files = []
    for wheel in _wheels(built_dist):
        if wheel.name.startswith("ds4_context_engine-"):
            member = f"ds4_context_engine-{version}.dist-info/METADATA"
            metadata = wheel_text(wheel, member).replace(f"\nVersion: {version}\n", "\nVersion: 0.0.9\n")
            files.append(rewrite_wheel(wheel, tampered / wheel.name, replace={member: metadata.encode()}))
        else:
            files.append(wheel)
    result = run_script("registry_check.py", version, "--index-url", serve([*files, *_sdists(built_dist)]))
    assert result.returncode == 1
    # pip itself refuses a wheel whose METADATA contradicts its file name; either way it must fail here.
    assert "error REG004:" in result.stderr or "error REG006:" in result.stderr
    assert "ds4-context-engine" in result.stderr


def test_a_release_missing_one_distribution_fails(built_dist: Path, serve: Server) -> None:
    files = [w for w in _release(built_dist) if not w.name.startswith("ds4_context_engine-")]
    result = run_script("registry_check.py", workspace_version(), "--index-url", serve(files))
    assert result.returncode == 1
    assert "error REG003:" in result.stderr
    assert "ds4-context-engine" in result.stderr


def test_a_version_that_was_never_published_fails(built_dist: Path, serve: Server) -> None:
    result = run_script("registry_check.py", "9.9.9", "--index-url", serve(_release(built_dist)))
    assert result.returncode == 1
    assert "error REG003:" in result.stderr


def test_an_unreachable_index_fails_clearly() -> None:
    port = _free_port()
    result = run_script("registry_check.py", "0.1.0", "--index-url", f"http://127.0.0.1:{port}/simple/")
    assert result.returncode == 1
    assert "error REG002:" in result.stderr


def test_a_file_whose_sha256_differs_from_the_index_fails(built_dist: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from _dists import read_wheel  # noqa: PLC0415
        from _release import DISTRIBUTIONS  # noqa: PLC0415
        from registry_check import IndexFile, _verify  # noqa: PLC0415
    finally:
        sys.path.remove(str(SCRIPTS))
    wheel = next(w for w in _wheels(built_dist) if w.name.startswith("ds4_context_core-"))
    copy = Path(shutil.copy2(wheel, tmp_path / wheel.name))
    listed = IndexFile(copy.name, f"http://example.invalid/{copy.name}", "0" * 64)
    problems = _verify(read_wheel(copy), DISTRIBUTIONS[0], workspace_version(), listed)
    assert [problem.code for problem in problems] == ["REG005"]
    right = IndexFile(copy.name, listed.url, hashlib.sha256(copy.read_bytes()).hexdigest())
    assert _verify(read_wheel(copy), DISTRIBUTIONS[0], workspace_version(), right) == []
    mismatched = _verify(read_wheel(copy), DISTRIBUTIONS[0], "9.9.9", right)
    assert [problem.code for problem in mismatched] == ["REG006"]


def test_a_release_whose_adapter_fails_conformance_fails(
    built_dist: Path, serve: Server, tmp_path: Path
) -> None:
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    files = []
    for wheel in _wheels(built_dist):
        if wheel.name.startswith("ds4_context_reference_adapter-"):
            member = "ds4_context_reference_adapter/__init__.py"
            broken = (
                wheel_text(wheel, member)
                + "\n\ndef conformance_factory():\n    raise RuntimeError('broken')\n"
            )
            files.append(rewrite_wheel(wheel, tampered / wheel.name, replace={member: broken.encode()}))
        else:
            files.append(wheel)
    index = serve([*files, *_sdists(built_dist)])
    result = run_script("registry_check.py", workspace_version(), "--index-url", index)
    assert result.returncode == 1
    assert "ok: installed" in result.stdout
    assert "error REG010:" in result.stderr
