"""Set one new version on all three distributions at once.

Rewrites every member's ``project.version``, every ``_version.py`` ``__version__``, every exact sibling
pin (``ds4-context-core==X``, ``ds4-context-core[tiktoken]==X``) and the member versions recorded in
``uv.lock``, then runs the lockstep check.

Codes: BMP001 not an exact release version, BMP002 a file lacks what must be rewritten, then the
``check_versions`` codes when the result is still inconsistent.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from _release import DISTRIBUTIONS, ROOT, ReleaseError, is_release_version, report
from check_versions import find_problems, version_file

__all__ = ["bump", "main"]

_SIBLING = "|".join(re.escape(d.name).replace(r"\-", "[-_.]") for d in DISTRIBUTIONS)
# A quoted requirement on a sibling pinned with ==, e.g. "ds4-context-core[tiktoken]==0.1.0; extra == 'x'".
_SIBLING_PIN = re.compile(
    rf"""(?P<head>["'](?:{_SIBLING})\s*(?:\[[^\]]*\])?\s*==\s*)(?P<version>[^"';,\s]+)"""
)
_PROJECT_VERSION = re.compile(r'^(?P<head>version\s*=\s*)"[^"]*"', re.MULTILINE)
_DUNDER_VERSION = re.compile(r'^(?P<head>__version__\s*=\s*)["\'][^"\']*["\']', re.MULTILINE)
_LOCK_MEMBER = re.compile(
    r'(?P<head>\[\[package\]\]\nname = "(?P<name>[^"]+)"\nversion = )"[^"]*"'
    r"(?P<tail>\nsource = \{ (?:editable|virtual) = )"
)


def _rewrite_project_version(text: str, version: str) -> str | None:
    """Replace ``version`` inside the ``[project]`` table only."""
    start = re.search(r"^\[project\]\s*$", text, re.MULTILINE)
    if start is None:
        return None
    following = re.search(r"^\[", text[start.end() :], re.MULTILINE)
    end = start.end() + following.start() if following else len(text)
    section, count = _PROJECT_VERSION.subn(rf'\g<head>"{version}"', text[start.end() : end], count=1)
    return text[: start.end()] + section + text[end:] if count else None


def _edit(path: Path, edit: Callable[[str], str | None], what: str, plan: dict[Path, str]) -> None:
    """Plan ``edit`` of a file when it changes something. Raises BMP002 when ``edit`` finds nothing."""
    try:
        before = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReleaseError("BMP002", f"cannot read {path}: {exc}") from exc
    after = edit(before)
    if after is None:
        raise ReleaseError("BMP002", f"{path}: no {what} to rewrite")
    if after != before:
        plan[path] = after


def bump(root: Path, version: str) -> list[Path]:
    """Rewrite every version and sibling pin under ``root``; returns the files changed.

    Nothing is written unless every file could be rewritten.
    """
    if not is_release_version(version):
        raise ReleaseError(
            "BMP001",
            f"{version!r} is not an exact release version (MAJOR.MINOR.PATCH with optional aN/bN/rcN, "
            ".postN, .devN, in normalized PEP 440 spelling)",
        )
    plan: dict[Path, str] = {}

    def dunder(text: str) -> str | None:
        new, count = _DUNDER_VERSION.subn(rf'\g<head>"{version}"', text, count=1)
        return new if count else None

    def lock(text: str) -> str | None:
        members = {d.name for d in DISTRIBUTIONS}

        def one(match: re.Match[str]) -> str:
            if match["name"] not in members:
                return match[0]
            return f'{match["head"]}"{version}"{match["tail"]}'

        return _LOCK_MEMBER.sub(one, text)

    for dist in DISTRIBUTIONS:
        pyproject = root / "packages" / dist.directory / "pyproject.toml"

        def project(text: str) -> str | None:
            rewritten = _rewrite_project_version(text, version)
            return None if rewritten is None else _SIBLING_PIN.sub(rf"\g<head>{version}", rewritten)

        _edit(pyproject, project, "[project] version", plan)
        _edit(version_file(root, dist.directory, dist.package), dunder, "__version__", plan)
    lock_path = root / "uv.lock"
    if lock_path.exists():
        _edit(lock_path, lock, "member version", plan)
    for path, text in plan.items():
        path.write_text(text, encoding="utf-8")
    return list(plan)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Set one new version on all three distributions.")
    parser.add_argument("version", help="the new exact version, e.g. 0.2.0")
    parser.add_argument("--root", type=Path, default=ROOT, help="workspace root (default: this checkout)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    try:
        changed = bump(root, args.version)
    except ReleaseError as exc:
        return report([exc], ok="")
    for path in changed:
        sys.stdout.write(f"rewrote {path.relative_to(root)}\n")
    _, problems = find_problems(root)
    return report(problems, ok=f"all three distributions are now at {args.version}")


if __name__ == "__main__":
    raise SystemExit(main())
