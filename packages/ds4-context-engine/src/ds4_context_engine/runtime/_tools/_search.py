"""Glob and Grep: bounded walks of a directory inside the read roots.

Walks never follow symlinked directories and skip ``.git``; a symlinked file is listed only when what it
points at is readable too. Every walk stops after ``walk_max_entries`` entries and says so. Grep runs the
pattern with the ``regex`` module's timeout, because a pattern such as ``(x+x+)+y`` takes exponential time
under any backtracking engine and the stdlib ``re`` cannot be interrupted.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from ds4_context_core import Ds4ContextError
from ds4_context_engine.runtime._sandbox import _glob_regex
from ds4_context_engine.runtime._tools._args import GlobArgs, GrepArgs
from ds4_context_engine.runtime._tools._paths import ToolRoots
from ds4_context_engine.runtime._tools._records import ToolLimits, ToolOutcome

if TYPE_CHECKING:
    import regex

__all__ = ["compile_glob", "glob_files", "grep_files"]

_SKIP_DIRECTORIES: Final = frozenset({".git"})
_MAX_ALTERNATIVES: Final = 64
_GREP_LINE_CHARS: Final = 500
_SNIFF_BYTES: Final = 8192
_BRACES: Final = re.compile(r"\{([^{}]*)\}")


def _expand_braces(pattern: str) -> list[str]:
    """``a.{py,md}`` -> ``a.py``, ``a.md``; at most 64 alternatives in all."""
    pending, done = [pattern], []
    while pending:
        item = pending.pop()
        match = _BRACES.search(item)
        if match is None or "," not in match.group(1):
            done.append(item)
        else:
            for choice in match.group(1).split(","):
                pending.append(item[: match.start()] + choice + item[match.end() :])
        if len(pending) + len(done) > _MAX_ALTERNATIVES:
            raise Ds4ContextError(
                "tool-invalid-glob", f"the glob expands to more than {_MAX_ALTERNATIVES} patterns"
            )
    return done


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex matching relative ``/``-separated paths; refuses absolute globs and ``..``."""
    if "\x00" in pattern or pattern.startswith("/") or ".." in pattern.split("/"):
        raise Ds4ContextError(
            "tool-invalid-glob", "the glob must be relative to the search path, without '..' or NUL"
        )
    bodies = [_glob_regex(item.removeprefix("./")) for item in _expand_braces(pattern)]
    return re.compile("|".join(f"(?:{body})" for body in bodies), re.DOTALL)


class _Walk:
    """Files below ``base`` as ``(absolute path, relative path)``, bounded by entry count."""

    def __init__(self, roots: ToolRoots, base: str, limit: int, stop: threading.Event) -> None:
        self.roots, self.base, self.limit, self.stop = roots, base, limit, stop
        self.seen = 0
        self.exhausted = False
        self.prefix = len(base.rstrip(os.sep)) + 1  # entry paths all start with base + "/"

    def __iter__(self) -> Iterator[tuple[str, str]]:
        stack = [self.base]
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(directory) as listing:
                    entries = sorted(listing, key=lambda entry: entry.name)
            except OSError:
                continue  # unreadable: nothing to list
            subdirectories: list[str] = []
            for entry in entries:
                if self.stop.is_set():
                    return
                self.seen += 1
                if self.seen > self.limit:
                    self.exhausted = True
                    return
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in _SKIP_DIRECTORIES:
                            subdirectories.append(entry.path)
                        continue
                    if entry.is_symlink():
                        if not (entry.is_file() and self.roots.real_inside_read_roots(entry.path)):
                            continue
                    elif not entry.is_file(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                yield entry.path, entry.path[self.prefix :].replace(os.sep, "/")
            stack.extend(reversed(subdirectories))


def _search_base(roots: ToolRoots, path: str | None, cwd: str) -> str:
    lexical = cwd if path is None else roots.check(path, cwd, "read")
    if not os.path.exists(lexical):
        raise Ds4ContextError("tool-path-not-found", "nothing exists at this path")
    return lexical


def glob_files(
    roots: ToolRoots, args: GlobArgs, cwd: str, limits: ToolLimits, stop: threading.Event
) -> ToolOutcome:
    matcher = compile_glob(args.pattern)
    base = _search_base(roots, args.path, cwd)
    if not os.path.isdir(base):
        raise Ds4ContextError("tool-not-a-directory", "Glob searches a directory; the path is a file")
    walk = _Walk(roots, base, limits.walk_max_entries, stop)
    found = sorted(path for path, relative in walk if matcher.fullmatch(relative))
    shown = [roots.display(path, cwd) for path in found[: limits.glob_max_results]]
    lines = list(shown) or ["[ds4: no files match]"]
    if len(found) > limits.glob_max_results:
        lines.append(f"[ds4: {len(found) - limits.glob_max_results} more matches not shown; narrow the glob]")
    if walk.exhausted:
        lines.append(f"[ds4: stopped after {limits.walk_max_entries} entries; search a smaller directory]")
    return ToolOutcome(
        text="\n".join(lines),
        is_error=False,
        state="ok",
        details={
            "path": roots.display(base, cwd),
            "hit_count": len(found),
            "shown": len(shown),
            "truncated": walk.exhausted or len(found) > len(shown),
        },
    )


def _file_text(path: str, limits: ToolLimits) -> str | None:
    """The text of a file to search, or ``None`` when it is binary, too large or unreadable."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_size > limits.grep_max_file_bytes:
            return None
        # Asking for the size (not the cap) keeps a big buffer from being allocated for a small file.
        data = handle.read(min(status.st_size, limits.grep_max_file_bytes) + 1)
    if len(data) > limits.grep_max_file_bytes or b"\x00" in data[:_SNIFF_BYTES]:
        return None
    return data.decode("utf-8", "replace")


class _GrepScan:
    """The running totals of one Grep call; ``file`` searches one file's lines under the deadline."""

    def __init__(
        self, roots: ToolRoots, pattern: regex.Pattern[str], cwd: str, limits: ToolLimits, max_hits: int
    ) -> None:
        self.roots, self.pattern, self.cwd, self.limits, self.max_hits = roots, pattern, cwd, limits, max_hits
        self.deadline = time.monotonic() + limits.grep_timeout_s
        self.out: list[str] = []
        self.out_bytes = 0
        self.hits = self.files_matched = self.files_searched = self.skipped = 0
        self.timed_out = False

    def file(self, path: str, stop: threading.Event) -> None:
        text = _file_text(path, self.limits)
        if text is None:
            self.skipped += 1
            return
        self.files_searched += 1
        matched = False
        # One search call per matching line (and one more per file), not one per line: a search resumes
        # at the start of the next line, so every line is reported once, as grep does.
        position = 0
        number = 1
        while position <= len(text):
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                break
            if stop.is_set():
                break
            try:
                found = self.pattern.search(text, position, concurrent=True, timeout=remaining)
            except TimeoutError:
                self.timed_out = True
                break
            if found is None:
                break
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.start())
            end = len(text) if end == -1 else end
            number += text.count("\n", position, start)
            if start == len(text) and start > 0:
                break  # the empty "line" after a final newline is not a line
            self.hits += 1
            matched = True
            if len(self.out) < self.max_hits and self.out_bytes < self.limits.grep_max_output_bytes:
                line = text[start:end].rstrip("\r")
                shown = line if len(line) <= _GREP_LINE_CHARS else line[:_GREP_LINE_CHARS] + " [ds4: cut]"
                rendered = f"{self.roots.display(path, self.cwd)}:{number}:{shown}"
                self.out_bytes += len(rendered.encode("utf-8", "replace")) + 1
                self.out.append(rendered)
            position = end + 1
            number += 1
        self.files_matched += matched


