"""Check a directory of built distributions before anything is published.

For each of the three distributions there must be exactly one pure wheel and one sdist, all at one
version. With ``--compiled [3.11 ...]`` core additionally has its mypyc-compiled release wheels beside
its pure one (the fallback for every other platform): one per CPython (exactly the ones named, when
named), each tagged for that CPython and a manylinux policy (``cp311-cp311-manylinux_2_17_x86_64.
manylinux2014_x86_64``, as ``retag_manylinux.py`` writes it: never the local ``linux_x86_64``), with the
same tags in its ``WHEEL`` file, an extension module of each module in ``COMPILED_MODULES`` beside its
``.py`` source, extension file names built for that CPython and architecture, exactly the pure wheel's
other files (same bytes) and a ``RECORD`` that matches. A wheel may hold only its own import package and
its ``.dist-info``; ``py.typed`` must be in it; its METADATA name and version must match the file name;
an adapter must pin core with ``==`` to the same version, and core must depend on no sibling. An sdist
must unpack into one ``name-version/`` directory with ``PKG-INFO`` (same version), ``pyproject.toml``,
``README.md`` and its own ``src/`` package only.

Codes: WHL001 missing, duplicate or unexpected file; WHL002 unreadable wheel or bad tags; WHL003 stray
file in a wheel; WHL004 ``py.typed`` missing; WHL005 name or version mismatch; WHL006 sibling pin not
exact or on another version; WHL008 sdist problem; WHL009 a compiled core wheel lacks an extension
module or its ``.py`` source; WHL010 a compiled wheel's platform tag is not a publishable manylinux
policy; WHL011 its ``WHEEL`` file disagrees with its file name; WHL012 an extension module's file name
does not match the wheel's CPython or architecture; WHL013 its other files differ from the pure wheel's;
WHL014 its ``RECORD`` does not match its files.
"""

from __future__ import annotations

import argparse
import email.parser
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from _dists import (
    WheelFile,
    read_sdist_member,
    read_sdist_names,
    read_wheel,
    record_problems,
    sibling_pin_problems,
)
from _release import DISTRIBUTIONS, Distribution, ReleaseError, report

__all__ = ["COMPILED_MODULES", "check_directory", "check_sdist", "check_wheel", "main"]

# Core modules that the optional compiled wheel ships as mypyc extension modules (hatch_build.py).
COMPILED_MODULES = ("_privacy/_walk",)
PURE_TAGS = "py3-none-any"
_CPYTHON_TAGS = re.compile(r"(?P<python>cp3\d+)-(?P<abi>cp3\d+)-(?P<platforms>(?!any$)[a-z0-9_.]+)")
_PEP600 = re.compile(r"manylinux_2_(?P<minor>\d+)_(?P<arch>[a-z0-9_]+)")
_LEGACY = re.compile(r"(?P<name>manylinux1|manylinux2010|manylinux2014)_(?P<arch>[a-z0-9_]+)")
_LEGACY_MINOR = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
# The multiarch name in CPython's extension suffix on glibc Linux (``.cpython-311-x86_64-linux-gnu.so``).
_MULTIARCH = {"i686": "i386"}


