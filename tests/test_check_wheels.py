"""``scripts/check_wheels.py`` on real freshly built distributions and tampered copies of them."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from conftest import rewrite_wheel, run_script, wheel_text, workspace_version


def _wheel(dist: Path, stem: str) -> Path:
    return dist / f"{stem}-{workspace_version()}-py3-none-any.whl"


def _metadata_name(stem: str) -> str:
    return f"{stem}-{workspace_version()}.dist-info/METADATA"


def _tamper(
    dist: Path,
    stem: str,
    *,
    replace: dict[str, bytes] | None = None,
    add: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
) -> None:
    wheel = _wheel(dist, stem)
    rewrite_wheel(wheel, dist / "tampered.tmp", replace=replace, add=add, drop=drop).replace(wheel)


def _check(dist: Path) -> tuple[int, str]:
    result = run_script("check_wheels.py", dist, "--version", workspace_version())
    return result.returncode, result.stdout + result.stderr


def test_fresh_build_passes(built_dist: Path) -> None:
    code, output = _check(built_dist)
    assert code == 0, output
    assert "three wheels and three sdists" in output


def test_a_stray_sibling_file_in_a_wheel_fails(dist_copy: Path) -> None:
    _tamper(dist_copy, "ds4_context_engine", add={"ds4_context_core/leaked.py": b"LEAK = 1\n"})
    code, output = _check(dist_copy)
    assert code == 1
    assert "error WHL003:" in output
    assert "ds4_context_core/leaked.py" in output


def test_a_top_level_stray_file_fails(dist_copy: Path) -> None:
    _tamper(dist_copy, "ds4_context_core", add={"conftest.py": b""})
    code, output = _check(dist_copy)
    assert code == 1
    assert "stray file conftest.py" in output


def test_a_wrong_core_pin_in_wheel_metadata_fails(dist_copy: Path) -> None:
    version = workspace_version()
    member = _metadata_name("ds4_context_reference_adapter")
    metadata = wheel_text(_wheel(dist_copy, "ds4_context_reference_adapter"), member)
    pinned = f"Requires-Dist: ds4-context-core=={version}"
    assert pinned in metadata
    wrong = metadata.replace(pinned, "Requires-Dist: ds4-context-core==0.0.9").encode()
    _tamper(dist_copy, "ds4_context_reference_adapter", replace={member: wrong})
    code, output = _check(dist_copy)
    assert code == 1
    assert "error WHL006:" in output
    assert "ds4-context-core==0.0.9" in output


def test_a_range_on_core_fails(dist_copy: Path) -> None:
    version = workspace_version()
    member = _metadata_name("ds4_context_engine")
    metadata = wheel_text(_wheel(dist_copy, "ds4_context_engine"), member)
    loose = metadata.replace(f"ds4-context-core=={version}", f"ds4-context-core>={version}").encode()
    _tamper(dist_copy, "ds4_context_engine", replace={member: loose})
    code, output = _check(dist_copy)
    assert code == 1
    assert "error WHL006:" in output


def test_core_depending_on_a_sibling_fails(dist_copy: Path) -> None:
    member = _metadata_name("ds4_context_core")
    metadata = wheel_text(_wheel(dist_copy, "ds4_context_core"), member)
    version = workspace_version()
    extra = f"Requires-Dist: ds4-context-engine=={version}\n"
    head, _, body = metadata.partition("\n\n")
    _tamper(dist_copy, "ds4_context_core", replace={member: (head + "\n" + extra + "\n" + body).encode()})
    code, output = _check(dist_copy)
    assert code == 1
    assert "must not depend on ds4-context-engine" in output


def test_a_missing_py_typed_fails(dist_copy: Path) -> None:
    _tamper(dist_copy, "ds4_context_engine", drop=("ds4_context_engine/py.typed",))
    code, output = _check(dist_copy)
    assert code == 1
    assert "error WHL004:" in output


def test_a_missing_distribution_fails(dist_copy: Path) -> None:
    _wheel(dist_copy, "ds4_context_reference_adapter").unlink()
    (dist_copy / f"ds4_context_engine-{workspace_version()}.tar.gz").unlink()
    code, output = _check(dist_copy)
    assert code == 1
    assert "expected one ds4-context-reference-adapter wheel, found 0" in output
    assert f"ds4_context_engine-{workspace_version()}.tar.gz is missing" in output


def test_a_version_other_than_expected_fails(built_dist: Path) -> None:
    result = run_script("check_wheels.py", built_dist, "--version", "9.9.9")
    assert result.returncode == 1
    assert "error WHL005:" in result.stderr


def test_an_sdist_carrying_a_siblings_source_fails(dist_copy: Path) -> None:
    version = workspace_version()
    sdist = dist_copy / f"ds4_context_reference_adapter-{version}.tar.gz"
    top = f"ds4_context_reference_adapter-{version}"
    with tarfile.open(sdist, "r:gz") as original:
        members = [(info, original.extractfile(info)) for info in original.getmembers()]
        payload = [(info, handle.read() if handle else None) for info, handle in members]
    with tarfile.open(sdist, "w:gz") as rebuilt:
        for info, data in payload:
            rebuilt.addfile(info, io.BytesIO(data) if data is not None else None)
        stray = tarfile.TarInfo(f"{top}/src/ds4_context_engine/__init__.py")
        stray.size = 0
        rebuilt.addfile(stray, io.BytesIO(b""))
    code, output = _check(dist_copy)
    assert code == 1
    assert "error WHL008:" in output
    assert "src/ds4_context_engine/__init__.py" in output


_EXTENSION = "ds4_context_core/_privacy_walk.cpython-311-x86_64-linux-gnu.so"


def _as_compiled(dist: Path, stem: str, *, add: dict[str, bytes], drop: tuple[str, ...] = ()) -> None:
    """Turn a pure wheel into a stand-in for a compiled one: extension members and CPython tags."""
    _tamper(dist, stem, add=add, drop=drop)
    wheel = _wheel(dist, stem)
    wheel.rename(dist / wheel.name.replace("-py3-none-any.whl", "-cp311-cp311-linux_x86_64.whl"))


def _check_compiled(dist: Path) -> tuple[int, str]:
    result = run_script("check_wheels.py", dist, "--version", workspace_version(), "--compiled")
    return result.returncode, result.stdout + result.stderr


def test_a_compiled_core_wheel_passes_only_when_one_is_expected(dist_copy: Path) -> None:
    _as_compiled(dist_copy, "ds4_context_core", add={_EXTENSION: b"\x7fELF"})
    code, output = _check_compiled(dist_copy)
    assert code == 0, output
    assert "three wheels (core compiled) and three sdists" in output
    code, output = _check(dist_copy)
    assert code == 1
    assert "error WHL002:" in output
    assert "expected a pure py3-none-any wheel" in output


def test_compiled_mode_refuses_a_pure_core_wheel_and_a_compiled_adapter(dist_copy: Path) -> None:
    _as_compiled(dist_copy, "ds4_context_engine", add={})
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "error WHL009: ds4_context_core" in output
    assert "no compiled extension module for ds4_context_core/_privacy_walk" in output
    assert "error WHL002: ds4_context_engine" in output


def test_a_compiled_core_wheel_must_keep_the_python_source(dist_copy: Path) -> None:
    _as_compiled(
        dist_copy,
        "ds4_context_core",
        add={_EXTENSION: b"\x7fELF"},
        drop=("ds4_context_core/_privacy_walk.py",),
    )
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "_privacy_walk.py is missing beside its compiled one" in output