def _compile_pattern(args: GrepArgs, limits: ToolLimits) -> regex.Pattern[str]:
    import regex  # noqa: PLC0415 - its import costs more than the rest of the runtime; only Grep needs it

    if len(args.pattern) > limits.grep_max_pattern_chars:
        raise Ds4ContextError(
            "tool-invalid-regex", f"the pattern is longer than {limits.grep_max_pattern_chars} characters"
        )
    try:
        flags = regex.MULTILINE | (regex.IGNORECASE if args.case_insensitive else 0)
        return regex.compile(args.pattern, flags)
    except (regex.error, OverflowError, ValueError) as error:
        raise Ds4ContextError(
            "tool-invalid-regex", f"the pattern is not a valid regular expression: {error}"
        ) from None


def grep_files(
    roots: ToolRoots, args: GrepArgs, cwd: str, limits: ToolLimits, stop: threading.Event
) -> ToolOutcome:
    pattern = _compile_pattern(args, limits)
    file_filter = None if args.glob is None else compile_glob(args.glob)
    whole_path = args.glob is not None and "/" in args.glob
    base = _search_base(roots, args.path, cwd)
    scan = _GrepScan(
        roots, pattern, cwd, limits, min(args.max_results or limits.grep_max_hits, limits.grep_max_hits)
    )
    walk: _Walk | None = None
    if os.path.isdir(base):
        walk = _Walk(roots, base, limits.walk_max_entries, stop)
        candidates: Iterator[tuple[str, str]] = iter(walk)
    else:
        candidates = iter([(base, os.path.basename(base))])
    for path, relative in candidates:
        name = relative if whole_path else relative.rsplit("/", 1)[-1]
        if file_filter is not None and not file_filter.fullmatch(name):
            continue
        scan.file(path, stop)
        if scan.timed_out or stop.is_set():
            break
    exhausted = walk is not None and walk.exhausted
    lines = scan.out or ["[ds4: no matches]"]
    if scan.hits > len(scan.out):
        lines.append(f"[ds4: {scan.hits - len(scan.out)} more matching lines not shown; narrow the search]")
    if exhausted:
        lines.append(f"[ds4: stopped after {limits.walk_max_entries} entries; search a smaller directory]")
    if scan.skipped:
        lines.append(
            f"[ds4: {scan.skipped} file(s) not searched: binary, unreadable or over "
            f"{limits.grep_max_file_bytes} bytes]"
        )
    details: dict[str, str | int | float | bool | None] = {
        "path": roots.display(base, cwd),
        "hit_count": scan.hits,
        "files_matched": scan.files_matched,
        "files_searched": scan.files_searched,
        "files_skipped": scan.skipped,
        "truncated": exhausted or scan.hits > len(scan.out) or scan.timed_out,
    }
    if scan.timed_out:
        lines.append(
            f"[ds4: the search passed its {limits.grep_timeout_s:g} s bound; "
            "results are partial (tool-search-timeout)]"
        )
        return ToolOutcome(
            text="\n".join(lines), is_error=True, state="timeout", code="tool-search-timeout", details=details
        )
    return ToolOutcome(text="\n".join(lines), is_error=False, state="ok", details=details)
