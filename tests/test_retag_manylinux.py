"""``scripts/retag_manylinux.py`` on the real compiled core wheel and on wheels auditwheel must refuse.

The refused wheels are the real compiled wheel plus one extra shared object compiled here with the
system C compiler: one that needs a library outside the manylinux whitelist, one that needs a newer
glibc than manylinux_2_17. Their RECORD is correct, so only auditwheel's verdict can refuse them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import (
    LINUX_X86_64,
    SCRIPTS,
    repack_wheel,
    rewrite_wheel,
    run_script,
    tool,
    wheel_text,
    workspace_version,
)

pytestmark = pytest.mark.skipif(not LINUX_X86_64, reason="manylinux wheels are made on Linux x86_64")

PYTHON_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
EXTRA = (
    f"ds4_context_core/_extra.cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"
)


def _cc(tmp_path: Path, name: str, source: str, *args: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("a C compiler is needed (the compiled core wheel needs one too)")
    (tmp_path / f"{name}.c").write_text(source, encoding="utf-8")
    output = tmp_path / name
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(output), str(tmp_path / f"{name}.c"), *args],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return output


def _with_extra(compiled_wheel: Path, tmp_path: Path, shared_object: Path) -> Path:
    bad = tmp_path / "bad"
    bad.mkdir()
    return repack_wheel(compiled_wheel, bad / compiled_wheel.name, add={EXTRA: shared_object.read_bytes()})


def _retag(wheel: Path, out: Path, *args: str) -> tuple[int, str]:
    result = run_script("retag_manylinux.py", wheel, "--out-dir", out, *args)
    return result.returncode, result.stdout + result.stderr


def _members(wheel: Path) -> dict[str, tuple[bytes, tuple[int, ...], int]]:
    with zipfile.ZipFile(wheel) as archive:
        return {
            info.filename: (archive.read(info), info.date_time, info.external_attr)
            for info in archive.infolist()
        }


def test_a_verified_wheel_is_retagged_byte_identically(compiled_wheel: Path, tmp_path: Path) -> None:
    outputs = []
    for attempt in ("one", "two"):
        code, output = _retag(compiled_wheel, tmp_path / attempt)
        assert code == 0, output
        (wheel,) = (tmp_path / attempt).iterdir()
        outputs.append(wheel)
    first, second = outputs
    version = workspace_version()
    assert first.name == (
        f"ds4_context_core-{version}-{PYTHON_TAG}-{PYTHON_TAG}-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    )
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    dist_info = f"ds4_context_core-{version}.dist-info"
    tags = [line for line in wheel_text(first, f"{dist_info}/WHEEL").splitlines() if line.startswith("Tag:")]
    assert tags == [
        f"Tag: {PYTHON_TAG}-{PYTHON_TAG}-manylinux_2_17_x86_64",
        f"Tag: {PYTHON_TAG}-{PYTHON_TAG}-manylinux2014_x86_64",
    ]
    before, after = _members(compiled_wheel), _members(first)
    assert list(before) == list(after), "same members in the same order"
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {f"{dist_info}/WHEEL", f"{dist_info}/RECORD"}
    assert {entry[1:] for entry in after.values()} == {entry[1:] for entry in before.values()}
    sys.path.insert(0, str(SCRIPTS))
    try:
        from _dists import record_problems  # noqa: PLC0415
    finally:
        sys.path.remove(str(SCRIPTS))
    assert record_problems(first) == []
    # auditwheel itself agrees with the new name.
    shown = subprocess.run(
        [tool("auditwheel"), "show", "--json", str(first)], capture_output=True, text=True, check=True
    )
    assert json.loads(shown.stdout)["overall_tag"] == "manylinux_2_17_x86_64"


def test_a_wheel_needing_an_external_library_is_refused(compiled_wheel: Path, tmp_path: Path) -> None:
    library = _cc(
        tmp_path, "libds4ext.so.1", "int ds4_ext(void) { return 1; }\n", "-Wl,-soname,libds4ext.so.1"
    )
    extension = _cc(
        tmp_path,
        "uses_ext.so",
        "int ds4_ext(void);\nint use(void) { return ds4_ext(); }\n",
        f"-L{library.parent}",
        "-l:libds4ext.so.1",
        f"-Wl,-rpath,{library.parent}",
    )
    bad = _with_extra(compiled_wheel, tmp_path, extension)
    code, output = _retag(bad, tmp_path / "out")
    assert code == 1
    assert f"error MNL003: {bad.name}: needs external shared libraries" in output
    assert "libds4ext.so.1" in output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_wheel_needing_a_newer_glibc_is_refused_unless_the_policy_allows_it(
    compiled_wheel: Path, tmp_path: Path
) -> None:
    # reallocarray carries the symbol version GLIBC_2.26: newer than manylinux_2_17's 2.17.
    source = "#include <stddef.h>\nvoid *reallocarray(void *, size_t, size_t);\n"
    source += "void *grow(void *p, size_t n) { return reallocarray(p, n, 8); }\n"
    bad = _with_extra(compiled_wheel, tmp_path, _cc(tmp_path, "newer.so", source))
    code, output = _retag(bad, tmp_path / "refused")
    assert code == 1
    assert f"error MNL004: {bad.name}: its versioned symbols need glibc 2.26" in output
    assert "libc.so.6: GLIBC_2.26" in output
    assert "newer than manylinux_2_17_x86_64 allows" in output
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    # The same wheel passes a policy that allows glibc 2.26 (and that policy has no legacy alias).
    code, output = _retag(bad, tmp_path / "allowed", "--policy", "manylinux_2_28_x86_64")
    assert code == 0, output
    (wheel,) = (tmp_path / "allowed").iterdir()
    assert wheel.name.endswith(f"-{PYTHON_TAG}-{PYTHON_TAG}-manylinux_2_28_x86_64.whl")


def test_one_refused_wheel_means_none_is_written(compiled_wheel: Path, tmp_path: Path) -> None:
    tampered = rewrite_wheel(
        compiled_wheel,
        tmp_path / compiled_wheel.name,
        replace={"ds4_context_core/_privacy/_walk.py": b"CHANGED = True\n"},
    )
    out = tmp_path / "out"
    result = run_script("retag_manylinux.py", compiled_wheel, tampered, "--out-dir", out)
    assert result.returncode == 1
    assert f"error MNL006: {tampered.name}: RECORD does not match the wheel" in result.stderr
    assert "ds4_context_core/_privacy/_walk.py does not match its RECORD entry" in result.stderr
    assert not out.exists() or not any(out.iterdir())


def test_wheels_that_are_not_local_cpython_linux_wheels_are_refused(
    built_dist: Path, compiled_wheel: Path, manylinux_wheel: Path, tmp_path: Path
) -> None:
    pure = built_dist / f"ds4_context_core-{workspace_version()}-py3-none-any.whl"
    for wheel in (pure, manylinux_wheel):
        code, output = _retag(wheel, tmp_path / "out")
        assert code == 1
        assert f"error MNL001: {wheel.name}: not a local CPython platform wheel" in output
    mismatched = Path(
        shutil.copy2(compiled_wheel, tmp_path / compiled_wheel.name.replace(f"-{PYTHON_TAG}-", "-cp399-", 1))
    )
    code, output = _retag(mismatched, tmp_path / "out")
    assert code == 1
    assert f"error MNL001: {mismatched.name}: Python tag cp399 but ABI tag {PYTHON_TAG}" in output
    code, output = _retag(compiled_wheel, tmp_path / "out", "--policy", "manylinux_2_17_aarch64")
    assert code == 1
    assert "error MNL001:" in output
    assert "built for linux_x86_64, the policy is manylinux_2_17_aarch64" in output
    code, output = _retag(compiled_wheel, tmp_path / "out", "--policy", "manylinux2014_x86_64")
    assert code == 1
    assert "error MNL007:" in output


def test_a_failing_auditwheel_refuses_the_wheel(compiled_wheel: Path, tmp_path: Path) -> None:
    failing = shutil.which("false")
    assert failing is not None
    code, output = _retag(compiled_wheel, tmp_path / "out", "--auditwheel", failing)
    assert code == 1
    assert f"error MNL002: {compiled_wheel.name}: auditwheel show failed (exit 1)" in output
    assert not (tmp_path / "out").exists()


def test_the_verdict_refuses_what_auditwheel_reports_for_other_reasons() -> None:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from retag_manylinux import Audit, parse_policy, verdict  # noqa: PLC0415
    finally:
        sys.path.remove(str(SCRIPTS))
    policy = parse_policy("manylinux_2_17_x86_64")
    assert policy is not None
    symbols = {"libc.so.6": ["GLIBC_2.14", "GLIBC_2.2.5"]}
    fine = Audit("manylinux_2_5_x86_64", "manylinux_2_5_x86_64", {}, symbols, unsupported_isa=False)
    assert verdict("w.whl", fine, policy) == []
    isa = Audit("linux_x86_64", "manylinux_2_17_x86_64", {}, symbols, unsupported_isa=True)
    (problem,) = verdict("w.whl", isa, policy)
    assert problem.code == "MNL005"
    assert "consistent only with linux_x86_64" in problem.message
    assert "instruction set extensions" in problem.message
    unknown = Audit("linux_x86_64", "linux_x86_64", {}, {"libc.so.6": ["GLIBC_2.99"]}, unsupported_isa=False)
    (problem,) = verdict("w.whl", unknown, policy)
    assert problem.code == "MNL004"
    assert "fit no manylinux policy (auditwheel: linux_x86_64) (libc.so.6: GLIBC_2.99)" in problem.message
