"""Read, Write and Edit: bounded text reads and atomic writes inside the tool roots.

Every path goes through :class:`ToolRoots` first. The file is then opened by its resolved real path with
``O_NOFOLLOW`` (a symlink swapped in after the check is refused, not followed) and ``O_NONBLOCK`` (a FIFO
cannot hang the call). Writes go to a temporary file in the same directory that is fsynced and renamed
over the target, so a reader sees the old content or the new one, never half of it.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import itertools
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO, Final

from ds4_context_core import Ds4ContextError
from ds4_context_engine.runtime._tools._args import EditArgs, ReadArgs, WriteArgs
from ds4_context_engine.runtime._tools._paths import ToolRoots
from ds4_context_engine.runtime._tools._records import ToolLimits, ToolOutcome

__all__ = ["edit_file", "read_file", "write_file"]

_SNIFF_BYTES: Final = 8192
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LINE_CUT: Final = " [ds4: line truncated]"
# Files up to this size are read whole and split in C; larger ones are streamed a line at a time.
_WHOLE_FILE_BYTES: Final = 8 * 1024 * 1024


def _open_regular(real: str) -> tuple[int, os.stat_result]:
    """A read descriptor of the regular file at ``real``, or a coded error."""
    try:
        descriptor = os.open(real, _OPEN_FLAGS)
    except FileNotFoundError:
        raise Ds4ContextError("tool-path-not-found", "no file exists at this path") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise Ds4ContextError(
                "tool-invalid-path", "the path changed into a symlink while checked"
            ) from None
        raise Ds4ContextError(
            "tool-io-failed", f"the file cannot be opened ({errno.errorcode.get(error.errno or 0, 'error')})"
        ) from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        kind = "a directory (use Glob to list it)" if stat.S_ISDIR(status.st_mode) else "not a regular file"
        raise Ds4ContextError("tool-not-a-file", f"the path is {kind}")
    return descriptor, status


def _read_text(real: str, limits: ToolLimits) -> tuple[str, os.stat_result]:
    descriptor, status = _open_regular(real)
    with os.fdopen(descriptor, "rb") as handle:
        if status.st_size > limits.max_file_bytes:
            raise Ds4ContextError(
                "tool-file-too-large", f"the file is larger than {limits.max_file_bytes} bytes"
            )
        data = handle.read(status.st_size + 1)
        if len(data) > status.st_size:  # it grew since fstat: read the rest, up to the cap
            data += handle.read(limits.max_file_bytes + 1 - len(data))
    if len(data) > limits.max_file_bytes:
        raise Ds4ContextError("tool-file-too-large", f"the file is larger than {limits.max_file_bytes} bytes")
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise Ds4ContextError("tool-binary-file", "the file is binary, not text")
    try:
        return data.decode("utf-8"), status
    except UnicodeDecodeError:
        raise Ds4ContextError("tool-binary-file", "the file is not UTF-8 text") from None


def _lines(handle: BinaryIO, cap: int) -> Iterator[tuple[bytes, bool]]:
    """Each line's first ``cap`` bytes and whether it was longer; a huge line is skipped, not held."""
    while True:
        raw = handle.readline(cap)
        if not raw:
            return
        if raw.endswith(b"\n") or len(raw) < cap:
            yield raw, False
            continue
        rest = raw
        while rest and not rest.endswith(b"\n"):
            rest = handle.readline(1 << 16)
        yield raw, True


