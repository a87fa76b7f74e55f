"""``scripts/check_wheels.py`` on real freshly built distributions and tampered copies of them."""

from __future__ import annotations

import io
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

from conftest import repack_wheel, rewrite_wheel, run_script, wheel_text, workspace_version

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


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


def _member(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member)


def test_a_siblings_module_copied_inside_a_wheels_own_package_fails(dist_copy: Path) -> None:
    walk = _member(_wheel(dist_copy, "ds4_context_core"), "ds4_context_core/_privacy/_walk.py")
    # The same bytes at the same place, and a copy whose imports were rewritten to the engine's package.
    rewritten = walk.replace(b"ds4_context_core", b"ds4_context_engine")
    _tamper(
        dist_copy,
        "ds4_context_engine",
        add={"ds4_context_engine/_privacy/_walk.py": walk, "ds4_context_engine/_privacy_walk.py": rewritten},
    )
    code, output = _check(dist_copy)
    assert code == 1
    assert "WHL003" not in output, "the copies sit inside the engine's own package"
    engine = _wheel(dist_copy, "ds4_context_engine").name
    for copy in ("ds4_context_engine/_privacy/_walk.py", "ds4_context_engine/_privacy_walk.py"):
        original = "ds4-context-core's ds4_context_core/_privacy/_walk.py"
        assert f"error WHL015: {engine}: {copy} is a copy of {original}" in output


def test_a_siblings_data_file_copied_inside_a_wheels_own_package_fails(dist_copy: Path) -> None:
    member = "ds4_context_core/_adapter/_conformance/fixture-v2.json"
    fixture = _member(_wheel(dist_copy, "ds4_context_core"), member)
    _tamper(
        dist_copy, "ds4_context_reference_adapter", add={"ds4_context_reference_adapter/kit.json": fixture}
    )
    code, output = _check(dist_copy)
    assert code == 1
    assert f"ds4_context_reference_adapter/kit.json is a copy of ds4-context-core's {member}" in output
    assert output.count("error WHL015:") == 1, "the original is not reported as a copy of its copy"


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


def _check_compiled(dist: Path, *pythons: str) -> tuple[int, str]:
    result = run_script("check_wheels.py", dist, "--version", workspace_version(), "--compiled", *pythons)
    return result.returncode, result.stdout + result.stderr


def _add(dist: Path, wheel: Path, name: str | None = None) -> Path:
    return Path(shutil.copy2(wheel, dist / (name or wheel.name)))


def _repacked(dist: Path, wheel: Path, *, add: dict[str, bytes], drop: tuple[str, ...] = ()) -> Path:
    """The manylinux wheel with members changed and a RECORD that matches them, in ``dist``."""
    return repack_wheel(wheel, dist / wheel.name, add=add, drop=drop)


def test_the_release_set_with_compiled_core_wheels_passes(dist_copy: Path, manylinux_wheel: Path) -> None:
    _add(dist_copy, manylinux_wheel)
    code, output = _check_compiled(dist_copy)
    assert code == 0, output
    assert "three wheels (plus 1 compiled core wheel(s)) and three sdists" in output
    code, output = _check_compiled(dist_copy, PYTHON)
    assert code == 0, output
    code, output = _check_compiled(dist_copy, PYTHON, "3.99")
    assert code == 1
    assert "error WHL001:" in output
    assert "no compiled ds4-context-core wheel for cp399" in output
    # Without --compiled, a compiled wheel is one core wheel too many.
    code, output = _check(dist_copy)
    assert code == 1
    assert "expected one ds4-context-core wheel, found 2" in output


def test_a_local_linux_tag_is_refused(dist_copy: Path, compiled_wheel: Path) -> None:
    _add(dist_copy, compiled_wheel)
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert (
        f"error WHL010: {compiled_wheel.name}: platform tag linux_x86_64 is not a manylinux policy" in output
    )
    assert "refused by PyPI" in output


def test_compiled_mode_needs_the_pure_fallback_a_compiled_core_and_pure_adapters(
    dist_copy: Path, manylinux_wheel: Path
) -> None:
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "error WHL001:" in output
    assert "no compiled ds4-context-core wheel" in output
    _add(dist_copy, manylinux_wheel)
    engine = _wheel(dist_copy, "ds4_context_engine")
    engine.rename(dist_copy / engine.name.replace("py3-none-any.whl", manylinux_wheel.name.split("-", 2)[2]))
    _wheel(dist_copy, "ds4_context_core").unlink()
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert (
        "expected one pure ds4-context-core wheel (the fallback for every other platform), found 0" in output
    )
    assert "error WHL002: ds4_context_engine" in output
    assert "expected a pure py3-none-any wheel" in output