def check_wheel(
    wheel: WheelFile, dist: Distribution, version: str, *, pure: WheelFile | None = None
) -> list[ReleaseError]:
    """Every problem with one distribution's wheel; with ``pure`` (core's pure one), a compiled wheel's."""
    problems: list[ReleaseError] = []
    name = wheel.path.name
    if pure is not None:
        problems += _compiled_problems(wheel, dist, pure)
    elif wheel.tags != PURE_TAGS:
        problems.append(
            ReleaseError("WHL002", f"{name}: tags {wheel.tags}, expected a pure py3-none-any wheel")
        )
    if wheel.version != version:
        problems.append(ReleaseError("WHL005", f"{name}: file version {wheel.version}, expected {version}"))
    meta_name = str(wheel.metadata.get("Name", ""))
    meta_version = str(wheel.metadata.get("Version", ""))
    if meta_name != dist.name or meta_version != wheel.version:
        problems.append(
            ReleaseError(
                "WHL005",
                f"{name}: METADATA says {meta_name} {meta_version}, file name says {dist.name} {version}",
            )
        )
    dist_info = f"{dist.file_stem}-{wheel.version}.dist-info/"
    own = f"{dist.package}/"
    for member in wheel.members:
        if member.endswith("/"):
            continue
        if not member.startswith((own, dist_info)):
            problems.append(
                ReleaseError(
                    "WHL003", f"{name}: stray file {member} (a wheel holds only {own} and {dist_info})"
                )
            )
    if f"{own}py.typed" not in wheel.members:
        problems.append(ReleaseError("WHL004", f"{name}: {own}py.typed is missing"))
    if f"{own}__init__.py" not in wheel.members:
        problems.append(ReleaseError("WHL003", f"{name}: {own}__init__.py is missing"))
    problems += sibling_pin_problems(wheel, version, "WHL006")
    return problems


def _platform_problem(name: str, platforms: str) -> ReleaseError | None:
    """Why a compiled wheel's platform tags are not one publishable manylinux policy, or ``None``."""
    minors: set[int] = set()
    arches: set[str] = set()
    for platform in platforms.split("."):
        pep600, legacy = _PEP600.fullmatch(platform), _LEGACY.fullmatch(platform)
        if pep600:
            minors.add(int(pep600["minor"]))
            arches.add(pep600["arch"])
        elif legacy:
            minors.add(_LEGACY_MINOR[legacy["name"]])
            arches.add(legacy["arch"])
        else:
            local = " (a local build's tag, refused by PyPI: verify and retag it with retag_manylinux.py)"
            hint = local if platform.startswith("linux_") else ""
            return ReleaseError("WHL010", f"{name}: platform tag {platform} is not a manylinux policy{hint}")
    if len(minors) != 1 or len(arches) != 1:
        return ReleaseError(
            "WHL010", f"{name}: platform tags {platforms} name more than one manylinux policy"
        )
    return None


def _contents(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}


def _compiled_problems(wheel: WheelFile, dist: Distribution, pure: WheelFile) -> list[ReleaseError]:
    name = wheel.path.name
    problems: list[ReleaseError] = []
    tags = _CPYTHON_TAGS.fullmatch(wheel.tags)
    if tags is None or tags["python"] != tags["abi"]:
        return [
            ReleaseError("WHL002", f"{name}: tags {wheel.tags}, expected one CPython and platform: cp3XY-...")
        ]
    platform_problem = _platform_problem(name, tags["platforms"])
    if platform_problem is not None:
        problems.append(platform_problem)
    files = _contents(wheel.path)
    dist_info = f"{dist.file_stem}-{wheel.version}.dist-info"
    wheel_lines = files.get(f"{dist_info}/WHEEL", b"").decode("utf-8", "replace").splitlines()
    listed = sorted(line.partition(":")[2].strip() for line in wheel_lines if line.startswith("Tag:"))
    expected = sorted(
        f"{tags['python']}-{tags['abi']}-{platform}" for platform in tags["platforms"].split(".")
    )
    if listed != expected:
        problems.append(
            ReleaseError("WHL011", f"{name}: its WHEEL file lists tags {listed}, its name {expected}")
        )
    if "Root-Is-Purelib: false" not in wheel_lines:
        problems.append(ReleaseError("WHL011", f"{name}: its WHEEL file does not say Root-Is-Purelib: false"))
    extensions = sorted(member for member in files if member.endswith((".so", ".pyd")))
    for module in COMPILED_MODULES:
        stem = f"{dist.package}/{module}"
        if not any(member.startswith(f"{stem}.") for member in extensions):
            problems.append(ReleaseError("WHL009", f"{name}: no compiled extension module for {stem}"))
        if f"{stem}.py" not in files:
            problems.append(ReleaseError("WHL009", f"{name}: {stem}.py is missing beside its compiled one"))
    first = tags["platforms"].split(".")[0]
    arch = _PEP600.fullmatch(first) or _LEGACY.fullmatch(first)
    if arch is not None:
        multiarch = _MULTIARCH.get(arch["arch"], arch["arch"])
        suffix = f".cpython-{tags['python'].removeprefix('cp')}-{multiarch}-linux-gnu.so"
        for member in extensions:
            if not member.endswith(suffix) or not member.startswith(f"{dist.package}/"):
                problems.append(
                    ReleaseError(
                        "WHL012", f"{name}: extension module {member} is not {dist.package}/*{suffix}"
                    )
                )
    reference = _contents(pure.path)
    ignored = {f"{dist_info}/WHEEL", f"{dist_info}/RECORD"}
    ours = {member for member in files if member not in ignored and member not in extensions}
    theirs = {member for member in reference if member not in ignored}
    differing = sorted(
        (ours ^ theirs) | {member for member in ours & theirs if files[member] != reference[member]}
    )
    if differing:
        shown = ", ".join(differing[:5]) + (f" and {len(differing) - 5} more" if len(differing) > 5 else "")
        problems.append(
            ReleaseError(
                "WHL013", f"{name}: differs from the pure {pure.path.name} beyond extensions: {shown}"
            )
        )
    wrong = record_problems(wheel.path)
    if wrong:
        shown = "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")
        problems.append(ReleaseError("WHL014", f"{name}: RECORD does not match the wheel: {shown}"))
    return problems