def _window_whole(
    data: bytes, offset: int, limit: int, limits: ToolLimits
) -> tuple[list[str], int, int | None, int]:
    """The rendered lines of a file read whole: C-level split and decode, Python only per kept line."""
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()  # the empty remainder after a final newline (or of an empty file) is not a line
    total = len(parts)
    window = parts[offset - 1 : offset - 1 + limit]
    try:
        lines = b"\n".join(window).decode("utf-8").split("\n") if window else []
    except UnicodeDecodeError:
        raise Ds4ContextError("tool-binary-file", "the file is not UTF-8 text") from None
    next_offset = offset + len(window) if offset - 1 + limit < total else None
    if b"\r" in data:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    cut = 0
    widest = limits.max_line_chars
    if lines and max(map(len, lines)) > widest:
        cut = sum(1 for line in lines if len(line) > widest)
        lines = [line if len(line) <= widest else line[:widest] + _LINE_CUT for line in lines]
    rendered = list(map("{:>6}\t{}".format, range(offset, offset + len(lines)), lines))
    # Most windows fit: count per line only when the whole window (a bound from above) might not.
    per_line = max(6, len(str(offset + len(window)))) + 2  # the number, the tab and the newline
    if sum(map(len, window)) + per_line * len(window) + cut * len(_LINE_CUT) > limits.read_max_bytes:
        sizes = list(itertools.accumulate(len(line.encode("utf-8")) + 1 for line in rendered))
        keep = max(1, bisect.bisect_right(sizes, limits.read_max_bytes))
        if keep < len(rendered):
            rendered = rendered[:keep]
            next_offset = offset + keep
    return rendered, total, next_offset, cut


def _window_streaming(
    handle: BinaryIO, offset: int, limit: int, limits: ToolLimits
) -> tuple[list[str], int, int | None, int]:
    """The rendered lines of a file too large to read whole, one line at a time (long lines skipped)."""
    out: list[str] = []
    size = 0
    number = 0
    next_offset: int | None = None
    cut_lines = 0
    for number, (raw, cut) in enumerate(_lines(handle, 4 * limits.max_line_chars + 4), start=1):
        if number < offset:
            continue
        if number >= offset + limit:
            next_offset = number
            break
        try:
            # A cut line may end inside a character: drop that partial character, nothing else.
            line = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "ignore" if cut else "strict")
        except UnicodeDecodeError:
            raise Ds4ContextError("tool-binary-file", "the file is not UTF-8 text") from None
        if cut or len(line) > limits.max_line_chars:
            line = line[: limits.max_line_chars] + _LINE_CUT
            cut_lines += 1
        rendered = f"{number:>6}\t{line}"
        size += len(rendered.encode("utf-8")) + 1
        if out and size > limits.read_max_bytes:
            next_offset = number
            break
        out.append(rendered)
    return out, number, next_offset, cut_lines


def read_file(roots: ToolRoots, args: ReadArgs, cwd: str, limits: ToolLimits) -> ToolOutcome:
    lexical = roots.check(args.path, cwd, "read")
    shown = roots.display(lexical, cwd)
    limit = min(args.limit or limits.read_default_lines, limits.read_max_lines)
    descriptor, status = _open_regular(os.path.realpath(lexical))
    with os.fdopen(descriptor, "rb") as handle:
        head = handle.read(_SNIFF_BYTES)
        if b"\x00" in head:
            raise Ds4ContextError("tool-binary-file", "the file is binary, not text; Read shows text only")
        whole = status.st_size <= _WHOLE_FILE_BYTES
        data = head + handle.read(max(1, status.st_size + 1 - len(head))) if whole else b""
        if whole and len(data) <= status.st_size:
            out, number, next_offset, cut_lines = _window_whole(data, args.offset, limit, limits)
        else:  # large, or it grew while read: go line by line
            handle.seek(0)
            out, number, next_offset, cut_lines = _window_streaming(handle, args.offset, limit, limits)
    returned = len(out)
    if next_offset is not None:
        out.append(
            f"[ds4: output stops at line {next_offset - 1}; call Read with offset={next_offset} to continue]"
        )
    elif returned == 0:
        out.append(
            "[ds4: the file is empty]"
            if number == 0
            else f"[ds4: the file has {number} lines; offset {args.offset} is past the end]"
        )
    return ToolOutcome(
        text="\n".join(out),
        is_error=False,
        state="ok",
        details={
            "path": shown,
            "offset": args.offset,
            "limit": limit,
            "lines": returned,
            "bytes": status.st_size,
            "truncated": next_offset is not None or cut_lines > 0,
            "next_offset": next_offset,
        },
    )


def _mode_of(real: str) -> int | None:
    try:
        status = os.lstat(real)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(status.st_mode):
        raise Ds4ContextError("tool-not-a-file", "the path exists and is not a regular file")
    return stat.S_IMODE(status.st_mode)


