"""Which concrete paths a policy's deny-write patterns name inside its writable roots.

A mount-based engine cannot bind a glob, only paths. Existing matches are found by walking the writable
roots (symlinks are not followed; a matching directory is protected whole and not descended into). The
literal patterns (``.env``, ``.git/config``, ``.git/hooks/**``) are also protected when they do not exist
yet: an empty placeholder is created so there is something to bind read-only over, because a command that
could create ``.git/hooks/post-checkout`` or ``.git/config`` would get code run on the host later. Glob
patterns such as ``.env.*`` can only protect files that exist when the command starts.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Final

from ._errors import SandboxPolicyError
from ._sandbox import SandboxPolicy, _deny_matchers

__all__ = ["DenyTargets", "find_deny_write_targets"]

_GLOB_CHARACTERS: Final = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class DenyTargets:
    """Absolute paths to bind read-only, and the placeholders created for literal patterns."""

    paths: tuple[str, ...]
    placeholders: tuple[str, ...]


def _literal(pattern: str) -> tuple[str, bool] | None:
    """``(relative path, is a directory)`` for a pattern without glob characters, else ``None``."""
    directory = pattern.endswith("/**")
    body = pattern[:-3] if directory else pattern
    if not body or _GLOB_CHARACTERS & set(body) or body.startswith("/"):
        return None
    parts = body.split("/")
    if any(part in {"", ".", ".."} for part in parts):
        return None
    return body, directory


def _walk(root: str, matchers: tuple[re.Pattern[str], re.Pattern[str]], limit: int, found: set[str]) -> int:
    """Add every path under ``root`` matching a pattern to ``found``; return how many entries were seen."""
    whole, names = matchers
    seen = 0
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # unreadable here is unreadable inside the sandbox too
        for entry in entries:
            seen += 1
            if seen > limit:
                raise SandboxPolicyError(
                    "sandbox-deny-scan-limit",
                    f"a writable root holds more than {limit} entries to check against the deny-write list; "
                    "narrow the writable roots or raise the engine's max_scan_entries",
                )
            if names.fullmatch(entry.name.casefold()) and whole.search(entry.path.casefold()):
                found.add(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return seen


def _placeholder(root: str, relative: str, directory: bool, created: list[str]) -> str:
    """Create the missing literal path (0700 directories, 0600 empty file); return what to bind.

    When a parent on the way is not a directory (a ``.git`` *file*, as git worktrees use), that file is what
    must be protected: rewriting it would point git at a directory of the command's choosing.
    """
    current = root
    parts = relative.split("/")
    for index, part in enumerate(parts):
        current = os.path.join(current, part)
        last = index == len(parts) - 1
        try:
            status = os.lstat(current)
        except FileNotFoundError:
            status = None
        if status is not None:
            if stat.S_ISDIR(status.st_mode):
                continue
            if stat.S_ISLNK(status.st_mode):
                # A mount cannot cover a symlink, and the command could replace it with a directory of its
                # own (a .git with hooks); refuse rather than leave that open.
                raise SandboxPolicyError(
                    "sandbox-deny-path-symlinked",
                    "a protected path such as .git is a symlink, which the sandbox cannot keep read-only",
                )
            return current
        try:
            if last and not directory:
                descriptor = os.open(current, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
                os.close(descriptor)
            else:
                os.mkdir(current, 0o700)
        except OSError:
            raise SandboxPolicyError(
                "sandbox-placeholder-failed",
                "a missing deny-write path could not be created to protect it; the command was not run",
            ) from None
        created.append(current)
    return current


def _check_not_hard_linked(path: str) -> None:
    try:
        status = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(status.st_mode) and status.st_nlink > 1:
        raise SandboxPolicyError(
            "sandbox-deny-path-hard-linked",
            "a deny-write file has another hard link through which it could be written; remove that link",
        )


def find_deny_write_targets(policy: SandboxPolicy, *, max_entries: int) -> DenyTargets:
    """The paths in ``policy``'s writable roots that must be bound read-only, creating placeholders.

    Raises ``sandbox-deny-scan-limit`` past ``max_entries`` entries in total,
    ``sandbox-deny-path-hard-linked`` when a protected file has a second name, and
    ``sandbox-placeholder-failed``.
    """
    found: set[str] = set()
    created: list[str] = []
    seen = 0
    matchers = _deny_matchers(policy.deny_write)
    for root in policy.writable_roots:
        if matchers is None:
            break
        if matchers[0].search(root.casefold()):
            found.add(root)  # the whole root is denied (it lies inside, say, a denied dist/)
            continue
        seen += _walk(root, matchers, max_entries - seen, found)
        for pattern in policy.deny_write:
            literal = _literal(pattern)
            if literal is not None:
                found.add(_placeholder(root, literal[0], literal[1], created))
    targets: set[str] = set()
    writable = tuple(policy.writable_roots)
    for path in found:
        if os.path.islink(path):
            # A mount cannot cover a symlink; protect what it points at when that is writable.
            real = os.path.realpath(path)
            inside = any(real == r or real.startswith(r.rstrip("/") + "/") for r in writable)
            if inside and os.path.exists(real):
                targets.add(real)
            continue
        targets.add(path)
    for path in targets:
        _check_not_hard_linked(path)
    return DenyTargets(paths=tuple(sorted(targets)), placeholders=tuple(created))
