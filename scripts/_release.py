"""Shared facts and helpers for the release scripts (standard library only).

Every failure a release script reports is a :class:`ReleaseError` carrying a stable code. The codes are
listed in ``docs/contributing/release.md``; scripts print them as ``error CODE: message`` on stderr.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DISTRIBUTIONS",
    "ROOT",
    "Distribution",
    "ReleaseError",
    "Requirement",
    "is_release_version",
    "normalize_name",
    "parse_requirement",
    "release_line",
    "report",
]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Distribution:
    """One of the three lockstep distributions."""

    name: str  # the distribution name, as on the index
    package: str  # the import package

    @property
    def directory(self) -> str:
        """The member directory under ``packages/``."""
        return self.name

    @property
    def file_stem(self) -> str:
        """The name as it appears in wheel and sdist file names."""
        return self.name.replace("-", "_")


DISTRIBUTIONS: tuple[Distribution, ...] = (
    Distribution("ds4-context-core", "ds4_context_core"),
    Distribution("ds4-context-reference-adapter", "ds4_context_reference_adapter"),
    Distribution("ds4-context-engine", "ds4_context_engine"),
)
CORE = DISTRIBUTIONS[0]

# A release version: three release numbers, optional pre-release, post and dev parts, in PEP 440's
# normalized spelling. Ranges, local versions (``+abc``), epochs and two-part versions are refused.
_NUMBER = r"(?:0|[1-9][0-9]*)"
_RELEASE_VERSION = re.compile(
    rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}(?:(?:a|b|rc){_NUMBER})?(?:\.post{_NUMBER})?(?:\.dev{_NUMBER})?"
)


def is_release_version(text: str) -> bool:
    """Whether ``text`` is an exact, normalized PEP 440 release version such as ``0.1.0`` or ``1.2.0rc1``."""
    return _RELEASE_VERSION.fullmatch(text) is not None


def release_line(version: str) -> str:
    """``major.minor`` of a release version: the compatibility golden's file name."""
    major, minor, _ = version.split(".", 2)
    return f"{major}.{minor}"


def normalize_name(name: str) -> str:
    """PEP 503 normalization of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


SIBLING_NAMES = frozenset(dist.name for dist in DISTRIBUTIONS)

_REQUIREMENT = re.compile(
    r"\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?:\[(?P<extras>[^\]]*)\])?\s*"
    r"(?P<spec>[^;]*?)\s*"
    r"(?:;\s*(?P<marker>.*?))?\s*"
)


@dataclass(frozen=True)
class Requirement:
    """A dependency specification, parsed just enough to check sibling pins."""

    name: str  # normalized
    extras: tuple[str, ...]
    specifier: str  # with spaces removed, e.g. "==0.1.0" or ">=4.4,<5"
    marker: str

    @property
    def is_sibling(self) -> bool:
        """Whether it names one of the three lockstep distributions."""
        return self.name in SIBLING_NAMES

    def exact_pin(self) -> str | None:
        """The version of an ``==`` pin on a single exact version, else ``None``."""
        if self.specifier.startswith("==") and "," not in self.specifier and "*" not in self.specifier:
            return self.specifier[2:]
        return None


def parse_requirement(text: str) -> Requirement:
    """Parse a requirement string such as ``ds4-context-core[tiktoken]==0.1.0; extra == 'x'``."""
    match = _REQUIREMENT.fullmatch(text)
    if match is None:
        raise ValueError(f"not a requirement: {text!r}")
    extras = tuple(sorted(e.strip() for e in (match["extras"] or "").split(",") if e.strip()))
    return Requirement(
        name=normalize_name(match["name"]),
        extras=extras,
        specifier=re.sub(r"\s+", "", match["spec"]),
        marker=(match["marker"] or "").strip(),
    )


class ReleaseError(Exception):
    """A release check failed; ``code`` is stable, the message says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def report(problems: Iterable[ReleaseError], *, ok: str) -> int:
    """Print the problems (or the success line) and return the process exit code."""
    found = list(problems)
    for problem in found:
        sys.stderr.write(f"error {problem.code}: {problem.message}\n")
    if found:
        sys.stderr.write(f"{len(found)} problem(s) found\n")
        return 1
    sys.stdout.write(f"{ok}\n")
    return 0