def _make_parents(directory: str) -> None:
    """Create missing parent directories (0700); the caller checked they lie inside a write root."""
    missing: list[str] = []
    current = directory
    while not os.path.lexists(current):
        missing.append(current)
        current = os.path.dirname(current)
    if not os.path.isdir(current):
        raise Ds4ContextError("tool-not-a-directory", "a parent of the path is not a directory")
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if not os.path.isdir(path):
                raise Ds4ContextError(
                    "tool-not-a-directory", "a parent of the path is not a directory"
                ) from None


def _atomic_write(real: str, data: bytes, mode: int | None) -> None:
    """Replace ``real`` with ``data``: new files are 0600, existing files keep their mode."""
    directory, name = os.path.split(real)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{name[:64]}.", suffix=".ds4-tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, real)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


def _line_count(text: str) -> int:
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def write_file(roots: ToolRoots, args: WriteArgs, cwd: str, limits: ToolLimits) -> ToolOutcome:
    lexical = roots.check(args.path, cwd, "write")
    shown = roots.display(lexical, cwd)
    try:
        data = args.content.encode("utf-8")
    except UnicodeEncodeError:
        raise Ds4ContextError("tool-invalid-arguments", "content is not valid Unicode text") from None
    if len(data) > limits.max_file_bytes:
        raise Ds4ContextError("tool-file-too-large", f"content is larger than {limits.max_file_bytes} bytes")
    real = os.path.realpath(lexical)
    try:
        _make_parents(os.path.dirname(real))
        mode = _mode_of(real)
        _atomic_write(real, data, mode)
    except OSError as error:
        code = errno.errorcode.get(error.errno or 0, "error")
        raise Ds4ContextError("tool-io-failed", f"the file could not be written ({code})") from None
    created = mode is None
    lines = _line_count(args.content)
    verb = "Created" if created else "Overwrote"
    return ToolOutcome(
        text=f"{verb} {shown} ({len(data)} bytes, {lines} lines)",
        is_error=False,
        state="ok",
        details={"path": shown, "bytes": len(data), "lines": lines, "created": created},
    )


def edit_file(roots: ToolRoots, args: EditArgs, cwd: str, limits: ToolLimits) -> ToolOutcome:
    lexical = roots.check(args.path, cwd, "write")
    shown = roots.display(lexical, cwd)
    if args.old_string == args.new_string:
        raise Ds4ContextError(
            "tool-edit-noop", "old_string and new_string are the same; nothing would change"
        )
    real = os.path.realpath(lexical)
    text, status = _read_text(real, limits)
    old, new = args.old_string, args.new_string
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        # The model writes LF; the file uses CRLF. Match and replace in the file's own line endings.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
    if count == 0:
        raise Ds4ContextError("tool-edit-no-match", "old_string does not occur in the file; Read it again")
    if count > 1 and not args.replace_all:
        raise Ds4ContextError(
            "tool-edit-ambiguous",
            f"old_string occurs {count} times; add surrounding lines to make it unique or set replace_all",
        )
    first_line = text.count("\n", 0, text.index(old)) + 1
    replacements = count if args.replace_all else 1
    updated = text.replace(old, new) if args.replace_all else text.replace(old, new, 1)
    data = updated.encode("utf-8")
    if len(data) > limits.max_file_bytes:
        raise Ds4ContextError(
            "tool-file-too-large", f"the result is larger than {limits.max_file_bytes} bytes"
        )
    try:
        _atomic_write(real, data, stat.S_IMODE(status.st_mode))
    except OSError as error:
        code = errno.errorcode.get(error.errno or 0, "error")
        raise Ds4ContextError("tool-io-failed", f"the file could not be written ({code})") from None
    removed = (old.count("\n") + 1) * replacements
    added = (new.count("\n") + 1) * replacements
    return ToolOutcome(
        text=(
            f"Edited {shown}: {replacements} replacement{'s' if replacements != 1 else ''} "
            f"from line {first_line}; {removed} line(s) became {added}"
        ),
        is_error=False,
        state="ok",
        details={
            "path": shown,
            "replacements": replacements,
            "first_line": first_line,
            "lines_removed": removed,
            "lines_added": added,
            "bytes": len(data),
        },
    )
