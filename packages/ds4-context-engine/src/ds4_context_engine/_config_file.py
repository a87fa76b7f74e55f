"""Reading a ``--config`` file: a bounded, non-blocking read of one regular file, then bounded JSON.

A FIFO, socket or device given as the config path must never hang the command or stream without end,
and a JSON document nested thousands deep must not reach the decoder's recursion limit. So the file is
opened with ``O_NONBLOCK`` (an open of a FIFO returns at once), checked with ``fstat`` on the descriptor
that is then read (no gap for a swap between check and read), read up to a size cap, and its nesting is
measured by a linear scan before it is decoded. Symbolic links are followed: a config linked from a
dotfiles checkout is common, the file is only read, and the target itself must be a regular file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Final

from ._exceptions import ConfigFileError

__all__ = ["CONFIG_FILE_MAX_BYTES", "CONFIG_MAX_DEPTH", "read_config_file"]

CONFIG_FILE_MAX_BYTES: Final = 1 << 20
"""A config file is a few hundred bytes; anything over 1 MiB is refused (``config-too-large``)."""
CONFIG_MAX_DEPTH: Final = 64
"""The deepest nesting of arrays and objects accepted; a real config needs three (``config-too-deep``)."""

# a JSON string (skipped whole, so brackets inside it do not count) or one bracket
_STRING_OR_BRACKET: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPENERS: Final = frozenset("[{")
_NOT_REGULAR: Final = "the config path is not a regular file (a directory, FIFO, socket or device)"


def _open_regular(path: Path) -> int:
    """A descriptor of ``path`` opened for reading without blocking; refused unless a regular file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigFileError("config-file-unreadable", "the config file does not exist") from None
    except PermissionError:
        raise ConfigFileError(
            "config-file-unreadable", "the config file cannot be read (permission)"
        ) from None
    except OSError as error:
        if error.errno == errno.ENXIO:  # a socket, or a FIFO with no writer on some systems
            raise ConfigFileError("config-file-unreadable", _NOT_REGULAR) from None
        raise ConfigFileError("config-file-unreadable", "the config file cannot be opened") from None
    except ValueError:  # a NUL in the path
        raise ConfigFileError("config-file-unreadable", "the config path is not a valid file name") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ConfigFileError("config-file-unreadable", _NOT_REGULAR)
    return descriptor


def _read_bounded(descriptor: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        with os.fdopen(descriptor, "rb", buffering=0) as handle:
            while chunk := handle.read(CONFIG_FILE_MAX_BYTES + 1 - size):
                chunks.append(chunk)
                size += len(chunk)
                if size > CONFIG_FILE_MAX_BYTES:
                    raise ConfigFileError(
                        "config-too-large", f"the config file is over {CONFIG_FILE_MAX_BYTES:,} bytes"
                    )
    except OSError:
        raise ConfigFileError("config-file-unreadable", "the config file cannot be read") from None
    return b"".join(chunks)


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than :data:`CONFIG_MAX_DEPTH` in one linear pass, before decoding."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in _OPENERS:
            depth += 1
            if depth > CONFIG_MAX_DEPTH:
                raise ConfigFileError(
                    "config-too-deep", f"the config file nests deeper than {CONFIG_MAX_DEPTH} levels"
                )
        elif len(token) == 1:
            depth -= 1


def read_config_file(path: Path) -> object:
    """The JSON value in ``path`` (normally a mapping for ``load_config``), or a :class:`ConfigFileError`.

    Codes: ``config-file-unreadable`` (missing, no permission, or not a regular file), ``config-too-large``,
    ``config-too-deep`` and ``config-unreadable`` (not UTF-8 JSON).
    """
    data = _read_bounded(_open_regular(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigFileError("config-unreadable", "the config file is not UTF-8 JSON") from None
    _check_depth(text)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError only below a tiny interpreter recursion limit
        raise ConfigFileError("config-unreadable", "the config file is not readable JSON") from None
