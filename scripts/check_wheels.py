"""Check a directory of built distributions before anything is published.

For each of the three distributions there must be exactly one pure wheel and one sdist, all at one
version. With ``--compiled``, core's wheel must instead be the optional mypyc-compiled one: tagged for
one CPython and platform (``cp311-cp311-linux_x86_64``), holding the extension module of each module in
``COMPILED_MODULES`` beside its ``.py`` source; the adapters' wheels stay pure. A wheel may hold only
its own import package and its ``.dist-info``; ``py.typed`` must be in it; its METADATA name and version
must match the file name; an adapter must pin core with ``==`` to the same version, and core must depend
on no sibling. An sdist must unpack into one ``name-version/`` directory
with ``PKG-INFO`` (same version), ``pyproject.toml``, ``README.md`` and its own ``src/`` package only.

Codes: WHL001 missing, duplicate or unexpected file; WHL002 unreadable wheel or bad tags; WHL003 stray
file in a wheel; WHL004 ``py.typed`` missing; WHL005 name or version mismatch; WHL006 sibling pin not
exact or on another version; WHL008 sdist problem; WHL009 a compiled core wheel lacks an extension
module or its ``.py`` source.
"""

from __future__ import annotations

import argparse
import email.parser
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from _dists import WheelFile, read_sdist_member, read_sdist_names, read_wheel, sibling_pin_problems
from _release import DISTRIBUTIONS, Distribution, ReleaseError, report

__all__ = ["COMPILED_MODULES", "check_directory", "check_sdist", "check_wheel", "main"]

# Core modules that the optional compiled wheel ships as mypyc extension modules (hatch_build.py).
COMPILED_MODULES = ("_privacy_walk",)
_CPYTHON_TAGS = re.compile(r"cp3\d+-cp3\d+-(?!any$)[a-z0-9_.]+")


def check_wheel(
    wheel: WheelFile, dist: Distribution, version: str, *, compiled: bool = False
) -> list[ReleaseError]:
    """Every problem with one distribution's wheel; ``compiled``: core's must be the compiled one."""
    problems: list[ReleaseError] = []
    name = wheel.path.name
    if compiled and dist.name == DISTRIBUTIONS[0].name:
        problems += _compiled_problems(wheel, dist)
    elif wheel.tags != "py3-none-any":
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


def _compiled_problems(wheel: WheelFile, dist: Distribution) -> list[ReleaseError]:
    name = wheel.path.name
    problems: list[ReleaseError] = []
    if not _CPYTHON_TAGS.fullmatch(wheel.tags):
        problems.append(
            ReleaseError("WHL002", f"{name}: tags {wheel.tags}, expected one CPython and platform: cp3XY-...")
        )
    for module in COMPILED_MODULES:
        stem = f"{dist.package}/{module}"
        if not any(
            member.startswith(f"{stem}.") and member.endswith((".so", ".pyd")) for member in wheel.members
        ):
            problems.append(ReleaseError("WHL009", f"{name}: no compiled extension module for {stem}"))
        if f"{stem}.py" not in wheel.members:
            problems.append(ReleaseError("WHL009", f"{name}: {stem}.py is missing beside its compiled one"))
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
    directory: Path, version: str | None = None, *, compiled: bool = False
) -> tuple[str | None, list[ReleaseError]]:
    """Check every distribution file in ``directory``; the version defaults to core's wheel version."""
    problems: list[ReleaseError] = []
    wheels: dict[str, list[WheelFile]] = {}
    for path in sorted(directory.glob("*.whl")):
        try:
            wheel = read_wheel(path)
        except ReleaseError as exc:
            problems.append(exc)
            continue
        wheels.setdefault(wheel.name, []).append(wheel)
    if version is None:
        core_wheels = wheels.get(DISTRIBUTIONS[0].name, [])
        version = core_wheels[0].version if len(core_wheels) == 1 else None
    if version is None:
        problems.append(
            ReleaseError("WHL001", f"{directory}: expected exactly one {DISTRIBUTIONS[0].name} wheel")
        )
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
        if len(found) != 1:
            problems.append(
                ReleaseError("WHL001", f"{directory}: expected one {dist.name} wheel, found {len(found)}")
            )
        else:
            problems += check_wheel(found[0], dist, version, compiled=compiled)
        sdist = directory / f"{dist.file_stem}-{version}.tar.gz"
        if not sdist.is_file():
            problems.append(ReleaseError("WHL001", f"{directory}: {sdist.name} is missing"))
        else:
            problems += check_sdist(sdist, dist, version)
    return version, problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Check built wheels and sdists before publishing.")
    parser.add_argument("dist", type=Path, help="directory holding the built wheels and sdists")
    parser.add_argument("--version", help="the version every file must carry (default: core's wheel version)")
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="core's wheel is the optional mypyc-compiled one (the adapters' stay pure)",
    )
    args = parser.parse_args(argv)
    version, problems = check_directory(args.dist, args.version, compiled=args.compiled)
    kind = " (core compiled)" if args.compiled else ""
    return report(problems, ok=f"{args.dist}: three wheels{kind} and three sdists at {version} are sound")


if __name__ == "__main__":
    raise SystemExit(main())