def check_sdist(path: Path, dist: Distribution, version: str) -> list[ReleaseError]:
    """Every problem with one distribution's sdist."""
    problems: list[ReleaseError] = []
    try:
        names = read_sdist_names(path)
    except ReleaseError as exc:
        return [exc]
    top = f"{dist.file_stem}-{version}"
    for member in names:
        parts = PurePosixPath(member).parts
        if member.startswith("/") or ".." in parts or not parts or parts[0] != top:
            problems.append(ReleaseError("WHL008", f"{path.name}: member {member!r} is outside {top}/"))
        elif len(parts) > 2 and parts[1] == "src" and parts[2] != dist.package:
            problems.append(
                ReleaseError("WHL008", f"{path.name}: stray source {member} (not {dist.package})")
            )
    for required in ("PKG-INFO", "pyproject.toml", "README.md", f"src/{dist.package}/__init__.py"):
        if f"{top}/{required}" not in names:
            problems.append(ReleaseError("WHL008", f"{path.name}: {top}/{required} is missing"))
    pkg_info = read_sdist_member(path, f"{top}/PKG-INFO")
    if pkg_info is not None:
        headers = email.parser.Parser().parsestr(pkg_info, headersonly=True)
        if headers.get("Name") != dist.name or headers.get("Version") != version:
            problems.append(
                ReleaseError(
                    "WHL005",
                    f"{path.name}: PKG-INFO says {headers.get('Name')} {headers.get('Version')}, "
                    f"expected {dist.name} {version}",
                )
            )
    return problems