def test_a_compiled_core_wheel_must_keep_the_python_source(dist_copy: Path, manylinux_wheel: Path) -> None:
    _repacked(dist_copy, manylinux_wheel, add={}, drop=("ds4_context_core/_privacy/_walk.py",))
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "_privacy/_walk.py is missing beside its compiled one" in output
    assert "error WHL013:" in output
    assert "beyond extensions: ds4_context_core/_privacy/_walk.py" in output


def test_a_compiled_wheel_without_the_extension_module_fails(dist_copy: Path, manylinux_wheel: Path) -> None:
    with zipfile.ZipFile(manylinux_wheel) as archive:
        extension = next(
            n for n in archive.namelist() if n.startswith("ds4_context_core/_privacy/_walk.cpython")
        )
    _repacked(dist_copy, manylinux_wheel, add={}, drop=(extension,))
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "error WHL009:" in output
    assert "no compiled extension module for ds4_context_core/_privacy/_walk" in output


def test_every_module_the_build_hook_compiles_must_be_compiled(
    dist_copy: Path, manylinux_wheel: Path
) -> None:
    with zipfile.ZipFile(manylinux_wheel) as archive:
        names = archive.namelist()
    # The planner's group (hatch_build.py COMPILED): a shim per module and the group's shared library.
    index = next(n for n in names if n.startswith("ds4_context_core/_planner/_index.cpython"))
    library = next(n for n in names if n.startswith("ds4_context_core/_planner/_native__mypyc.cpython"))
    _repacked(dist_copy, manylinux_wheel, add={}, drop=(index, library))
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "no compiled extension module for ds4_context_core/_planner/_index" in output
    assert "no compiled group library ds4_context_core/_planner/_native__mypyc" in output
    assert "_planner/_budget" not in output, "the module still compiled is not reported"


def test_an_extension_for_another_python_or_place_fails(dist_copy: Path, manylinux_wheel: Path) -> None:
    other = "ds4_context_core/_other.cpython-399-x86_64-linux-gnu.so"
    _repacked(dist_copy, manylinux_wheel, add={other: b"\x7fELF", "_top.abi3.so": b"\x7fELF"})
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert f"error WHL012: {manylinux_wheel.name}: extension module {other} is not" in output
    assert f".cpython-{PYTHON.replace('.', '')}-x86_64-linux-gnu.so" in output
    assert "extension module _top.abi3.so is not" in output
    # The same when the wheel carries only the legacy name of its policy.
    legacy = manylinux_wheel.name.replace("manylinux_2_17_x86_64.", "")
    repacked = dist_copy / manylinux_wheel.name
    repacked.rename(dist_copy / legacy)
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert f"error WHL012: {legacy}: extension module {other} is not" in output


def test_a_compiled_wheel_whose_files_differ_from_the_pure_one_fails(
    dist_copy: Path, manylinux_wheel: Path
) -> None:
    changed = wheel_text(manylinux_wheel, "ds4_context_core/__init__.py") + "\nCHANGED = True\n"
    _repacked(
        dist_copy,
        manylinux_wheel,
        add={"ds4_context_core/__init__.py": changed.encode()},
        drop=("ds4_context_core/__init__.py",),
    )
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "error WHL013:" in output
    assert "beyond extensions: ds4_context_core/__init__.py" in output
    assert "WHL014" not in output, "the repacked RECORD matches"


def test_a_compiled_wheel_whose_record_is_stale_fails(dist_copy: Path, manylinux_wheel: Path) -> None:
    rewrite_wheel(
        manylinux_wheel, dist_copy / manylinux_wheel.name, replace={"ds4_context_core/py.typed": b"stale"}
    )
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert "error WHL014:" in output
    assert "ds4_context_core/py.typed does not match its RECORD entry" in output


def test_tags_of_a_compiled_wheel_must_agree_with_its_wheel_file_and_one_policy(
    dist_copy: Path, manylinux_wheel: Path
) -> None:
    prefix = manylinux_wheel.name.split("manylinux_", 1)[0]
    renamed = _add(dist_copy, manylinux_wheel, f"{prefix}manylinux_2_28_x86_64.whl")
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert f"error WHL011: {renamed.name}: its WHEEL file lists tags" in output
    renamed.unlink()
    mixed = _add(dist_copy, manylinux_wheel, f"{prefix}manylinux_2_17_x86_64.manylinux2010_x86_64.whl")
    code, output = _check_compiled(dist_copy)
    assert code == 1
    assert f"error WHL010: {mixed.name}: platform tags" in output
    assert "name more than one manylinux policy" in output
