"""Fail on a relative link in the docs that points at a file that does not exist.

Scans ``README.md``, ``CONTRIBUTING.md``, ``docs/**/*.md`` and ``packages/*/README.md``. Links to other
sites, e-mail addresses and in-page anchors are not followed. Code: DOC001 broken relative link.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from _release import ROOT, ReleaseError, report

__all__ = ["broken_links", "main", "markdown_files"]

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)


def markdown_files(root: Path) -> list[Path]:
    """Every documentation file whose links are checked."""
    found = [root / "README.md", root / "CONTRIBUTING.md"]
    found += sorted((root / "docs").rglob("*.md"))
    found += sorted((root / "packages").glob("*/README.md"))
    return [path for path in found if path.is_file()]


def _targets(text: str) -> Iterator[str]:
    for match in _LINK.finditer(_FENCE.sub("", text)):
        target = match[1]
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue
        yield target


def broken_links(root: Path) -> list[ReleaseError]:
    """DOC001 for every relative link whose file is missing."""
    problems = []
    for path in markdown_files(root):
        for target in _targets(path.read_text(encoding="utf-8")):
            file_part = target.split("#", 1)[0]
            if file_part and not (path.parent / file_part).exists():
                problems.append(ReleaseError("DOC001", f"{path.relative_to(root)}: broken link {target}"))
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Check relative links in the docs.")
    parser.add_argument("--root", type=Path, default=ROOT, help="workspace root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    return report(broken_links(root), ok=f"{len(markdown_files(root))} documentation files: no broken links")


if __name__ == "__main__":
    raise SystemExit(main())