def check_directory(
    directory: Path, version: str | None = None, *, compiled: Sequence[str] | None = None
) -> tuple[str | None, list[ReleaseError]]:
    """Check every distribution file in ``directory``; the version defaults to core's pure wheel version.

    ``compiled``: core also has compiled wheels, one per CPython; when the sequence is not empty, exactly
    for these versions (``"3.11"``).
    """
    problems: list[ReleaseError] = []
    wheels: dict[str, list[WheelFile]] = {}
    for path in sorted(directory.glob("*.whl")):
        try:
            wheel = read_wheel(path)
        except ReleaseError as exc:
            problems.append(exc)
            continue
        wheels.setdefault(wheel.name, []).append(wheel)
    core = DISTRIBUTIONS[0]
    if version is None:
        core_wheels = [w for w in wheels.get(core.name, []) if w.tags == PURE_TAGS or compiled is None]
        version = core_wheels[0].version if len(core_wheels) == 1 else None
    if version is None:
        problems.append(ReleaseError("WHL001", f"{directory}: expected exactly one pure {core.name} wheel"))
        return None, problems
    known = {dist.name for dist in DISTRIBUTIONS}
    for name in sorted(set(wheels) - known):
        problems.append(ReleaseError("WHL001", f"{directory}: unexpected wheel(s) of {name}"))
    expected_sdists = {f"{dist.file_stem}-{version}.tar.gz": dist for dist in DISTRIBUTIONS}
    for path in sorted(directory.iterdir()):
        if path.suffix != ".whl" and path.name not in expected_sdists and not path.name.startswith("."):
            problems.append(ReleaseError("WHL001", f"{directory}: unexpected file {path.name}"))
    for dist in DISTRIBUTIONS:
        found = wheels.get(dist.name, [])
        if dist == core and compiled is not None:
            problems += _check_core_set(directory, found, version, compiled)
        elif len(found) != 1:
            problems.append(
                ReleaseError("WHL001", f"{directory}: expected one {dist.name} wheel, found {len(found)}")
            )
        else:
            problems += check_wheel(found[0], dist, version)
        sdist = directory / f"{dist.file_stem}-{version}.tar.gz"
        if not sdist.is_file():
            problems.append(ReleaseError("WHL001", f"{directory}: {sdist.name} is missing"))
        else:
            problems += check_sdist(sdist, dist, version)
    return version, problems


def _check_core_set(
    directory: Path, found: list[WheelFile], version: str, pythons: Sequence[str]
) -> list[ReleaseError]:
    """Core's pure wheel and its compiled wheels: one per CPython, each checked against the pure one."""
    core = DISTRIBUTIONS[0]
    problems: list[ReleaseError] = []
    pure = [wheel for wheel in found if wheel.tags == PURE_TAGS]
    platform = [wheel for wheel in found if wheel.tags != PURE_TAGS]
    if len(pure) != 1:
        problems.append(
            ReleaseError(
                "WHL001",
                f"{directory}: expected one pure {core.name} wheel (the fallback for every other platform), "
                f"found {len(pure)}",
            )
        )
    else:
        problems += check_wheel(pure[0], core, version)
    by_python: dict[str, list[WheelFile]] = {}
    for wheel in platform:
        by_python.setdefault(wheel.tags.split("-", 1)[0], []).append(wheel)
    wanted = {f"cp{python.replace('.', '')}" for python in pythons}
    if not platform:
        problems.append(ReleaseError("WHL001", f"{directory}: no compiled {core.name} wheel"))
    for python in sorted(wanted - set(by_python)):
        problems.append(ReleaseError("WHL001", f"{directory}: no compiled {core.name} wheel for {python}"))
    for python, group in sorted(by_python.items()):
        names = ", ".join(wheel.path.name for wheel in group)
        if wanted and python not in wanted:
            problems.append(ReleaseError("WHL001", f"{directory}: unexpected compiled wheel(s) {names}"))
        elif len(group) > 1:
            problems.append(ReleaseError("WHL001", f"{directory}: more than one wheel for {python}: {names}"))
        if len(pure) == 1:
            for wheel in group:
                problems += check_wheel(wheel, core, version, pure=pure[0])
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Check built wheels and sdists before publishing.")
    parser.add_argument("dist", type=Path, help="directory holding the built wheels and sdists")
    parser.add_argument("--version", help="the version every file must carry (default: core's wheel version)")
    parser.add_argument(
        "--compiled",
        nargs="*",
        metavar="PYTHON",
        help="core also has compiled manylinux wheels (exactly for these CPythons, e.g. 3.11 3.12, if named)",
    )
    args = parser.parse_args(argv)
    version, problems = check_directory(args.dist, args.version, compiled=args.compiled)
    kind = ""
    if args.compiled is not None:
        count = sum(1 for path in args.dist.glob(f"{DISTRIBUTIONS[0].file_stem}-*-cp3*.whl"))
        kind = f" (plus {count} compiled core wheel(s))"
    return report(problems, ok=f"{args.dist}: three wheels{kind} and three sdists at {version} are sound")


if __name__ == "__main__":
    raise SystemExit(main())
