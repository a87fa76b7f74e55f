"""The ``ds4-context-reference`` console command: create, append to, show and verify a history file,
and run the conformance kit against the reference adapter.

Output never contains message content: ``show`` prints identifiers, roles, block kinds and sizes only.
Exit status: 0 success, 1 the history or message was rejected (one line on stderr names the code and
reason), 2 the command line was wrong.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TextIO

import msgspec

from ds4_context_core import CanonicalMessage, Ds4ContextError
from ds4_context_core.conformance import run_runtime_adapter_conformance_sync

from ._conformance import conformance_factory
from ._exceptions import ReferenceMessageRejectedError
from ._jsonl import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_MESSAGES,
    DEFAULT_RUNTIME_ID,
    REFERENCE_HISTORY_FORMAT,
    ReferenceHistory,
    ReferenceHistoryLimits,
    append_reference_history_message,
    create_reference_history,
    read_reference_history,
)
from ._version import __version__

__all__ = ["EXIT_OK", "EXIT_REJECTED", "EXIT_USAGE", "main"]

EXIT_OK: Final = 0
EXIT_REJECTED: Final = 1
EXIT_USAGE: Final = 2

# A message document larger than the largest record the default limits allow is refused unread.
_MAX_MESSAGE_DOCUMENT_BYTES: Final = DEFAULT_MAX_FILE_BYTES
_message_decoder = msgspec.json.Decoder(CanonicalMessage)


def _limits(options: argparse.Namespace) -> ReferenceHistoryLimits:
    return ReferenceHistoryLimits(max_file_bytes=options.max_bytes, max_messages=options.max_messages)


def _read_message_document(source: str) -> CanonicalMessage:
    if source == "-":
        raw = sys.stdin.buffer.read(_MAX_MESSAGE_DOCUMENT_BYTES + 1)
    else:
        try:
            with Path(source).open("rb") as handle:
                raw = handle.read(_MAX_MESSAGE_DOCUMENT_BYTES + 1)
        except OSError:
            raise ReferenceMessageRejectedError("record-invalid", "the message file cannot be read") from None
    if len(raw) > _MAX_MESSAGE_DOCUMENT_BYTES:
        raise ReferenceMessageRejectedError("record-invalid", "the message document is too large")
    try:
        return _message_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        raise ReferenceMessageRejectedError(
            "record-invalid", "the input is not one canonical message JSON object"
        ) from None


def _summary(history: ReferenceHistory) -> dict[str, object]:
    snapshot = history.snapshot
    return {
        "format": REFERENCE_HISTORY_FORMAT,
        "runtimeId": snapshot.runtime_id,
        "sessionId": snapshot.session_id,
        "projectRoot": snapshot.project_root,
        "revision": snapshot.revision,
        "sizeBytes": history.size_bytes,
        "messages": len(snapshot.messages),
        "toolAtomicGroups": len(snapshot.tool_atomic_groups),
        "incompleteToolAtomicGroups": sum(1 for group in snapshot.tool_atomic_groups if not group.complete),
    }


class _MessageRow(msgspec.Struct, frozen=True, kw_only=True):
    line: int
    id: str
    role: str
    blocks: tuple[str, ...]
    bytes: int


def _message_rows(history: ReferenceHistory, last: int) -> list[_MessageRow]:
    """Metadata of the last ``last`` messages: line, id, role, block kinds and encoded size."""
    messages = history.messages
    first = max(len(messages) - last, 0)
    return [
        _MessageRow(
            line=first + offset + 2,
            id=message.id,
            role=message.role,
            blocks=tuple(str(type(block).__struct_config__.tag) for block in message.blocks),
            bytes=len(msgspec.json.encode(message.blocks)),
        )
        for offset, message in enumerate(messages[first:])
    ]


def _command_create(options: argparse.Namespace, out: TextIO) -> int:
    header = create_reference_history(
        options.path,
        session_id=options.session_id,
        project_root=options.project_root,
        runtime_id=options.runtime_id,
    )
    out.write(f"created {options.path} (runtime {header.runtime_id}, session {header.session_id})\n")
    return EXIT_OK


def _command_append(options: argparse.Namespace, out: TextIO) -> int:
    message = _read_message_document(options.message)
    appended = append_reference_history_message(options.path, message, limits=_limits(options))
    out.write(f"appended {appended.message_id} at line {appended.line}\n")
    return EXIT_OK


def _command_show(options: argparse.Namespace, out: TextIO) -> int:
    history = read_reference_history(options.path, limits=_limits(options))
    summary = _summary(history)
    rows = _message_rows(history, options.last)
    if options.json:
        out.write(msgspec.json.encode({"summary": summary, "messages": rows}).decode("utf-8") + "\n")
        return EXIT_OK
    width = max(len(key) for key in summary)
    for key, value in summary.items():
        out.write(f"{key:<{width}}  {value}\n")
    for row in rows:
        blocks = ",".join(row.blocks)
        out.write(f"{row.line:>7}  {row.role:<9}  {row.id}  [{blocks}]  {row.bytes} bytes\n")
    return EXIT_OK


def _command_verify(options: argparse.Namespace, out: TextIO) -> int:
    history = read_reference_history(
        options.path,
        limits=_limits(options),
        runtime_id=options.runtime_id,
        session_id=options.session_id,
        trusted_project_root=options.trusted_project_root,
    )
    out.write(f"ok: {len(history.messages)} messages, revision {history.revision}\n")
    return EXIT_OK


def _command_conformance(options: argparse.Namespace, out: TextIO) -> int:
    report = run_runtime_adapter_conformance_sync(conformance_factory, backend=options.backend)
    if options.json:
        out.write(msgspec.json.encode(report).decode("utf-8") + "\n")
    else:
        out.write(f"{report.version} {report.contract_version} {report.factory_name}\n")
        for case in report.cases:
            verdict = "passed" if case.passed else f"FAILED {case.failure_code}"
            out.write(f"  {case.id:<18} {verdict}\n")
        out.write("passed\n" if report.passed else "FAILED\n")
    return EXIT_OK if report.passed else EXIT_REJECTED


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be zero or more")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ds4-context-reference",
        description="Create, append to, inspect and verify ds4-runtime-session-v1 history files.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_limits(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_FILE_BYTES, help="file size limit")
        sub.add_argument("--max-messages", type=int, default=DEFAULT_MAX_MESSAGES, help="message count limit")

    create = commands.add_parser("create", help="create a new history file (never overwrites)")
    create.add_argument("path")
    create.add_argument("--session-id", required=True)
    create.add_argument("--project-root", required=True, help="stored as its realpath")
    create.add_argument("--runtime-id", default=DEFAULT_RUNTIME_ID)

    append = commands.add_parser("append", help="append one canonical message (JSON) to a history file")
    append.add_argument("path")
    append.add_argument(
        "--message", default="-", help="file holding the message JSON; '-' (default) is stdin"
    )
    with_limits(append)

    show = commands.add_parser("show", help="print the header, revision and counts (never message content)")
    show.add_argument("path")
    show.add_argument("--last", type=_count, default=0, metavar="N", help="also list the last N messages")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    with_limits(show)

    verify = commands.add_parser("verify", help="check a history file; exit 0 when valid, 1 with one reason")
    verify.add_argument("path")
    verify.add_argument("--runtime-id")
    verify.add_argument("--session-id")
    verify.add_argument("--trusted-project-root")
    with_limits(verify)

    conformance = commands.add_parser(
        "conformance", help="run the runtime-adapter conformance kit on this adapter"
    )
    conformance.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    conformance.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the process exit code."""
    out = sys.stdout
    options = _parser().parse_args(argv)
    try:
        if options.command == "create":
            return _command_create(options, out)
        if options.command == "append":
            return _command_append(options, out)
        if options.command == "show":
            return _command_show(options, out)
        if options.command == "conformance":
            return _command_conformance(options, out)
        return _command_verify(options, out)
    except Ds4ContextError as error:
        reason = getattr(error, "reason", None)
        line = getattr(error, "line", None)
        where = f" at line {line}" if line is not None else ""
        detail = f" {reason}{where}" if reason else ""
        sys.stderr.write(f"{options.command} failed: {error.code}{detail}\n")
        return EXIT_REJECTED
