"""Fail on any lockstep mismatch in the workspace.

Checks that every member's ``project.version``, every ``_version.py`` ``__version__`` and every member
entry in ``uv.lock`` carry the same release version, and that every dependency on a sibling (including
extras such as ``ds4-context-core[tiktoken]``) is an exact ``==`` pin on that version. uv itself does not
check exact sibling pins inside a workspace, so this script is the guard.

Codes: VER001 invalid version, VER002 member version differs, VER003 ``__version__`` differs or is
missing, VER004 sibling dependency not an exact pin, VER005 sibling pin on another version, VER006
``uv.lock`` out of date, VER007 missing or unreadable file.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _release import CORE, DISTRIBUTIONS, ROOT, ReleaseError, is_release_version, parse_requirement, report

__all__ = ["find_problems", "main", "read_dunder_version", "version_file", "workspace_version"]

_DUNDER_VERSION = re.compile(r'^__version__\s*=\s*["\']([^"\']*)["\']', re.MULTILINE)


def _load_pyproject(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ReleaseError("VER007", f"cannot read {path}: {exc}") from exc


def version_file(root: Path, package_dir: str, package: str) -> Path:
    """The ``_version.py`` of a member."""
    return root / "packages" / package_dir / "src" / package / "_version.py"


def read_dunder_version(path: Path) -> str | None:
    """The ``__version__`` literal in a ``_version.py``, or ``None`` when there is none."""
    match = _DUNDER_VERSION.search(path.read_text(encoding="utf-8"))
    return match[1] if match else None


def workspace_version(root: Path = ROOT) -> str:
    """The lockstep version, as declared by the core member."""
    project = _load_pyproject(root / "packages" / CORE.directory / "pyproject.toml").get("project", {})
    version = project.get("version")
    if not isinstance(version, str):
        raise ReleaseError("VER007", f"{CORE.name} declares no static project.version")
    return version


def _requirements(project: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, requirement) for every dependency and optional dependency of a member."""
    found = [("dependencies", str(req)) for req in project.get("dependencies", [])]
    for extra, reqs in sorted(project.get("optional-dependencies", {}).items()):
        found += [(f"optional-dependencies.{extra}", str(req)) for req in reqs]
    return found


def _lock_versions(lock_path: Path) -> dict[str, str]:
    lock = _load_pyproject(lock_path)
    versions: dict[str, str] = {}
    for package in lock.get("package", []):
        source = package.get("source", {})
        if "editable" in source or "virtual" in source:
            versions[str(package.get("name"))] = str(package.get("version"))
    return versions


def find_problems(root: Path = ROOT) -> tuple[str | None, list[ReleaseError]]:
    """Return the lockstep version (when readable) and every mismatch found."""
    problems: list[ReleaseError] = []
    try:
        version = workspace_version(root)
    except ReleaseError as exc:
        return None, [exc]
    if not is_release_version(version):
        problems.append(
            ReleaseError(
                "VER001", f"{CORE.name} version {version!r} is not an exact release version like 0.1.0"
            )
        )
    for dist in DISTRIBUTIONS:
        pyproject = root / "packages" / dist.directory / "pyproject.toml"
        try:
            project = _load_pyproject(pyproject).get("project", {})
        except ReleaseError as exc:
            problems.append(exc)
            continue
        declared = project.get("version")
        if declared != version:
            problems.append(
                ReleaseError("VER002", f"{pyproject}: version {declared!r} differs from lockstep {version!r}")
            )
        vfile = version_file(root, dist.directory, dist.package)
        try:
            dunder = read_dunder_version(vfile)
        except OSError as exc:
            problems.append(ReleaseError("VER007", f"cannot read {vfile}: {exc}"))
        else:
            if dunder != version:
                problems.append(
                    ReleaseError(
                        "VER003", f"{vfile}: __version__ {dunder!r} differs from lockstep {version!r}"
                    )
                )
        for where, text in _requirements(project):
            try:
                requirement = parse_requirement(text)
            except ValueError:
                continue  # not ours to judge; the build backend rejects malformed requirements
            if not requirement.is_sibling:
                continue
            pin = requirement.exact_pin()
            if pin is None:
                problems.append(
                    ReleaseError(
                        "VER004",
                        f"{pyproject}: {where} {text!r} must pin the sibling exactly: "
                        f"{requirement.name}=={version}",
                    )
                )
            elif pin != version:
                problems.append(
                    ReleaseError("VER005", f"{pyproject}: {where} {text!r} pins {pin}, lockstep is {version}")
                )
    lock_path = root / "uv.lock"
    if lock_path.exists():
        try:
            locked = _lock_versions(lock_path)
        except ReleaseError as exc:
            problems.append(exc)
        else:
            for dist in DISTRIBUTIONS:
                if dist.name in locked and locked[dist.name] != version:
                    problems.append(
                        ReleaseError(
                            "VER006",
                            f"uv.lock records {dist.name} {locked[dist.name]}, lockstep is {version}: "
                            "run `uv lock`",
                        )
                    )
    return version, problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Fail on any lockstep version or sibling pin mismatch.")
    parser.add_argument("--root", type=Path, default=ROOT, help="workspace root (default: this checkout)")
    args = parser.parse_args(argv)
    version, problems = find_problems(args.root.resolve())
    return report(problems, ok=f"lockstep version {version}: all versions and sibling pins agree")


if __name__ == "__main__":
    raise SystemExit(main())
